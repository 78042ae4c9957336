"""Seeded random streams, one per purpose, the same at any number of ranks.

Every random choice in mpiopt draws from its own stream::

    random_stream(seed, "minibatch", epoch)     # the permutation of one epoch
    random_stream(seed, "init_params")           # a model's starting point
    random_stream(seed, 1, block)                # one block of synthetic rows

The stream is ``numpy.random.default_rng(SeedSequence([seed, *keys]))``, where
the purpose path becomes ``keys``: an integer (a rank, a block, an epoch) is
kept as it is, a string is replaced by its CRC-32 (``zlib.crc32`` of its UTF-8
bytes), which is stable across processes and machines, unlike Python's salted
``hash``.  So a stream depends only on the seed and the purpose, never on how
many ranks there are or which rank asks, and a rank draws only the streams it
needs (rank r's part of something keyed by r).

Each key is one 32-bit word of the SeedSequence's entropy, so two paths of the
same length differ whenever a key differs (save for two strings with the same
CRC-32).  One quirk is SeedSequence's: up to four words in all, trailing zero
words do not count, so ``(seed,)`` and ``(seed, 0)`` name the same stream.
Never use a path together with the same path extended by zeros; starting each
purpose with its own string name, as mpiopt does, keeps paths apart.
"""
import numbers
import zlib

import numpy as np

WORD = 1 << 32


def seed_problem(seed):
    """Why ``seed`` cannot seed a stream (a message), or None: a seed is an integer >= 0."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        return f"seed must be an integer >= 0, got {seed!r}"
    return None


def _key(key):
    if isinstance(key, str):
        return zlib.crc32(key.encode("utf-8"))
    if isinstance(key, bool) or not isinstance(key, numbers.Integral):
        raise TypeError(f"a purpose key must be a string or an integer, got {key!r} ({type(key).__name__})")
    if not 0 <= key < WORD:
        raise ValueError(f"an integer purpose key must be in [0, 2**32), got {key}")
    return int(key)


def random_stream(seed, *purpose):
    """A numpy Generator for ``purpose`` (strings and integers) under ``seed``; see the module docstring."""
    problem = seed_problem(seed)
    if problem:
        raise ValueError(problem)
    return np.random.default_rng(np.random.SeedSequence([int(seed), *map(_key, purpose)]))


def stream_words(stream):
    """A PCG64 generator's state as six uint64 (state and increment in two halves each, the cached uint32):
    what a checkpoint keeps of a stream (no pickle)."""
    state = stream.bit_generator.state
    if state["bit_generator"] != "PCG64":
        raise ValueError(f"cannot checkpoint a {state['bit_generator']} stream")
    mask = (1 << 64) - 1
    words = [state["state"]["state"] >> 64, state["state"]["state"] & mask, state["state"]["inc"] >> 64,
             state["state"]["inc"] & mask, state["has_uint32"], state["uinteger"]]
    return np.array(words, dtype=np.uint64)


def restore_stream(stream, words):
    """Put the state :func:`stream_words` gave back into ``stream``."""
    words = [int(word) for word in words]
    stream.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": words[0] << 64 | words[1],
                                                                      "inc": words[2] << 64 | words[3]},
                                  "has_uint32": words[4], "uinteger": words[5]}
