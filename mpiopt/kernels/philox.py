"""Philox4x64-10, the counter-based generator of the GPU kernels, in numpy.

Salmon, Moraes, Dror and Shaw 2011, "Parallel Random Numbers: As Easy as 1, 2,
3" (Random123's ``philox4x64_R(10, counter, key)``): a 256-bit counter and a
128-bit key give four 64-bit words, with no state, so any element of a stream
is computed on its own, by a CUDA thread (``kernels/compress.cu``) or, for a
whole buffer at once, by numpy's own C implementation of the same generator
(``numpy.random.Philox``, which is Random123's Philox4x64-10), to the same bits.

**Streams.** :func:`philox_key` turns a seed and a purpose path (strings and
integers, as :func:`mpiopt.core.random.random_stream`) into the two 64-bit key
words: ``SeedSequence([seed, *keys]).generate_state(2, uint64)``, computed on
the host.  Block b of the stream (key, step) is Philox4x64-10 of the counter
``(b, step, 0, 0)``; element i of the stream is 32 bits of it: the 64-bit
output word ``j = i // 2`` is word ``j % 4`` of block ``j // 4 = i // 8``,
and element i takes its low half for even i, its high half for odd i.  In
words: block ``i // 8``, word ``(i // 2) % 4``, half ``i % 2``.

**numpy's Philox.** ``Philox(key=k, counter=c)`` increments its 256-bit
counter (with carries across the four words) *before* it computes a block, so
its first 64-bit output is word 0 of Philox4x64-10 at counter c + 1, and
``random_raw(m)`` returns the blocks c + 1, c + 2, ... word after word (checked
against :func:`philox4x64` and Random123's known answers by the tests).
:func:`numpy_philox` therefore starts it at ``(step << 64) + b - 1`` (mod
2^256) to produce the stream from block b.  The 64-bit words are split into
their halves, low half first, independently of the machine's byte order.

**Uniform numbers.** A 32-bit half w becomes ``(w >> 8) * 2^-24``: one of the
2^24 multiples of 2^-24 in [0, 1), exact in float32 and float64, so CUDA and
numpy give the same value bit for bit in either precision.

:func:`philox4x64` is a small, vectorized pure-numpy implementation of the
rounds (64 x 64-bit products from 32-bit halves), the reference the tests hold
numpy's generator and the CUDA code to; the streams go through numpy's Philox.
"""
import sys

import numpy as np

from ..core.random import _key, seed_problem

MULTIPLIERS = (0xD2E7470EE14C6C93, 0xCA5A826395121157)
WEYL = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)
ROUNDS = 10
MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF
UNIT = 2.0 ** -24
WORDS_PER_BLOCK = 4      # 64-bit words per Philox4x64 block
ELEMENTS_PER_BLOCK = 8   # 32-bit elements per block
CHUNK_WORDS = 1 << 15    # 64-bit words per pass of the numpy twin (its temporaries stay in cache)


def philox_key(seed, *purpose):
    """The two 64-bit key words of the stream of ``purpose`` under ``seed`` (see the module docstring)."""
    problem = seed_problem(seed)
    if problem:
        raise ValueError(problem)
    words = np.random.SeedSequence([int(seed), *map(_key, purpose)]).generate_state(2, np.uint64)
    return int(words[0]), int(words[1])


def _check_key(key):
    key = tuple(int(word) for word in key)
    if len(key) != 2 or not all(0 <= word <= MASK64 for word in key):
        raise ValueError(f"a Philox4x64 key is two words in [0, 2**64), got {key}")
    return key


def _check_step(step):
    step = int(step)
    if not 0 <= step <= MASK64:
        raise ValueError(f"a Philox step must be in [0, 2**64), got {step}")
    return step


# -- the reference: the rounds in vectorized numpy ---------------------------------------------------------------
def _mulhilo(a, multiplier):
    """(high, low) 64-bit words of the 128-bit products ``a * multiplier`` (uint64 arrays), from 32-bit halves."""
    mask, shift = np.uint64(MASK32), np.uint64(32)
    m_low, m_high = np.uint64(multiplier & MASK32), np.uint64(multiplier >> 32)
    a_low, a_high = a & mask, a >> shift
    low_low, low_high, high_low = a_low * m_low, a_low * m_high, a_high * m_low  # each < 2^64: exact
    cross = (low_low >> shift) + (low_high & mask) + (high_low & mask)            # < 3 2^32
    high = a_high * m_high + (low_high >> shift) + (high_low >> shift) + (cross >> shift)
    return high, a * np.uint64(multiplier)  # the low word: the product modulo 2^64


