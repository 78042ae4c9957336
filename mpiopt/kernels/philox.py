"""Philox4x32-10, the counter-based generator of the GPU kernels, in numpy.

Salmon, Moraes, Dror and Shaw 2011, "Parallel Random Numbers: As Easy as 1, 2,
3" (Random123's ``philox4x32_R(10, counter, key)``): a 128-bit counter and a
64-bit key give 128 random bits, with no state, so any element of a stream is
computed on its own, by a CUDA thread (``kernels/compress.cu``) or by these
vectorized uint64/uint32 numpy passes, to the same bits.

**Streams.** :func:`philox_key` turns a seed and a purpose path (strings and
integers, as :func:`mpiopt.core.random.random_stream`) into the two key words:
``SeedSequence([seed, *keys]).generate_state(2, uint32)``, computed on the
host.  Element i of the stream (key, step) is word ``i % 4`` of the block with
counter ``(i // 4 low 32 bits, i // 4 high 32 bits, step low, step high)``.

**Uniform numbers.** A word w becomes ``(w >> 8) * 2^-24``: one of the 2^24
multiples of 2^-24 in [0, 1), exact in float32 and float64, so CUDA and numpy
give the same value bit for bit in either precision.
"""
import numpy as np

from ..core.random import _key, seed_problem

MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
WEYL = (0x9E3779B9, 0xBB67AE85)
ROUNDS = 10
MASK32 = 0xFFFFFFFF
UNIT = 2.0 ** -24
CHUNK_BLOCKS = 1 << 14  # blocks per vectorized pass (their uint64 temporaries stay in cache)


def philox_key(seed, *purpose):
    """The two uint32 key words of the stream of ``purpose`` under ``seed`` (see the module docstring)."""
    problem = seed_problem(seed)
    if problem:
        raise ValueError(problem)
    words = np.random.SeedSequence([int(seed), *map(_key, purpose)]).generate_state(2, np.uint32)
    return int(words[0]), int(words[1])


def _round_keys(key, round_):
    return (int(key[0]) + round_ * WEYL[0]) & MASK32, (int(key[1]) + round_ * WEYL[1]) & MASK32


def _rounds(c0, c1, c2, c3, key, first=0, rounds=ROUNDS, scratch=None):
    """Rounds ``first .. rounds - 1`` of Philox4x32 in place on four uint64 arrays holding 32-bit words
    (the 32 x 32-bit products are exact in uint64); ``key`` is the key of round 0."""
    m0, m1 = np.uint64(MULTIPLIERS[0]), np.uint64(MULTIPLIERS[1])
    mask, shift = np.uint64(MASK32), np.uint64(32)
    p0, p1 = scratch if scratch is not None else (np.empty_like(c0), np.empty_like(c2))
    for round_ in range(first, rounds):
        k0, k1 = _round_keys(key, round_)
        np.multiply(c0, m0, out=p0)
        np.multiply(c2, m1, out=p1)
        np.right_shift(p1, shift, out=c0)      # c0 = hi(M1 c2) ^ c1 ^ k0
        c0 ^= c1
        c0 ^= np.uint64(k0)
        np.bitwise_and(p1, mask, out=c1)       # c1 = lo(M1 c2)
        np.right_shift(p0, shift, out=c2)      # c2 = hi(M0 c0) ^ c3 ^ k1
        c2 ^= c3
        c2 ^= np.uint64(k1)
        np.bitwise_and(p0, mask, out=c3)       # c3 = lo(M0 c0)
    return c0, c1, c2, c3


def _stream_rounds(low_words, high, step, key):
    """Philox4x32-10 of the counters (low_words[i], high, step low, step high): the same rounds as
    :func:`_rounds`, with the words that are still the same for every block (rounds 0 to 2) kept as ints."""
    m0, m1 = MULTIPLIERS
    c0 = low_words
    c1, c2, c3 = np.empty_like(c0), np.empty_like(c0), np.empty_like(c0)
    p0, p1 = np.empty_like(c0), np.empty_like(c0)
    mask, shift = np.uint64(MASK32), np.uint64(32)
    step_low, step_high = step & MASK32, step >> 32
    # round 0: c1, c2, c3 are the same for every block
    k0, k1 = _round_keys(key, 0)
    product = step_low * m1
    same0, same1 = (product >> 32) ^ high ^ k0, product & MASK32
    np.multiply(c0, np.uint64(m0), out=p0)
    np.right_shift(p0, shift, out=c2)
    c2 ^= np.uint64(step_high ^ k1)
    np.bitwise_and(p0, mask, out=c3)
    # round 1: c0 and c1 are the same for every block
    k0, k1 = _round_keys(key, 1)
    np.multiply(c2, np.uint64(m1), out=p1)
    np.right_shift(p1, shift, out=c0)
    c0 ^= np.uint64(same1 ^ k0)
    np.bitwise_and(p1, mask, out=c1)
    product = same0 * m0
    np.bitwise_xor(c3, np.uint64((product >> 32) ^ k1), out=c2)
    same3 = product & MASK32
    # round 2: c3 is the same for every block
    k0, k1 = _round_keys(key, 2)
    np.multiply(c0, np.uint64(m0), out=p0)
    np.multiply(c2, np.uint64(m1), out=p1)
    np.right_shift(p1, shift, out=c0)
    c0 ^= c1
    c0 ^= np.uint64(k0)
    np.bitwise_and(p1, mask, out=c1)
    np.right_shift(p0, shift, out=c2)
    c2 ^= np.uint64(same3 ^ k1)
    np.bitwise_and(p0, mask, out=c3)
    return _rounds(c0, c1, c2, c3, key, first=3, scratch=(p0, p1))


