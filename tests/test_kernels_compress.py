"""The compressors' kernels (kernels/compress.cu) and their numpy twins (mpiopt.kernels.compress, .philox).

* the numpy twins against independent references (Random123's known answers
  for philox4x64_10, a Philox4x64-10 in Python integers, numpy's own Philox,
  np.packbits, float16 casts, a scalar bfloat16 rounding, argpartition,
  np.add.at, scalar re-computations of QSGD, its unbiasedness and bounds);
* every CUDA source compiles with ``nvcc --ptx`` for sm_80 and sm_90 (skipped
  without nvcc), and a broken source does not;
* the GPU code path against the twins, twice: with CuPy on a GPU
  (``@pytest.mark.gpu``, skipped without CuPy or a device), and "emulated" on
  the CPU: a stand-in for CuPy whose kernel launches are checked against the
  kernels' C signatures and run the kernels' per-element device functions,
  built for the host by nvcc (skipped without nvcc).  Bitwise where the twins
  promise it, and the compressors end to end.
"""
import ctypes
import hashlib
import math
import os
import re
import shutil
import subprocess
import types

import numpy as np
import pytest

from test_compression import bf16_reference  # the scalar reference both files check against
from mpiopt.compression import ErrorFeedback, get_compressor
from mpiopt.compression.qsgd import pack_nibbles, unpack_nibbles
from mpiopt.core import backend
from mpiopt.kernels import compress as kc
from mpiopt.kernels.loader import cuda_source, cuda_sources, nvcc_ptx
from mpiopt.kernels import hash32, philox
from mpiopt.kernels.philox import numpy_philox, philox4x64, philox_key, philox_uniform, philox_words

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")

MASK64 = 2 ** 64 - 1
KNOWN_ANSWERS = [  # Random123's kat_vectors for philox4x64_10: counter, key, result
    ((0, 0, 0, 0), (0, 0), (0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B)),
    ((MASK64,) * 4, (MASK64,) * 2, (0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0)),
    ((0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89),
     (0x452821E638D01377, 0xBE5466CF34E90C6C),
     (0xA528F45403E61D95, 0x38C72DBD566E9788, 0xA5A1610E72FD18B5, 0x57BD43B5E52B7FE6)),
]

def values(n, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def special_floats(dtype=np.float32):
    """Zeros, infinities, NaNs of both signs (one signalling), subnormals, float16/bfloat16 ties and overflow
    edges, as float32 patterns, in ``dtype``."""
    bits = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,
                     0x00000001, 0x807FFFFF, 0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7F7F8000, 0x477FF000,
                     0x477FEFFF, 0x47800000, 0x33000000, 0x33000001, 0x387FC000, 0xB3800000], dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # widening the signalling NaN
        return bits.view(np.float32).astype(dtype)


# -- Philox ------------------------------------------------------------------------------------------------------
def philox4x64_python(counter, key, rounds=10):
    """Philox4x64-R in Python integers, straight from the paper's definition (an independent reference)."""
    multipliers, weyl = (0xD2E7470EE14C6C93, 0xCA5A826395121157), (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)
    c, (k0, k1) = list(counter), key
    for round_ in range(rounds):
        if round_:
            k0, k1 = (k0 + weyl[0]) & MASK64, (k1 + weyl[1]) & MASK64
        p0, p1 = multipliers[0] * c[0], multipliers[1] * c[2]
        c = [(p1 >> 64) ^ c[1] ^ k0, p1 & MASK64, (p0 >> 64) ^ c[3] ^ k1, p0 & MASK64]
    return tuple(c)