def philox4x64(counter, key, rounds=ROUNDS):
    """Philox4x64-R of the counters: ``counter`` is four arrays (or ints) of 64-bit words, broadcast together,
    ``key`` two ints; returns the four output words as uint64 arrays.  A reference for the tests (it does
    what Random123's ``philox4x64_R`` does, round by round), not the fast path."""
    c0, c1, c2, c3 = (np.array(word, dtype=np.uint64) for word in
                      np.broadcast_arrays(*(np.asarray(word, dtype=np.uint64) for word in counter)))
    k0, k1 = _check_key(key)
    with np.errstate(over="ignore"):  # the low words wrap modulo 2^64 by design (0-d arrays would warn)
        for round_ in range(rounds):
            if round_:
                k0, k1 = (k0 + WEYL[0]) & MASK64, (k1 + WEYL[1]) & MASK64
            high0, low0 = _mulhilo(c0, MULTIPLIERS[0])
            high1, low1 = _mulhilo(c2, MULTIPLIERS[1])
            c0, c1, c2, c3 = high1 ^ c1 ^ np.uint64(k0), low1, high0 ^ c3 ^ np.uint64(k1), low0
    return c0, c1, c2, c3


# -- the streams, through numpy's Philox ------------------------------------------------------------------------------
def numpy_philox(key, step, block=0):
    """``numpy.random.Philox`` whose ``random_raw`` gives the 64-bit words of the stream (key, step) from block
    ``block`` on (numpy increments the counter before each block: it starts one below)."""
    key, step = _check_key(key), _check_step(step)
    counter = ((step << 64) + int(block) - 1) % (1 << 256)
    return np.random.Philox(key=np.array(key, dtype=np.uint64), counter=counter)


def _halves(raw):
    """The 32-bit halves of uint64 words, low half first: a view on a little-endian machine."""
    if sys.byteorder == "little":
        return raw.view(np.uint32)
    halves = np.empty(2 * raw.size, dtype=np.uint32)
    halves[0::2] = raw & np.uint64(MASK32)
    halves[1::2] = raw >> np.uint64(32)
    return halves


def _stream_chunks(key, step, count, start=0, chunk_words=None):
    """Per chunk: (offset into elements start .. start + count - 1, those elements of the stream (key, step) as
    uint32, a fresh array the caller may change).  One numpy Philox for all the chunks."""
    if count <= 0:
        return
    first, last = start // 2, (start + count - 1) // 2 + 1  # 64-bit words
    generator = numpy_philox(key, step, first // WORDS_PER_BLOCK)
    if first % WORDS_PER_BLOCK:
        generator.random_raw(first % WORDS_PER_BLOCK)  # the words of the first block before `first`
    chunk_words = chunk_words or CHUNK_WORDS
    word = first
    while word < last:
        size = min(chunk_words, last - word)
        halves = _halves(generator.random_raw(size))
        begin, stop = max(start, 2 * word), min(start + count, 2 * (word + size))
        yield begin - start, halves[begin - 2 * word:stop - 2 * word]
        word += size


def philox_words(key, step, count, start=0):
    """Elements ``start .. start + count - 1`` of the stream (key, step) as uint32 (see the module docstring)."""
    out = np.empty(count, dtype=np.uint32)
    for offset, words in _stream_chunks(key, step, count, start):
        out[offset:offset + words.size] = words
    return out


def unit_floats(words, dtype=np.float32):
    """``(w >> 8) * 2^-24`` for uint32 words, in ``dtype`` (float32 or float64): exact, in [0, 1)."""
    dtype = np.dtype(dtype)
    out = (words >> np.uint32(8)).astype(dtype)
    out *= dtype.type(UNIT)
    return out


def philox_uniform(key, step, count, dtype=np.float32, start=0):
    """Uniform numbers ``u_start .. u_{start+count-1}`` of the stream (key, step) in ``dtype``:
    ``(w >> 8) * 2^-24``, exact."""
    return add_uniform(np.zeros(count, dtype=dtype), key, step, start)


def add_uniform(out, key, step, start=0):
    """``out += u`` in place, ``out`` a contiguous float32 or float64 array (addressed flat), u the elements
    ``start ..`` of the stream (key, step) (exact in either precision, so each sum is rounded once); chunk by
    chunk through numpy's Philox, without an array of the whole noise.  Returns ``out``."""
    return add_word_chunks(out, lambda size: _stream_chunks(key, step, size, start, CHUNK_WORDS), 2 * CHUNK_WORDS)


def add_word_chunks(out, chunks, capacity):
    """``out += (w >> 8) 2^-24`` in place for the words of ``chunks(out.size)`` (pairs (offset, a fresh uint32
    array), at most ``capacity`` words each), ``out`` a C-contiguous float32 or float64 array addressed flat:
    exact in either precision, so each sum is rounded once.  The one conversion of a word stream's chunks
    (Philox's here, the 32-bit hash's in :mod:`.hash32`).  Returns ``out``."""
    if out.dtype not in (np.float32, np.float64) or not out.flags.c_contiguous:
        raise TypeError(f"add_uniform takes a C-contiguous float32 or float64 array, got {out.dtype}")
    flat = out.reshape(-1)
    unit = flat.dtype.type(UNIT)
    noise = np.empty(min(flat.size, capacity), dtype=flat.dtype)
    for offset, words in chunks(flat.size):
        words >>= np.uint32(8)                        # < 2^24: a non-negative int32, exact as a float
        part = noise[:words.size]
        np.copyto(part, words.view(np.int32), casting="unsafe")
        part *= unit                                  # exact: a power of two
        flat[offset:offset + part.size] += part
    return out
