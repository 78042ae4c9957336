"""QSGD's rounding noise: a counter-based stream, one 32-bit integer hash per element.

Element i of the stream (key, step) is the 32-bit word

    w_i = triple32((i mod 2^32) XOR s_j),   j = i // 2^32,

where ``triple32`` is Chris Wellons' integer hash (hash-prospector, 2018: the
lowest-bias 32-bit hash of three multiplies that it found), on 32-bit unsigned
words, every product modulo 2^32::

    x ^= x >> 17;  x *= 0xED5AD4BB;  x ^= x >> 11;  x *= 0xAC4C1B51;
    x ^= x >> 15;  x *= 0x31848BAB;  x ^= x >> 14

and s_j, the seed of the j-th 2^32 elements, is element 8 j of the Philox
stream of :mod:`.philox` (the low half of word 0 of Philox4x64-10 at counter
(j, step, 0, 0) under the key ``philox_key(seed, *stream_key)``), computed once
per call on the host (:func:`stream_seeds`): a buffer below 2^32 elements has
one seed.  A uniform number is ``(w >> 8) 2^-24`` (:func:`.philox.unit_floats`):
exact in float32 and float64, so every backend gives the same value.

**Why this hash.** Eleven 32-bit operations per element (three multiplies,
four shifts, four xors with the seed's), against Philox4x64-10's 18 wide
products per eight elements, which bound the compiled CPU quantizer; the
operations are 32-bit lanes that AVX2 and AVX-512 (``vpmulld``) and a GPU
thread do natively.  The single-multiply-pair hashes (murmur3's ``fmix32``,
Wellons' ``lowbias32``) fail a chi-square test of adjacent pairs of a counter
stream at 2^24 elements; triple32 passes it, at lag 1 and 2 and between seeds
(tests/test_kernels_compress.py holds the stream to a transcription in Python
integers; the QSGD tests check unbiasedness and the variance bound).  Not a
cryptographic generator, and a bijection of the counter: within one seed's
2^32 elements no word repeats, which stochastic rounding does not mind.

The same definition runs in three places: :func:`hash_words` here (vectorized
uint32 numpy, the reference), the compiled CPU quantizer
(:mod:`.qsgd_fast`, an LLVM ``i32`` intrinsic) and ``kernels/compress.cu``
(``hash32``); the tests hold the last two to the first bit for bit.
"""
import numpy as np

from .philox import add_word_chunks, philox_words

MULTIPLIERS = (0xED5AD4BB, 0xAC4C1B51, 0x31848BAB)
SHIFTS = (17, 11, 15, 14)   # x ^= x >> SHIFTS[r] before multiply r, and once more after the last
SEED_SPAN = 1 << 32         # elements per seed
CHUNK = 1 << 16             # elements per pass of the numpy twin (its temporaries stay in cache)

__all__ = ["MULTIPLIERS", "SHIFTS", "add_uniform", "hash_words", "stream_seeds", "triple32"]


def triple32(x):
    """triple32 of a uint32 array, in place (see the module docstring); returns ``x``."""
    for shift, multiplier in zip(SHIFTS, MULTIPLIERS):
        x ^= x >> np.uint32(shift)
        x *= np.uint32(multiplier)  # modulo 2^32: numpy's unsigned products wrap without a warning
    x ^= x >> np.uint32(SHIFTS[-1])
    return x


def stream_seeds(key, step, count):
    """The seeds s_0 .. s_m of the stream (key, step) for elements 0 .. count - 1 (uint32, at least one)."""
    spans = max(1, -(-int(count) // SEED_SPAN))
    return np.array([philox_words(key, step, 1, start=8 * j)[0] for j in range(spans)], dtype=np.uint32)


def _chunks(seeds, count, start):
    """(offset into start .. start + count - 1, their words as a fresh uint32 array), CHUNK elements at a time
    (a chunk never straddles two seeds: SEED_SPAN is a multiple of CHUNK)."""
    first = start
    while first < start + count:
        last = min(start + count, (first // CHUNK + 1) * CHUNK)
        words = np.arange(first % SEED_SPAN, (last - 1) % SEED_SPAN + 1, dtype=np.uint32)
        words ^= np.uint32(seeds[first // SEED_SPAN])
        yield first - start, triple32(words)
        first = last


def hash_words(seeds, count, start=0):
    """Words ``w_start .. w_{start+count-1}`` of the stream of ``seeds`` (:func:`stream_seeds`) as uint32."""
    out = np.empty(count, dtype=np.uint32)
    for offset, words in _chunks(seeds, count, start):
        out[offset:offset + words.size] = words
    return out


def add_uniform(out, seeds, start=0):
    """``out += u`` in place (``out`` a C-contiguous float32 or float64 array, addressed flat), u the uniform
    numbers ``(w >> 8) 2^-24`` of elements ``start ..`` of the stream of ``seeds``: exact in either precision,
    so each sum is rounded once.  Returns ``out``."""
    return add_word_chunks(out, lambda size: _chunks(seeds, size, start), CHUNK)