def element_reference(key, step, i):
    """Element i of the stream (key, step) from the Python reference: block i // 8, word (i // 2) % 4, the low
    half for even i."""
    word = philox4x64_python((i // 8, step, 0, 0), key)[(i // 2) % 4]
    return word >> 32 if i % 2 else word & 0xFFFFFFFF


def hash_reference(seeds, i):
    """Word i of the hashed stream in Python integers: Wellons' triple32 of (i mod 2^32) ^ seeds[i >> 32]."""
    x = (i & 0xFFFFFFFF) ^ int(seeds[i >> 32])
    for shift, multiplier in [(17, 0xED5AD4BB), (11, 0xAC4C1B51), (15, 0x31848BAB)]:
        x ^= x >> shift
        x = (x * multiplier) & 0xFFFFFFFF
    return x ^ (x >> 14)


def test_hashed_stream_follows_its_definition_at_any_offset():
    key, step = philox_key(5, "qsgd", "grad", 1), 2 ** 40 + 3
    seeds = hash32.stream_seeds(key, step, 10)
    assert seeds.dtype == np.uint32 and seeds.tolist() == [element_reference(key, step, 0)]
    assert hash32.stream_seeds(key, step, 2 ** 32 + 1).tolist() == [element_reference(key, step, 8 * j) for j in [0, 1]]
    count = 2 * hash32.CHUNK + 77
    words = hash32.hash_words(seeds, count)
    for i in [0, 1, 2, 1000, hash32.CHUNK - 1, hash32.CHUNK, count - 1]:
        assert int(words[i]) == hash_reference(seeds, i)
    assert np.array_equal(hash32.hash_words(seeds, 1000, start=hash32.CHUNK - 3), words[hash32.CHUNK - 3:][:1000])
    two = np.array([7, 0xFFFFFFFF], dtype=np.uint32)  # across the first seed's end: i = 2^32 takes the second
    near = hash32.hash_words(two, 6, start=2 ** 32 - 3)
    assert near.tolist() == [hash_reference(two, 2 ** 32 - 3 + t) for t in range(6)]
    for dtype in [np.float32, np.float64]:
        u = hash32.add_uniform(np.zeros(count, dtype=dtype), seeds)
        assert np.array_equal((u * 2 ** 24).astype(np.uint32), words >> 8)  # exact multiples of 2^-24


def test_hashed_stream_is_uniform_and_its_neighbours_independent():
    """Chi-square of the top 4 bits of (w_i, w_{i+1}) and of (w_i under two seeds): 256 cells, 2^16 words,
    against 377.1, the statistic that 255 degrees of freedom exceed with probability 1e-6."""
    count = 1 << 16
    first, second = (hash32.hash_words(hash32.stream_seeds(philox_key(seed, "chi"), 0, count), count + 1) >> 28
                     for seed in (1, 2))
    for a, b in [(first[:-1], first[1:]), (first[:-1], second[:-1])]:
        cells = np.bincount(a.astype(np.int64) * 16 + b, minlength=256)
        expected = count / 256
        assert np.sum((cells - expected) ** 2 / expected) < 377.1


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_philox_matches_the_random123_known_answers(counter, key, expected):
    assert philox4x64_python(counter, key) == expected
    assert tuple(int(word) for word in philox4x64(counter, key)) == expected
    rows = kc.philox_blocks(np.array([counter, counter], dtype=np.uint64), key)
    assert rows.shape == (2, 4) and rows.dtype == np.uint64 and rows.tolist() == [list(expected)] * 2
    # numpy's Philox is the same generator; it increments its counter before each block
    start = (sum(word << (64 * j) for j, word in enumerate(counter)) - 1) % 2 ** 256
    generator = np.random.Philox(key=np.array(key, dtype=np.uint64), counter=start)
    assert tuple(int(word) for word in generator.random_raw(4)) == expected


def test_the_numpy_reference_equals_python_integers_on_random_counters():
    rng = np.random.default_rng(3)
    counters = rng.integers(0, 2 ** 64, (4, 200), dtype=np.uint64)
    counters[:, :4] = [[0] * 4, [MASK64] * 4, [1, 0, MASK64, 2 ** 63], [2 ** 32 - 1, 2 ** 32, 2 ** 63 - 1, 5]]
    key = tuple(int(word) for word in rng.integers(0, 2 ** 64, 2, dtype=np.uint64))
    for rounds in [1, 7, 10]:
        got = np.stack(philox4x64(counters, key, rounds), axis=1)
        for column, row in zip(counters.T, got):
            assert tuple(int(word) for word in row) == philox4x64_python([int(w) for w in column], key, rounds)


def test_numpy_philox_runs_the_blocks_of_the_stream_in_order():
    key = philox_key(5, "qsgd", "grad", 1)
    for step, block in [(0, 0), (7, 0), (2 ** 64 - 1, 0), (2 ** 64 - 1, 3), (12, 2 ** 62)]:
        raw = numpy_philox(key, step, block).random_raw(12)
        for b in range(3):
            expected = philox4x64_python((block + b, step, 0, 0), key)
            assert tuple(int(word) for word in raw[4 * b:4 * b + 4]) == expected, (step, block, b)


def test_philox_words_follow_the_counter_layout_at_any_offset():
    key = philox_key(5, "qsgd", "grad", 1)
    step = 2 ** 40 + 3
    count = 2 * philox.CHUNK_WORDS * 2 + 13  # more than two chunks of numpy's generator
    words = philox_words(key, step, count)
    assert words.dtype == np.uint32 and words.size == count
    for i in [0, 1, 2, 7, 8, 9, 2 * philox.CHUNK_WORDS - 1, 2 * philox.CHUNK_WORDS, count - 2, count - 1]:
        assert words[i] == element_reference(key, step, i), i
    for start in [1, 2, 3, 5, 8, 2 * philox.CHUNK_WORDS - 1, 2 * philox.CHUNK_WORDS + 3]:
        for length in [1, 2, 9, 1001]:
            assert np.array_equal(philox_words(key, step, length, start=start), words[start:start + length])
    assert philox_words(key, 0, 0).size == 0
    top = philox_words(key, 2 ** 64 - 1, 19, start=5)  # the largest step
    assert [int(w) for w in top] == [element_reference(key, 2 ** 64 - 1, 5 + t) for t in range(19)]
    with pytest.raises(ValueError, match="step must be in"):
        philox_words(key, 2 ** 64, 4)
    with pytest.raises(ValueError, match="key is two words"):
        philox_words((1, 2 ** 64), 0, 4)


def test_philox_words_split_the_64_bit_words_the_same_on_either_byte_order(monkeypatch):
    key = philox_key(1, "order")
    little = philox_words(key, 3, 1003, start=1)
    monkeypatch.setattr(philox, "sys", types.SimpleNamespace(byteorder="big"))  # the arithmetic split
    assert np.array_equal(philox_words(key, 3, 1003, start=1), little)


def test_philox_keys_depend_on_seed_and_purpose_only():
    assert philox_key(1, "qsgd", "g", 0) == philox_key(1, "qsgd", "g", 0)
    keys = {philox_key(*path) for path in [(1, "qsgd", "g", 0), (2, "qsgd", "g", 0), (1, "qsgd", "h", 0),
                                           (1, "qsgd", "g", 1), (1, "other", "g", 0)]}
    assert len(keys) == 5 and all(0 <= word < 2 ** 64 for key in keys for word in key)
    assert any(word >= 2 ** 32 for key in keys for word in key)  # 64-bit words
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        philox_key(-1, "qsgd")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_numbers_are_exact_multiples_of_2_to_the_minus_24(dtype):
    key = philox_key(0, "test")
    u = philox_uniform(key, 7, 200001, dtype)
    assert u.dtype == dtype and u.min() >= 0 and u.max() < 1
    scaled = u.astype(np.float64) * 2 ** 24
    assert np.array_equal(scaled, np.floor(scaled))
    assert np.array_equal(scaled.astype(np.uint32), philox_words(key, 7, 200001) >> 8)
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert np.array_equal(kc.uniform(key, 7, 1000, dtype), u[:1000])
    assert np.array_equal(philox_uniform(key, 7, 999, dtype, start=3), u[3:1002])
    assert not np.array_equal(philox_uniform(key, 8, 1000, dtype), u[:1000])
    even, odd = philox_words(key, 7, 200000).reshape(-1, 2).T.astype(np.float64)  # the two halves of a word
    assert abs(np.corrcoef(even, odd)[0, 1]) < 0.01


# -- QSGD --------------------------------------------------------------------------------------------------------
def reference_norms(x, bucket, norm):
    """Scalar Python per bucket: the max, or the float64 squares summed in 16 lanes (element t to lane t % 16)
    and the lanes in order, its square root; times the margin, as float32."""
    out = []
    for start in range(0, x.size, bucket):
        chunk = [float(v) for v in x[start:start + bucket]]
        if norm == "max":
            acc = max(abs(v) for v in chunk)
        else:
            lanes = [0.0] * 16
            for t, v in enumerate(chunk):
                lanes[t % 16] += v * v
            acc = 0.0
            for lane in lanes:
                acc += lane
            acc = math.sqrt(acc)
        out.append(np.float32(acc * kc.NORM_MARGIN))
    return np.array(out, dtype=np.float32)


def reference_levels(x, norms, bits, bucket, key, step):
    """Scalar re-computation of the levels: one hash per element (its seed from the Philox reference), numpy
    scalars of x's dtype."""
    s = 2 ** (bits - 1) - 1
    scalar = x.dtype.type
    levels = np.empty(x.size, dtype=np.int8)
    seeds = [element_reference(key, step, 0)]
    for i, value in enumerate(x):
        u = scalar((hash_reference(seeds, i) >> 8) * 2.0 ** -24)
        norm = norms[i // bucket]
        scale = scalar(s) / scalar(norm) if norm > 0 else scalar(0)
        y = np.floor(value * scale + u)
        levels[i] = int(min(max(y, -s), s))
    return levels


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm", ["l2", "max"])
def test_qsgd_norms_equal_a_scalar_sum_in_the_same_order(norm, dtype):
    x = values(6000, seed=1, dtype=dtype) * 3
    x[128:256] = 0
    for bucket in [1, 7, 16, 100, 128, 1000, 6000, 8192]:  # up to 375 groups of 16: both numpy paths
        got = kc.qsgd_norms(x, bucket, norm)
        assert got.dtype == np.float32 and got.size == -(-x.size // bucket)
        assert np.array_equal(got, reference_norms(x, bucket, norm))
    assert np.array_equal(kc.qsgd_norms(x, 128, norm)[1], 0)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_qsgd_levels_equal_a_scalar_recomputation(bits, dtype):
    x = values(203, seed=2, dtype=dtype)
    x[:40] = 0
    key = philox_key(3, "qsgd", "w", 1)
    norms, stored = kc.qsgd_quantize(x, bits, 50, "l2", 3, ("qsgd", "w", 1), 9)
    assert np.array_equal(norms, kc.qsgd_norms(x, 50))
    levels = reference_levels(x, norms, bits, 50, key, 9)
    if bits == 8:
        assert stored.dtype == np.int8 and np.array_equal(stored, levels)
    else:
        assert stored.dtype == np.uint8 and stored.size == 102 and np.array_equal(stored, pack_nibbles(levels))
        assert stored[-1] >> 4 == 0  # the missing 204th element: a zero high nibble
    decoded = kc.qsgd_dequantize(norms, stored, x.size, bits, 50, dtype=dtype)
    s = 2 ** (bits - 1) - 1
    step = (norms / np.float32(s)).astype(dtype).repeat(50)[:x.size]
    assert decoded.dtype == dtype and np.array_equal(decoded, levels * step)


def test_qsgd_payload_layouts_are_unchanged():
    x = values(1001, seed=4)
    for bits, dtype, size in [(8, np.int8, 1001), (4, np.uint8, 501)]:
        norms, stored = kc.qsgd_quantize(x, bits, 128)
        assert norms.dtype == np.float32 and norms.size == 8 and stored.dtype == dtype and stored.size == size
        assert np.all(np.abs(unpack_nibbles(stored, 1001) if bits == 4 else stored) <= 2 ** (bits - 1) - 1)
        for qsgd in [get_compressor("qsgd", bits=bits, bucket_size=128)]:
            payload, ctx = qsgd.compress(x, "g", step=0)
            assert [(p.dtype, p.size) for p in payload] == [(d, c) for d, c in ctx.parts]
            assert ctx.payload_bytes == size + 4 * 8


@pytest.mark.parametrize("bits", [8, 4])
def test_qsgd_is_reproducible_from_the_seed_and_differs_otherwise(bits):
    x = values(999, seed=5)
    first = kc.qsgd_quantize(x, bits, 64, "max", 1, ("qsgd", "g", 0), 3)[1]
    assert np.array_equal(first, kc.qsgd_quantize(x.copy(), bits, 64, "max", 1, ("qsgd", "g", 0), 3)[1])
    for seed, stream_key, step in [(2, ("qsgd", "g", 0), 3), (1, ("qsgd", "h", 0), 3), (1, ("qsgd", "g", 1), 3),
                                   (1, ("qsgd", "g", 0), 4), (1, ("qsgd", "g", 0), 3 + 2 ** 32)]:
        assert not np.array_equal(first, kc.qsgd_quantize(x, bits, 64, "max", seed, stream_key, step)[1])
    compressor = get_compressor("qsgd", bits=bits, bucket_size=64, norm="max", seed=1, worker=0)
    assert np.array_equal(compressor.compress(x, "g", step=3)[0][1], first)


@pytest.mark.parametrize("bits", [8, 4])
def test_qsgd_kernels_are_unbiased_within_one_level(bits):
    x = values(300, seed=6) * 0.1
    s = 2 ** (bits - 1) - 1
    trials = 600
    decoded = np.empty((trials, x.size))
    for step in range(trials):
        norms, stored = kc.qsgd_quantize(x, bits, 100, "l2", 0, ("t",), step)
        decoded[step] = kc.qsgd_dequantize(norms, stored, x.size, bits, 100)
    width = norms.astype(np.float64).repeat(100) / s
    assert np.all(np.abs(decoded - x) < width * (1 + 1e-6))
    fraction = (np.abs(x) / width) % 1
    spread = width * np.sqrt(fraction * (1 - fraction) / trials)
    assert np.all(np.abs(decoded.mean(axis=0) - x) <= 6 * spread + 1e-7)


# -- sign --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sign_l2_scale_is_accumulated_in_float64(dtype):
    """||x||_2 / sqrt(n) at n = 2^22 to about the rounding of its float32 result, against numpy's pairwise
    float64 sum of the exact squares (a float32 accumulation was 5e-6 off here, 2.5e-5 at 2^24)."""
    n = 2 ** 22
    x = np.random.default_rng(3).standard_normal(n, dtype=dtype) + dtype(1)
    reference = np.sqrt(np.sum(np.square(x.astype(np.float64)))) / np.sqrt(n)
    got = kc.sign_scale(x, "l2")
    assert got.dtype == np.float32 and abs(float(got[0]) - reference) <= 2.0 ** -23 * reference
    assert float(kc.sign_scale(np.full(3, 2e20, dtype=np.float32), "l2")[0]) == pytest.approx(2e20, rel=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sign_pack_and_unpack_follow_packbits(dtype):
    x = np.concatenate([special_floats(dtype), values(1003, seed=7, dtype=dtype)])
    with np.errstate(invalid="ignore", over="ignore"):  # the scale of NaN and inf
        bits, scale = kc.sign_pack(x)
    assert bits.dtype == np.uint8 and np.array_equal(bits, np.packbits(x >= 0))
    assert scale.dtype == np.float32 and scale.shape == (1,) and np.isnan(scale[0])
    finite = x[np.abs(x) < 1e30]  # no NaN, no inf, no overflow of a square
    scale = kc.sign_pack(finite, "l1")[1]
    assert scale[0] == np.float32(np.abs(finite.astype(np.float64)).mean())
    assert kc.sign_pack(finite, "l2")[1][0] == pytest.approx(np.linalg.norm(finite) / np.sqrt(finite.size),
                                                             rel=1e-6)
    decoded = kc.sign_unpack(bits, np.float32([0.75]), x.size, dtype=dtype)
    assert decoded.dtype == dtype
    assert np.array_equal(decoded, np.where(np.unpackbits(bits, count=x.size) == 1, 0.75, -0.75))
    out = np.empty((3, 3), dtype=np.float64)
    assert kc.sign_unpack(np.uint8([0b10100000, 0x80]), np.float32([2]), 9, out=out) is out
    assert out.reshape(-1).tolist() == [2, -2, 2, -2, -2, -2, -2, -2, 2]
    assert kc.sign_pack(np.empty(0, np.float32))[1][0] == 0


# -- Top-K and scatter-add -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_selects_what_argpartition_selects(dtype):
    x = values(5000, seed=8, dtype=dtype)
    for k in [1, 7, 100, 4999]:
        got_values, indices = kc.topk_select(x, k)
        expected = np.sort(np.argpartition(np.abs(x), x.size - k)[x.size - k:])
        assert indices.dtype == np.int32 and np.array_equal(indices, expected)
        assert got_values.dtype == dtype and np.array_equal(got_values, x[expected])
    everything = kc.topk_select(x, x.size)
    assert np.array_equal(everything[1], np.arange(x.size)) and not np.shares_memory(everything[0], x)
    assert [part.size for part in kc.topk_select(x, 0)] == [0, 0]
    with pytest.raises(ValueError, match="k must be in"):
        kc.topk_select(x, x.size + 1)


def test_topk_breaks_ties_towards_lower_indices_and_ranks_nan_highest():
    x = np.float32([1, -3, 2, 3, -2, 3, 0, -3])
    assert kc.topk_select(x, 2)[1].tolist() == [1, 3]
    assert kc.topk_select(x, 4)[1].tolist() == [1, 3, 5, 7]
    assert kc.topk_select(x, 5)[1].tolist() == [1, 2, 3, 5, 7]
    assert kc.topk_select(np.float32([-0.0, 0.0, 0.0]), 2)[1].tolist() == [0, 1]
    y = np.float32([1, np.nan, -np.inf, 5, np.inf])
    assert kc.topk_select(y, 3)[1].tolist() == [1, 2, 4]


@pytest.mark.parametrize("subtract", [False, True])
def test_scatter_add_adds_repeated_indices_as_add_at(subtract):
    rng = np.random.default_rng(9)
    out = values(100, seed=10)
    indices = rng.integers(0, 100, 500).astype(np.int32)
    added = values(500, seed=11)
    expected = out.copy()
    (np.subtract if subtract else np.add).at(expected, indices, added)
    assert kc.scatter_add(out, indices, added, subtract) is out and np.array_equal(out, expected)
    matrix = np.zeros((4, 5))
    kc.scatter_add(matrix, np.int32([0, 19, 19]), np.float32([1, 2, 3]))
    assert matrix[0, 0] == 1 and matrix[3, 4] == 5 and matrix.sum() == 6


# -- fp16 and bf16 -----------------------------------------------------------------------------------------------
def test_bf16_conversion_equals_a_scalar_reference_and_keeps_nan():
    rng = np.random.default_rng(12)
    x = np.concatenate([special_floats(), rng.integers(0, 2 ** 32, 5000, dtype=np.uint64).astype(np.uint32)
                        .view(np.float32), values(1000)])
    got = kc.to_bf16(x)
    assert got.dtype == np.uint16
    for value, bits in zip(x, got):
        expected = bf16_reference(value)
        if expected is None:
            sign = int(np.array(value).view(np.uint32)) >> 31
            assert bits == 0x7FC0 | (sign << 15), f"NaN {value!r} -> {bits:#06x}"
        else:
            assert bits == expected, f"{value!r}: got {bits:#06x}, expected {expected:#06x}"
    wide = values(1000, seed=13, dtype=np.float64) * 1e3
    assert np.array_equal(kc.to_bf16(np.append(wide, 1e300)), kc.to_bf16(np.append(wide.astype(np.float32),
                                                                                  np.inf)))
    back = kc.from_bf16(got)
    assert back.dtype == np.float32 and np.array_equal(back.view(np.uint32), got.astype(np.uint32) << 16)
    out = np.empty(got.size)
    assert kc.from_bf16(got, out=out) is out and np.array_equal(out, back, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fp16_conversion_equals_numpy_casts(dtype):
    x = np.concatenate([special_floats(dtype), (values(3000, seed=14) * 1e3).astype(dtype),
                        (values(3000, seed=15) * 1e-5).astype(dtype),
                        np.array([65504, 65519.99, 65520, 65519.999999, -1e6, 2.0 ** -25, 2.0 ** -24], dtype=dtype)])
    halves = kc.to_fp16(x)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)
    assert halves.dtype == np.float16 and np.array_equal(halves, expected, equal_nan=True)
    assert np.array_equal(np.isnan(halves), np.isnan(x))
    back = kc.from_fp16(halves, dtype=dtype)
    assert back.dtype == dtype and np.array_equal(back, halves.astype(dtype), equal_nan=True)


# -- nvcc --------------------------------------------------------------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", cuda_sources())
def test_every_cuda_source_compiles_with_nvcc(name, arch):
    ok, output = nvcc_ptx(cuda_source(name), arch)
    assert ok, output


@needs_nvcc
def test_a_broken_cuda_source_fails_to_compile():
    broken = cuda_source("compress").replace("u64 next0 = ", "u64 next0 = = ", 1)
    assert broken != cuda_source("compress")
    ok, output = nvcc_ptx(broken, "sm_80")
    assert not ok and "error" in output


@needs_nvcc
def test_the_bitwise_kernels_do_not_flush_subnormals_under_cupys_ftz(tmp_path):
    """CuPy appends -ftz=true to every NVRTC compile (after the caller's options): the kernels whose results
    are compared bit for bit must emit no flushing float32 instruction even then.  Found on an H200, where
    sign_pack took the negative subnormal 0x807FFFFF for >= 0 and to_bf16(float64) flushed subnormals.
    (qsgd_quantize keeps flushing ones on values that are never subnormal: the uniform numbers, which are
    multiples of 2^-24, and the integral levels and bounds it clips and truncates.)"""
    source = tmp_path / "compress.cu"
    source.write_text(cuda_source("compress"), encoding="utf-8")
    done = subprocess.run([NVCC, "--ptx", "-arch=sm_90", "--std=c++17", "-ftz=true", "-o", str(tmp_path / "c.ptx"),
                           str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    ptx = (tmp_path / "c.ptx").read_text(encoding="utf-8")
    entries = dict(re.findall(r"\.entry (\w+)\((.*?)\n}\n", ptx, flags=re.S))
    bitwise = ["sign_pack_f32", "sign_pack_f64", "sign_unpack_f32", "sign_unpack_f64", "to_bf16_f32",
               "to_bf16_f64", "from_bf16_f32", "from_bf16_f64", "from_fp16_f64", "to_fp16_f32", "to_fp16_f64",
               "qsgd_norms_f32", "qsgd_norms_f64", "qsgd_dequantize_f32", "qsgd_dequantize_f64"]
    assert set(bitwise) <= set(entries)
    flushing = {name: sorted(set(re.findall(r"\b\w+(?:\.\w+)*\.ftz(?:\.\w+)*", entries[name]))) for name in bitwise}
    assert not any(flushing.values()), flushing
    quantize = set(re.findall(r"\b\w+(?:\.\w+)*\.ftz(?:\.\w+)*", entries["qsgd_quantize_f32"]))
    assert quantize <= {"mul.ftz.f32", "cvt.rzi.ftz.s32.f32", "setp.gt.ftz.f32", "setp.lt.ftz.f32",
                        "neg.ftz.f32"}, quantize


@needs_nvcc
def test_the_elementwise_kernels_move_16_byte_vectors_and_the_norms_shuffle_lanes(tmp_path):
    """Issue 25: each thread of an elementwise kernel moves VEC elements as 16-byte vectors (ld/st.global.v4 or
    .v2 of doubles) where the arrays are aligned, so that enough bytes are in flight to reach the bandwidth;
    qsgd_norms gives a bucket 16 threads, one per lane, and adds their sums with warp shuffles; sign_pack reads
    x once (ballot for the bits, the scale's sums beside them).  The PTX says so (their results are compared
    with the twins by the GPU tests and, per element, by the host build)."""
    source = tmp_path / "compress.cu"
    source.write_text(cuda_source("compress"), encoding="utf-8")
    done = subprocess.run([NVCC, "--ptx", "-arch=sm_90", "--std=c++17", "-o", str(tmp_path / "c.ptx"), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    entries = dict(re.findall(r"\.entry (\w+)\((.*?)\n}\n", (tmp_path / "c.ptx").read_text(encoding="utf-8"),
                              flags=re.S))
    vectors = {name: set(re.findall(r"\b(ld|st)\.global(?:\.\w+)*\.v[24]\.\w+", body)) for name, body in entries.items()}
    for kind in ["to_fp16", "from_fp16", "to_bf16", "from_bf16"]:
        for suffix in ["f32", "f64"]:
            assert vectors[f"{kind}_{suffix}"] == {"ld", "st"}, (kind, suffix, vectors[f"{kind}_{suffix}"])
    for kind in ["sign_unpack", "qsgd_dequantize"]:  # packed inputs read bytewise, vector stores
        for suffix in ["f32", "f64"]:
            assert "st" in vectors[f"{kind}_{suffix}"], (kind, suffix)
    assert all("shfl.sync" in entries[f"qsgd_norms_{suffix}"] for suffix in ["f32", "f64"])
    # sign_pack in one pass: a warp's ballot for the bits, the scale's partial sums in the same kernel
    assert all("vote.sync.ballot" in entries[f"sign_pack_{suffix}"] and "shfl.sync.down" in entries[f"sign_pack_{suffix}"]
               for suffix in ["f32", "f64"])
    assert kc.VEC == 8 and "#define VEC 8" in cuda_source("compress")


def test_compress_is_an_installed_cuda_source():
    assert "compress" in cuda_sources()
    source = cuda_source("compress")
    assert "typedef unsigned int u32;" in source  # common.cuh, pasted in
    for name in ["qsgd_quantize_f32", "qsgd_dequantize_f64", "sign_pack_f32", "sign_unpack_f64", "topk_compact_f32",
                 "scatter_add_f64", "to_fp16_f32", "from_fp16_f64", "to_bf16_f64", "from_bf16_f32",
                 "philox_uniform_f32", "philox4x64_10_blocks", "qsgd_norms_f64"]:
        assert f'extern "C" __global__ void {name}(' in source


# -- the kernels, on a GPU or emulated on the host -------------------------------------------------------------------
# Every GPU test below runs twice: with CuPy on a GPU (marked gpu; skipped without CuPy or a device), and
# "emulated": a stand-in for CuPy whose arrays are numpy arrays and whose kernel launches check the arguments
# against the kernel's C signature in compress.cu (count, pointer dtypes, exact scalar types) and then run the
# kernel's per-element device functions, built for the host by nvcc (skipped without nvcc).  So the GPU code path
# of mpiopt.kernels.compress and the CUDA arithmetic are both checked on machines without a GPU; the emulated
# kernels run sequentially, so scatter-add's order is fixed there.
HOST_WRAPPERS = r"""
#define HOST_KERNELS(T, S)                                                                                        \
extern "C" void philox_uniform_##S##_host(u64 k0, u64 k1, u64 step, T* out, long long n) {                     \
    for (long long g = 0; 8 * g < n; ++g) philox_uniform_block(k0, k1, step, out, n, g);                       \
}                                                                                                             \
extern "C" void qsgd_norms_##S##_host(const T* x, long long n, long long bucket, int use_max, double margin,     \
                                      float* norms) {                                                         \
    for (long long b = 0; b * bucket < n; ++b) norms[b] = qsgd_norm_of_bucket(x, n, bucket, b, use_max, margin); \
}                                                                                                             \
extern "C" void qsgd_quantize_##S##_host(const T* x, const float* norms, long long n, long long bucket, int bits, \
                                         int levels, const u32* seeds, unsigned char* stored) {               \
    for (long long g = 0; 8 * g < n; ++g)                                                                     \
        qsgd_quantize_group(x, norms, n, bucket, bits, levels, seeds, g, stored);                             \
}                                                                                                             \
extern "C" void qsgd_dequantize_##S##_host(const unsigned char* stored, const float* norms, long long n,        \
                                           long long bucket, int bits, int levels, T* out) {                  \
    for (long long i = 0; i < n; ++i) out[i] = qsgd_decoded<T>(stored, norms, bucket, bits, levels, i);         \
}                                                                                                             \
extern "C" void sign_pack_##S##_host(const T* x, long long n, int square, unsigned char* bits,                 \
                                     double* partials) {                                                      \
    for (long long j = 0; 8 * j < n; ++j) bits[j] = sign_byte(x, n, j);                                       \
    double total = 0.0;                                                                                       \
    for (long long i = 0; i < n; ++i) {                                                                       \
        double d = to_double(x[i]);                                                                           \
        total = add_rn(total, square ? mul_rn(d, d) : (d < 0.0 ? -d : d));                                    \
    }                                                                                                         \
    partials[0] = total;  /* one block's worth; the caller zeroed the rest */                                \
}                                                                                                             \
extern "C" void sign_unpack_##S##_host(const unsigned char* bits, const float* scale, long long n, T* out) {     \
    for (long long i = 0; i < n; ++i) out[i] = sign_value(bits, (T)scale[0], i);                               \
}                                                                                                             \
extern "C" void topk_compact_##S##_host(const T* x, const bool* take, const long long* pos, long long n,         \
                                        T* values, int* indices) {                                            \
    for (long long i = 0; i < n; ++i) topk_compact_one(x, take, pos, values, indices, i);                      \
}                                                                                                             \
extern "C" void scatter_add_##S##_host(T* out, const int* indices, const T* values, long long k) {              \
    for (long long j = 0; j < k; ++j) out[indices[j]] = add_rn(out[indices[j]], values[j]);                   \
}                                                                                                             \
extern "C" void from_bf16_##S##_host(const unsigned short* b, T* out, long long n) {                           \
    for (long long i = 0; i < n; ++i) out[i] = (T)bits_float((u32)b[i] << 16);                                 \
}
HOST_KERNELS(float, f32)
HOST_KERNELS(double, f64)
extern "C" void philox4x64_10_blocks_host(const u64* counters, u64 k0, u64 k1, u64* out, long long blocks) {
    for (long long i = 0; i < blocks; ++i) {
        u64 c[4] = {counters[4 * i], counters[4 * i + 1], counters[4 * i + 2], counters[4 * i + 3]};
        philox4x64_10(c, k0, k1);
        for (int j = 0; j < 4; ++j) out[4 * i + j] = c[j];
    }
}
extern "C" void hashed_elements_at(const u32* seeds, const u64* indices, u32* out, long long count) {
    for (long long j = 0; j < count; ++j) out[j] = hashed_element(seeds, indices[j]);
}
extern "C" void philox_elements_at(u64 k0, u64 k1, u64 step, const u64* indices, u32* out, long long count) {
    for (long long j = 0; j < count; ++j) out[j] = philox_element(k0, k1, step, indices[j]);  /* random access */
}
extern "C" void to_bf16_f32_host(const float* x, unsigned short* out, long long n) {
    for (long long i = 0; i < n; ++i) out[i] = bf16_of_bits(float_bits(x[i]));
}
extern "C" void to_bf16_f64_host(const double* x, unsigned short* out, long long n) {
    for (long long i = 0; i < n; ++i) out[i] = bf16_of_bits(float_bits(to_float_rn(x[i])));
}
"""

SCALAR_TYPES = {"long long": (np.int64, ctypes.c_longlong), "int": (np.int32, ctypes.c_int),
                "u32": (np.uint32, ctypes.c_uint32), "u64": (np.uint64, ctypes.c_uint64),
                "double": (np.float64, ctypes.c_double), "float": (np.float32, ctypes.c_float)}
POINTER_TYPES = {"float": ("f", 4), "double": ("f", 8), "unsigned char": ("iub", 1), "unsigned short": ("uf", 2),
                 "u32": ("u", 4), "u64": ("u", 8), "bool": ("b", 1), "long long": ("i", 8), "int": ("i", 4)}


def kernel_signatures(source):
    """{kernel name: [(C type without const and *, is pointer)]} of the extern "C" kernels of a source."""
    signatures = {}
    for name, parameters in re.findall(r'extern "C" __global__ void (\w+)\(([^)]*)\)', source):
        kinds = []
        for parameter in parameters.split(","):
            declaration = parameter.replace("const ", "").strip()
            pointer = "*" in declaration
            kinds.append((declaration.split("*")[0].strip() if pointer else declaration.rsplit(" ", 1)[0].strip(),
                          pointer))
        signatures[name] = kinds
    return signatures


def test_every_kernel_of_compress_cu_has_a_host_build_or_an_emulation():
    names = set(kernel_signatures(cuda_source("compress")))
    hosted = set(re.findall(r'extern "C" void (\w+)_host\(', HOST_WRAPPERS))
    hosted |= {f"{kernel}_{suffix}" for kernel in re.findall(r'extern "C" void (\w+)_##S##_host\(', HOST_WRAPPERS)
               for suffix in ["f32", "f64"]}
    assert names - hosted == set(NUMPY_EMULATED) and hosted <= names


def emulate_to_fp16(x, out, n):
    with np.errstate(over="ignore"):
        out.view(np.float16)[:n] = x[:n].astype(np.float16)


def emulate_from_fp16(halves, out, n):
    out[:n] = halves.view(np.float16)[:n]


NUMPY_EMULATED = {"to_fp16_f32": emulate_to_fp16, "to_fp16_f64": emulate_to_fp16,  # the hardware conversion
                  "from_fp16_f32": emulate_from_fp16, "from_fp16_f64": emulate_from_fp16}


class DeviceArray(np.ndarray):
    """A numpy array that the code under test takes for a CuPy array (reductions stay arrays, as in CuPy)."""

    def __array_wrap__(self, array, context=None, return_scalar=False):
        return np.asarray(array).view(DeviceArray)

    def get(self):
        return np.array(self)


def on_device(value):
    if isinstance(value, np.ndarray) or np.isscalar(value) and isinstance(value, np.generic):
        return np.asarray(value).view(DeviceArray)
    if isinstance(value, tuple):
        return tuple(on_device(item) for item in value)
    return value


class EmulatedCupy(types.ModuleType):
    """numpy's functions returning DeviceArrays; ``ndarray`` is DeviceArray."""

    ndarray = DeviceArray

    def __getattr__(self, name):
        value = getattr(np, name)
        if callable(value) and not isinstance(value, type):
            return lambda *args, **kwargs: on_device(value(*args, **kwargs))
        return value


class HostLaunch:
    """A kernel launch of compress.cu checked against its signature and run by its host build."""

    def __init__(self, library, name, signature):
        self.library, self.name, self.signature = library, name, signature

    def __call__(self, grid, block, args):
        assert len(grid) == 1 and len(block) == 1 and grid[0] >= 1 and block[0] >= 1
        assert len(args) == len(self.signature), f"{self.name} takes {len(self.signature)} arguments, got {len(args)}"
        converted = []
        for position, ((ctype, pointer), arg) in enumerate(zip(self.signature, args)):
            where = f"{self.name} argument {position} ({ctype}{'*' if pointer else ''})"
            if pointer:
                kinds, itemsize = POINTER_TYPES[ctype]
                assert isinstance(arg, DeviceArray), f"{where}: got {type(arg).__name__}"
                assert arg.dtype.kind in kinds and arg.dtype.itemsize == itemsize, f"{where}: got {arg.dtype}"
                assert arg.flags.c_contiguous, f"{where}: not contiguous"
                converted.append(arg)
            else:
                numpy_type, c_type = SCALAR_TYPES[ctype]
                assert type(arg) is numpy_type, f"{where}: got {type(arg).__name__}, CuPy needs {numpy_type.__name__}"
                converted.append(c_type(arg.item()))
        if self.name in NUMPY_EMULATED:
            NUMPY_EMULATED[self.name](*(np.asarray(a) if isinstance(a, DeviceArray) else a.value for a in converted))
            return
        getattr(self.library, f"{self.name}_host")(*(ctypes.c_void_p(a.ctypes.data) if isinstance(a, DeviceArray)
                                                     else a for a in converted))


@pytest.fixture(scope="module")
def host_library(tmp_path_factory):
    """The host build of compress.cu's device functions, built once per test run: pytest-xdist's workers share
    their base folder's parent, and the first to take the lock builds it while the others wait for it."""
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    import fcntl
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "host-kernels"
    folder.mkdir(exist_ok=True)
    text = cuda_source("compress") + HOST_WRAPPERS
    # named by its source: a folder left by another run (a subprocess inherits PYTEST_XDIST_WORKER, so its
    # base's parent is pytest's root, kept across runs) never hands back a build of older kernels
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    library = folder / f"libhost-{digest}.so"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not library.exists():
            source = folder / f"host-{digest}.cu"
            source.write_text(text, encoding="utf-8")
            partial = folder / f"libhost-{digest}.so.partial"
            done = subprocess.run([NVCC, "-shared", "-arch=sm_80", "--std=c++17", "-O2", "-Xcompiler", "-fPIC",
                                   "-Xcompiler", "-ffp-contract=off", "-o", str(partial), str(source)],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0 and "host compiler" in done.stdout + done.stderr:
                pytest.skip(f"nvcc cannot build for the host here: {done.stderr[-300:]}")
            assert done.returncode == 0, done.stdout + done.stderr
            os.replace(partial, library)
    return ctypes.CDLL(str(library))


def host(array):
    """A numpy copy of a CuPy array (or of an emulated one); numpy arrays pass through."""
    return array.get() if hasattr(array, "get") else array


def cupy_or_skip():
    """CuPy with a usable device, or a skip (no CuPy, no driver, no device)."""
    try:
        import cupy
    except Exception as error:  # ImportError, or a broken CUDA installation
        pytest.skip(f"CuPy is not available: {error}")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:
        pytest.skip(f"no CUDA device: {error}")
    if count < 1:
        pytest.skip("no CUDA device")
    return cupy


@pytest.fixture(params=["emulated", pytest.param("cupy", marks=pytest.mark.gpu)])
def cp(request, monkeypatch):
    """CuPy on a GPU, or the emulation (see above) with mpiopt's backend and kernels pointed at it."""
    if request.param == "cupy":
        return cupy_or_skip()
    library = request.getfixturevalue("host_library")
    signatures = kernel_signatures(cuda_source("compress"))
    emulated = EmulatedCupy("emulated_cupy")
    monkeypatch.setattr(backend, "_cupy", lambda: emulated)
    monkeypatch.setattr(kc, "_function", lambda name: HostLaunch(library, name, signatures[name]))
    return emulated


def test_gpu_philox_and_uniform_equal_the_twin(cp):
    for counter, key, expected in KNOWN_ANSWERS:
        rows = kc.philox_blocks(cp.asarray(np.array([counter], dtype=np.uint64)), key)
        assert isinstance(rows, cp.ndarray) and tuple(host(rows)[0].tolist()) == expected
    key = philox_key(9, "gpu")
    for dtype in [np.float32, np.float64]:
        got = kc.uniform(key, 2 ** 35 + 1, 100003, dtype, xp=cp)
        assert got.dtype == dtype and np.array_equal(host(got), philox_uniform(key, 2 ** 35 + 1, 100003, dtype))


def test_host_built_philox_elements_equal_numpy_and_the_reference(host_library):
    """The CUDA code's Philox, built for the host (its 64-bit products from 32-bit halves there; __umul64hi on
    the device), one element at a time in any order, against numpy's Philox and the Python reference."""
    key, step = philox_key(9, "host"), 2 ** 64 - 5
    count = 2 * philox.CHUNK_WORDS + 1001
    words = philox_words(key, step, count)
    indices = np.random.default_rng(4).permutation(count).astype(np.uint64)
    out = np.empty(count, dtype=np.uint32)
    host_library.philox_elements_at(ctypes.c_uint64(key[0]), ctypes.c_uint64(key[1]), ctypes.c_uint64(step),
                                    ctypes.c_void_p(indices.ctypes.data), ctypes.c_void_p(out.ctypes.data),
                                    ctypes.c_longlong(count))
    assert np.array_equal(out, words[indices])
    far = [0, 1, 7, 2 ** 40 + 3, 2 ** 61 - 1]  # elements far out in the stream (block up to 2^58)
    got = np.empty(len(far), dtype=np.uint32)
    host_library.philox_elements_at(ctypes.c_uint64(key[0]), ctypes.c_uint64(key[1]), ctypes.c_uint64(step),
                                    ctypes.c_void_p(np.array(far, dtype=np.uint64).ctypes.data),
                                    ctypes.c_void_p(got.ctypes.data), ctypes.c_longlong(len(far)))
    assert got.tolist() == [element_reference(key, step, i) for i in far]
    assert got[3] == philox_words(key, step, 1, start=far[3])[0]


def test_host_built_hash_equals_numpy_and_the_reference(host_library):
    """compress.cu's hash32 stream, built for the host, at scattered indices (across a seed boundary too),
    against hash32.hash_words and the transcription in Python integers."""
    seeds = np.array([0x9E3779B9, 0x01234567], dtype=np.uint32)
    near = hash32.SEED_SPAN - 700
    indices = np.concatenate([np.random.default_rng(5).permutation(3000), near + np.arange(1400)]).astype(np.uint64)
    out = np.empty(indices.size, dtype=np.uint32)
    host_library.hashed_elements_at(ctypes.c_void_p(seeds.ctypes.data), ctypes.c_void_p(indices.ctypes.data),
                                    ctypes.c_void_p(out.ctypes.data), ctypes.c_longlong(indices.size))
    assert np.array_equal(out[:3000], hash32.hash_words(seeds, 3000)[indices[:3000].astype(np.int64)])
    assert np.array_equal(out[3000:], hash32.hash_words(seeds, 1400, start=near))
    assert [int(w) for w in out[2995:3005]] == [hash_reference(seeds, int(i)) for i in indices[2995:3005]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("norm", ["l2", "max"])
def test_gpu_qsgd_equals_the_twin_bitwise(cp, norm, bits, dtype):
    x = values(100003, seed=18, dtype=dtype) * np.linspace(0.01, 50, 100003).astype(dtype)
    x[:1000] = 0
    for bucket in [1, 100, 512, 200000]:
        expected = kc.qsgd_quantize(x, bits, bucket, norm, 5, ("qsgd", "g", 1), 2 ** 32 + 3)
        got = kc.qsgd_quantize(cp.asarray(x), bits, bucket, norm, 5, ("qsgd", "g", 1), 2 ** 32 + 3)
        assert all(isinstance(part, cp.ndarray) for part in got)
        for mine, theirs in zip(got, expected):
            assert mine.dtype == theirs.dtype and np.array_equal(host(mine), theirs)
        for out_dtype in [np.float32, np.float64]:
            decoded = kc.qsgd_dequantize(got[0], got[1], x.size, bits, bucket, dtype=out_dtype)
            assert np.array_equal(host(decoded),
                                  kc.qsgd_dequantize(expected[0], expected[1], x.size, bits, bucket, dtype=out_dtype))


def test_gpu_sign_l2_scale_is_accumulated_in_float64(cp):
    n = 2 ** 22
    x = np.random.default_rng(3).standard_normal(n, dtype=np.float32) + np.float32(1)
    reference = np.sqrt(np.sum(np.square(x.astype(np.float64)))) / np.sqrt(n)
    got = kc.sign_scale(cp.asarray(x), "l2")
    assert isinstance(got, cp.ndarray) and abs(float(host(got)[0]) - reference) <= 2.0 ** -23 * reference


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_sign_topk_scatter_and_conversions_equal_the_twins(cp, dtype):
    x = np.concatenate([special_floats(dtype), values(50001, seed=19, dtype=dtype)])
    finite = x[np.isfinite(x)]
    bits, scale = kc.sign_pack(cp.asarray(finite))
    assert np.array_equal(host(bits), np.packbits(finite >= 0))
    np.testing.assert_allclose(host(scale), kc.sign_pack(finite)[1], rtol=1e-6)
    with np.errstate(invalid="ignore"):  # the scale of NaN and inf (in the emulation)
        assert np.array_equal(host(kc.sign_pack(cp.asarray(x))[0]), np.packbits(x >= 0))
    for out_dtype in [np.float32, np.float64]:
        got = kc.sign_unpack(bits, scale, finite.size, dtype=out_dtype)
        assert np.array_equal(host(got), kc.sign_unpack(host(bits), host(scale), finite.size,
                                                           dtype=out_dtype))
    tied = np.round(finite[np.abs(finite) < 1e30] * 4) / 4  # many ties at the threshold
    for data in [finite, tied]:
        for k in [1, 100, 5000, data.size - 1, data.size]:
            mine, theirs = kc.topk_select(cp.asarray(data), k), kc.topk_select(data, k)
            assert all(np.array_equal(host(a), b) for a, b in zip(mine, theirs))
    rng = np.random.default_rng(20)
    unique = rng.permutation(finite.size)[:3000].astype(np.int32)
    repeated = rng.integers(0, 100, 3000).astype(np.int32)
    added = values(3000, seed=21, dtype=dtype)
    for indices, exact in [(unique, True), (repeated, False)]:
        for subtract in [False, True]:
            expected = kc.scatter_add(finite.copy(), indices, added, subtract)
            got = host(kc.scatter_add(cp.asarray(finite), cp.asarray(indices), cp.asarray(added), subtract))
            if exact:
                assert np.array_equal(got, expected)
            else:
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    halves = host(kc.to_fp16(cp.asarray(x)))
    expected = kc.to_fp16(x)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(halves), nan) and np.array_equal(halves[~nan].view(np.uint16),
                                                                    expected[~nan].view(np.uint16))
    assert np.array_equal(host(kc.from_fp16(cp.asarray(halves), dtype=dtype)), kc.from_fp16(halves, dtype=dtype),
                          equal_nan=True)
    assert np.array_equal(host(kc.to_bf16(cp.asarray(x))), kc.to_bf16(x))
    patterns = np.arange(2 ** 16, dtype=np.uint16)
    widened = host(kc.from_bf16(cp.asarray(patterns), dtype=dtype))
    expected = kc.from_bf16(patterns, dtype=dtype)
    assert np.array_equal(widened, expected, equal_nan=True)
    if dtype == np.float32:  # float32: the bits themselves, NaN payloads included
        assert np.array_equal(widened.view(np.uint32), expected.view(np.uint32))


GPU_COMPRESSORS = {"none": {}, "fp16": {}, "bf16": {}, "qsgd8": {"bucket_size": 256}, "qsgd4": {"norm": "max"},
                   "sign": {}, "topk": {"ratio": 0.05}, "randomk": {"ratio": 0.1}}


@pytest.mark.parametrize("name", sorted(GPU_COMPRESSORS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_compressors_run_on_cupy_arrays_and_equal_numpy(cp, name, dtype):
    x = values(30011, seed=22, dtype=dtype)
    on_cpu, on_gpu = (get_compressor(name, **GPU_COMPRESSORS[name]) for _ in range(2))
    for step in range(3):
        payload, ctx = on_cpu.compress(x * (step + 1), "g", step=step)
        device_payload, device_ctx = on_gpu.compress(cp.asarray(x * (step + 1)), "g", step=step)
        assert device_ctx.parts == ctx.parts and device_ctx.payload_bytes == ctx.payload_bytes
        for mine, theirs in zip(device_payload, payload):
            assert isinstance(mine, cp.ndarray) and mine.dtype == theirs.dtype and mine.shape == theirs.shape
            if name == "sign" and mine.dtype == np.float32:
                np.testing.assert_allclose(host(mine), theirs, rtol=1e-6)
            else:
                assert np.array_equal(host(mine), theirs)
        if name == "sign":
            device_payload = (cp.asarray(payload[0]), device_payload[1])
        decoded = on_gpu.decompress(device_payload, device_ctx)
        assert isinstance(decoded, cp.ndarray) and np.array_equal(host(decoded), on_cpu.decompress(payload, ctx))
        total = cp.ones(x.size, dtype=dtype)
        on_gpu.accumulate(device_payload, device_ctx, total, subtract=True)
        expected = on_cpu.accumulate(payload, ctx, np.ones(x.size, dtype=dtype), subtract=True)
        assert np.array_equal(host(total), expected)


@pytest.mark.parametrize("name", ["sign", "topk", "qsgd4"])
def test_gpu_error_feedback_keeps_its_residual_on_the_device(cp, name):
    x = values(4099, seed=23)
    on_cpu, on_gpu = ErrorFeedback(get_compressor(name)), ErrorFeedback(get_compressor(name))
    for step in range(4):
        on_cpu.compress(x, "g", step=step)
        on_gpu.compress(cp.asarray(x), "g", step=step)
        residual = on_gpu.residual("g")
        assert isinstance(residual, cp.ndarray)
        np.testing.assert_allclose(host(residual), on_cpu.residual("g"), rtol=1e-4, atol=1e-5)


def test_launch_refuses_misaligned_device_arrays_before_the_kernel_runs(monkeypatch):
    """A misaligned float64 pointer would fault on the GPU (cudaErrorMisalignedAddress, sticky for the
    process); _launch raises a ValueError first.  Fake device arrays: only data.ptr, size and dtype count."""
    def device_array(pointer, dtype, size=3):
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=pointer), size=size, dtype=np.dtype(dtype))

    launched = []
    monkeypatch.setattr(kc, "_function", lambda name: lambda grid, block, args: launched.append(name))
    with pytest.raises(ValueError, match=r"scatter_add_f64: argument 2 \(float64\[3\]\) starts at a misaligned"):
        kc._launch("scatter_add_f64", 3, device_array(0x1000, np.float64), device_array(0x2000, np.int32),
                   device_array(0x3004, np.float64), np.int64(3))
    kc._launch("scatter_add_f64", 3, device_array(0x1000, np.float64), device_array(0x2004, np.int32),
               device_array(0x3008, np.float64), device_array(0x4001, np.uint8), device_array(0x5003, np.float64, 0),
               np.int64(3))
    assert launched == ["scatter_add_f64"]