def philox4x32(counter, key, rounds=ROUNDS):
    """Philox4x32-R of the counters: ``counter`` is four arrays (or ints) of uint32 words, broadcast
    together, ``key`` two ints; returns the four output words as uint32 arrays."""
    words = np.broadcast_arrays(*(np.asarray(word, dtype=np.uint32) for word in counter))
    wide = [np.array(word, dtype=np.uint64) for word in words]
    return tuple(word.astype(np.uint32) for word in _rounds(*wide, key, rounds=rounds))


def _stream_blocks(key, step, first, last):
    """Per chunk of blocks ``first .. last - 1`` of the stream (key, step): (first block, its four words as
    uint64 arrays).  Chunks never cross a multiple of 2^32 blocks, so a chunk's high counter word is one int."""
    step = int(step)
    if not 0 <= step < 1 << 64:
        raise ValueError(f"a Philox step must be in [0, 2**64), got {step}")
    low = first
    while low < last:
        high = min(last, (low // CHUNK_BLOCKS + 1) * CHUNK_BLOCKS)  # CHUNK_BLOCKS divides 2^32
        words = np.arange(low & MASK32, (low & MASK32) + (high - low), dtype=np.uint64)
        yield low, _stream_rounds(words, low >> 32, step, key)
        low = high


def _stream_chunks(key, step, count, start, dtype, convert):
    """Per chunk: (offset into elements start .. start + count - 1, the chunk's elements of the stream, each
    word passed through ``convert``, as a reused array of ``dtype``)."""
    if not count:
        return
    first, last = start // 4, (start + count - 1) // 4 + 1
    chunk = np.empty((min(CHUNK_BLOCKS, last - first), 4), dtype=dtype)
    for low, words in _stream_blocks(key, step, first, last):
        rows = chunk[:words[0].size]
        for lane, word in enumerate(words):
            rows[:, lane] = convert(word)
        begin, stop = max(start, 4 * low), min(start + count, 4 * (low + rows.shape[0]))
        yield begin - start, rows.reshape(-1)[begin - 4 * low:stop - 4 * low]


def philox_words(key, step, count, start=0):
    """Words ``start .. start + count - 1`` of the stream (key, step), as uint32."""
    out = np.empty(count, dtype=np.uint32)
    for offset, words in _stream_chunks(key, step, count, start, np.uint32, lambda word: word):
        out[offset:offset + words.size] = words
    return out


def _to_unit(word):
    word >>= np.uint64(8)  # < 2^24: exact in float32
    return word


def unit_floats(words, dtype=np.float32):
    """``(w >> 8) * 2^-24`` for uint32 words, in ``dtype`` (float32 or float64): exact, in [0, 1)."""
    dtype = np.dtype(dtype)
    out = (words >> np.uint32(8)).astype(dtype)
    out *= dtype.type(UNIT)
    return out


def philox_uniform(key, step, count, dtype=np.float32, start=0):
    """Uniform numbers ``u_start .. u_{start+count-1}`` of the stream (key, step) in ``dtype``:
    ``(w >> 8) * 2^-24``, exact."""
    dtype = np.dtype(dtype)
    out = np.zeros(count, dtype=dtype)
    return add_uniform(out, key, step, start)


def add_uniform(out, key, step, start=0):
    """``out += u`` in ``out``'s floating dtype, u the elements ``start ..`` of the stream (key, step)
    (exact in float32 and float64, so each sum is rounded once); chunk by chunk, without an array of the
    noise."""
    unit = out.dtype.type(UNIT)
    for offset, noise in _stream_chunks(key, step, out.size, start, out.dtype, _to_unit):
        noise *= unit
        out[offset:offset + noise.size] += noise
    return out
