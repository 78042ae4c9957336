"""Compressors and error feedback, on one process: payload sizes against their formulas, round trips
within each compressor's precision, unbiasedness by fixed-seed statistical tests, exact residuals."""
import math

import numpy as np
import pytest

from mpiopt.compression import COMPRESSORS, ErrorFeedback, get_compressor, pack, unpack
from mpiopt.compression.bf16 import float32_to_bf16
from mpiopt.compression.powersgd import matrix_shape
from mpiopt.compression.qsgd import pack_nibbles, unpack_nibbles
from mpiopt.core.registry import RegistryError

NAMES = ["none", "fp16", "bf16", "qsgd", "qsgd8", "qsgd4", "sign", "topk", "randomk", "powersgd"]
SIZES = [0, 1, 7, 8, 9, 511, 512, 513, 1001]


def vector(n, dtype=np.float32, seed=0):
    return (np.random.default_rng(seed).standard_normal(n) * 3).astype(dtype)


def expected_bytes(name, n, itemsize):
    """The payload formulas of docs/compression.md, written out independently."""
    buckets = math.ceil(n / 512)
    sparse_k = min(n, max(1, round(0.01 * n))) if n else 0
    if name == "powersgd":
        rows = math.ceil(math.sqrt(n)) if n else 0
        cols = math.ceil(n / rows) if rows else 0
        r = min(1, rows, cols)
        compressed = r > 0 and rows * cols >= 2 * (rows + cols) * r
        return (rows + cols) * r * itemsize if compressed else n * itemsize
    return {"none": n * itemsize, "fp16": 2 * n, "bf16": 2 * n, "qsgd": n + 4 * buckets, "qsgd8": n + 4 * buckets,
            "qsgd4": math.ceil(n / 2) + 4 * buckets, "sign": 4 + math.ceil(n / 8),
            "topk": sparse_k * (itemsize + 4), "randomk": sparse_k * itemsize}[name]


def test_every_compressor_is_registered_and_built_by_name():
    assert list(COMPRESSORS) == NAMES
    assert get_compressor("topk", k=5).k == 5 and get_compressor("qsgd", bits=4).levels == 7
    with pytest.raises(RegistryError, match="compressor must be one of none, fp16, bf16"):
        get_compressor("zip")
    with pytest.raises(TypeError, match="compressor 'sign' takes scale; got ratio"):
        get_compressor("sign", ratio=0.1)
    with pytest.raises(ValueError, match="bits must be 8 or 4"):
        get_compressor("qsgd", bits=2)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_payload_bytes_equal_the_formula_for_every_size(name, dtype):
    compressor = get_compressor(name)
    for n in SIZES:
        payload, ctx = compressor.compress(vector(n, dtype))
        expected = expected_bytes(name, n, np.dtype(dtype).itemsize)
        assert sum(part.nbytes for part in payload) == ctx.payload_bytes == expected, (name, n)
        assert compressor.payload_bytes(n, dtype) == expected
        assert [(part.dtype, part.size) for part in payload] == list(ctx.parts)
        assert pack(payload).nbytes == expected
        decoded = compressor.decompress(unpack(pack(payload), ctx), ctx)
        assert decoded.shape == (n,) and decoded.dtype == dtype
        assert np.array_equal(decoded, compressor.decompress(payload, ctx), equal_nan=True)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_unpack_at_any_byte_offset_gives_the_parts(name, dtype):
    """A gathered buffer holds the ranks' payloads back to back, so rank r's starts at r payload_bytes, any
    byte (Top-K float64 with k odd: 12 k; sign: 4 + ceil(n/8); QSGD: 4 buckets + n).  numpy parts are views
    wherever they start; CUDA kernels fault on misaligned float32/float64 pointers, so a device part that
    starts misaligned is copied (device_misaligned decides; checked here on stand-ins of CuPy arrays)."""
    compressor = get_compressor(name, **({"ratio": 0.1} if name in ("topk", "randomk") else {}))
    payload, ctx = compressor.compress(vector(1266, dtype))
    packed = pack(payload)
    for offset in range(9):
        buffer = np.zeros(offset + packed.size + 8, dtype=np.uint8)[offset:offset + packed.size]
        buffer[...] = packed
        parts = unpack(buffer, ctx)
        for part, original in zip(parts, payload):
            assert part.dtype == original.dtype and np.array_equal(part, original, equal_nan=True)
        assert all(np.shares_memory(part, buffer) for part in parts)  # views: no memory spent
    from types import SimpleNamespace

    from mpiopt.compression.base import device_misaligned
    for address, wanted in ((4096, False), (4100, True), (4097, True)):
        device = SimpleNamespace(data=SimpleNamespace(ptr=address))
        assert device_misaligned(device, np.float64) == wanted
        assert device_misaligned(device, np.float32) == (address % 4 != 0)
    assert not device_misaligned(np.zeros(9, dtype=np.uint8)[1:].view(np.float64), np.float64)


@pytest.mark.parametrize("name", NAMES)
def test_decompress_writes_into_out_in_place_and_payloads_never_alias_the_input(name):
    compressor = get_compressor(name)
    x = vector(1001)
    before = x.copy()
    payload, ctx = compressor.compress(x)
    assert np.array_equal(x, before)
    assert not any(np.shares_memory(part, x) for part in payload)
    out = np.full((7, 143), np.nan, dtype=np.float32)
    returned = compressor.decompress(payload, ctx, out=out)
    assert returned is out and np.array_equal(out.reshape(-1), compressor.decompress(payload, ctx))
    total = np.ones(1001, dtype=np.float32)
    compressor.accumulate(payload, ctx, total)
    np.testing.assert_allclose(total, 1 + compressor.decompress(payload, ctx), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="out must be a C-contiguous floating array of 1001 elements"):
        compressor.decompress(payload, ctx, out=np.empty(1000, dtype=np.float32))


def test_fp16_round_trip_within_half_precision_and_overflow_to_inf():
    fp16 = get_compressor("fp16")
    x = np.concatenate([vector(10000), np.float32([65504, -1e-3, 6.2e-5])])
    payload, ctx = fp16.compress(x)
    assert payload[0].dtype == np.float16
    decoded = fp16.decompress(payload, ctx)
    assert np.all(np.abs(decoded - x) <= 2.0 ** -11 * np.abs(x) + 2.0 ** -25)
    payload, ctx = fp16.compress(np.float32([1e5, -7e4]))  # no warning: the overflow is documented
    assert np.array_equal(fp16.decompress(payload, ctx), [np.inf, -np.inf])


def bf16_reference(value):
    """Round one float32 to bfloat16 by comparing its two bfloat16 neighbours in float64 (the one above
    the largest finite bfloat16 counts as 2^128, so that ties and overflow round to inf as IEEE does)."""
    if np.isnan(value):
        return None
    bits = int(np.array(np.float32(value)).view(np.uint32))
    sign, magnitude_bits = bits & 0x80000000, bits & 0x7FFFFFFF
    low_bits = magnitude_bits & 0xFFFF0000
    if low_bits == magnitude_bits:
        return bits >> 16
    high_bits = low_bits + 0x10000
    low = float(np.array(low_bits, dtype=np.uint32).view(np.float32))
    high = 2.0 ** 128 if high_bits == 0x7F800000 else float(np.array(high_bits, dtype=np.uint32).view(np.float32))
    magnitude = abs(float(value))
    below, above = magnitude - low, high - magnitude
    chosen = low_bits if below < above or (below == above and (low_bits >> 16) % 2 == 0) else high_bits
    return (sign | chosen) >> 16


def test_bf16_rounds_to_nearest_even_of_float32_as_a_reference():
    rng = np.random.default_rng(3)
    specials = np.array([0x3F808000, 0x3F818000, 0x3F80C000, 0x3F807FFF, 0x7F7FFFFF, 0x7F7F7FFF, 0x7F7F8000,
                         0x00008000, 0x00018000, 0x80008000, 0xBF808000, 0x7F800000, 0xFF800000, 0x00000001],
                        dtype=np.uint32).view(np.float32)
    x = np.concatenate([specials, rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32)
                        .view(np.float32), vector(1000)])
    got = float32_to_bf16(x)
    for value, bits in zip(x, got):
        expected = bf16_reference(value)
        if expected is None:
            assert bits & 0x7F80 == 0x7F80 and bits & 0x7F, f"NaN {value!r} must stay NaN, got {bits:#06x}"
        else:
            assert bits == expected, f"{value!r}: got {bits:#06x}, expected {expected:#06x}"
    bf16 = get_compressor("bf16")
    payload, ctx = bf16.compress(vector(5000))
    decoded = bf16.decompress(payload, ctx)
    assert np.all(np.abs(decoded - vector(5000)) <= 2.0 ** -8 * np.abs(vector(5000)))


def test_topk_keeps_the_largest_magnitudes_and_is_exact_when_k_is_n():
    x = vector(1001)
    exact = get_compressor("topk", k=1001)
    payload, ctx = exact.compress(x)
    assert np.array_equal(exact.decompress(payload, ctx), x)
    topk = get_compressor("topk", k=10)
    (values, indices), ctx = topk.compress(x)
    assert indices.dtype == np.int32 and np.all(np.diff(indices) > 0)
    assert set(indices) == set(np.argsort(-np.abs(x))[:10]) and np.array_equal(values, x[indices])
    assert get_compressor("topk", ratio=0.5).compress(x)[1].info["k"] == 500


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("norm", ["l2", "max"])
def test_qsgd_stays_within_its_error_bound_and_is_unbiased(bits, norm):
    x = vector(1000, seed=5)
    x[:300] = 0.0  # a whole zero bucket: no division by zero
    qsgd = get_compressor("qsgd", bits=bits, bucket_size=128, norm=norm, seed=11)
    s = 2 ** (bits - 1) - 1
    trials = 400
    decoded = np.empty((trials, x.size))
    for step in range(trials):
        payload, ctx = qsgd.compress(x, name="grad", step=step)
        decoded[step] = qsgd.decompress(payload, ctx)
    norms = payload[0].astype(np.float64).repeat(128)[:x.size]
    assert np.all(np.abs(decoded - x) <= norms / s * (1 + 1e-6)), "an element moved by more than one level"
    fraction = np.divide(np.abs(x) * s, norms, out=np.zeros(x.size), where=norms > 0) % 1
    variance = (norms / s) ** 2 * fraction * (1 - fraction)
    assert np.all(np.abs(decoded.mean(axis=0) - x) <= 6 * np.sqrt(variance / trials) + 1e-6), "biased"
    if norm == "l2":
        buckets = np.add.reduceat((decoded - x) ** 2, np.arange(0, 1000, 128), axis=1).mean(axis=0)
        energy = np.add.reduceat(x.astype(np.float64) ** 2, np.arange(0, 1000, 128))
        bound = min(128 / s ** 2, math.sqrt(128) / s) * energy
        assert np.all(buckets <= 1.2 * bound + 1e-12)


def test_qsgd_noise_depends_on_seed_worker_and_step_only():
    x = vector(777)
    first = get_compressor("qsgd4", seed=1, worker=2).compress(x, "g", step=3)[0][1]
    assert np.array_equal(first, get_compressor("qsgd4", seed=1, worker=2).compress(x, "g", step=3)[0][1])
    for other in [dict(seed=2, worker=2, step=3), dict(seed=1, worker=3, step=3), dict(seed=1, worker=2, step=4)]:
        step = other.pop("step")
        assert not np.array_equal(first, get_compressor("qsgd4", **other).compress(x, "g", step=step)[0][1])


def test_four_bit_levels_pack_two_per_byte_and_unpack_exactly():
    levels = np.array([-8, 7, -1, 0, 3, -7, 5], dtype=np.int8)
    packed = pack_nibbles(levels)
    assert packed.tolist() == [0x78, 0x0F, 0x93, 0x05]
    assert np.array_equal(unpack_nibbles(packed, levels.size), levels)


def test_randomk_indices_are_shared_per_step_and_the_estimate_is_unbiased():
    x = vector(200, seed=2)
    one, two = get_compressor("randomk", k=20, seed=4), get_compressor("randomk", k=20, seed=4)
    ctx = one.compress(x, "g", step=7)[1]
    assert np.array_equal(ctx.info["indices"], two.context(x.shape, x.dtype, "g", 7).info["indices"])
    assert not np.array_equal(ctx.info["indices"], two.context(x.shape, x.dtype, "g", 8).info["indices"])
    trials = 2000
    total = np.zeros(x.size)
    for step in range(trials):
        payload, ctx = one.compress(x, "g", step=step)
        total += one.decompress(payload, ctx)
    standard_error = np.abs(x) * math.sqrt(200 / 20 - 1) / math.sqrt(trials)
    assert np.all(np.abs(total / trials - x) <= 6 * standard_error + 1e-6)
    plain = get_compressor("randomk", k=20, unbiased=False)
    payload, ctx = plain.compress(x)
    assert plain.error_feedback and np.array_equal(payload[0], x[ctx.info["indices"]])


def test_sign_sends_packed_signs_and_the_l1_scale():
    x = np.float32([1.5, -2.0, 0.0, 3.0, -0.5, 2.0, -1.0, 1.0, 4.0])
    payload, ctx = get_compressor("sign").compress(x)
    assert payload[0][0] == np.float32(np.abs(x).mean())
    assert payload[1].tolist() == [0b10110101, 0b10000000]
    assert np.array_equal(get_compressor("sign").decompress(payload, ctx), np.where(x >= 0, 1, -1) * payload[0][0])
    l2 = get_compressor("sign", scale="l2").compress(x)[0][0][0]
    assert l2 == pytest.approx(np.linalg.norm(x) / 3)


def test_powersgd_views_vectors_as_near_square_matrices():
    assert matrix_shape((1000,)) == (32, 32) and matrix_shape((1001,)) == (32, 32) and matrix_shape((0,)) == (0, 0)
    assert matrix_shape((12,)) == (4, 3) and matrix_shape((6, 5, 2)) == (6, 10)
    assert not get_compressor("powersgd").context((9,), np.float32).info["compressed"]  # 3 x 3: too small


def test_powersgd_is_exact_at_full_rank_and_warm_starts_to_the_best_approximation():
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((40, 3)) @ rng.standard_normal((3, 30)) + 0.01 * rng.standard_normal((40, 30))
    full = get_compressor("powersgd", rank=30)
    payload, ctx = full.compress(matrix)
    np.testing.assert_allclose(full.decompress(payload, ctx), matrix, atol=1e-10)
    powersgd = get_compressor("powersgd", rank=3)
    for _ in range(5):
        payload, ctx = powersgd.compress(matrix, name="w")
    u, s, vt = np.linalg.svd(matrix)
    best = np.linalg.norm(matrix - (u[:, :3] * s[:3]) @ vt[:3])
    assert np.linalg.norm(matrix - powersgd.decompress(payload, ctx)) <= best * 1.001
    cold = get_compressor("powersgd", rank=3, warm_start=False)
    for _ in range(5):
        payload, ctx = cold.compress(matrix, name="w")
    assert np.linalg.norm(matrix - cold.decompress(payload, ctx)) > best * 1.01, "warm start makes no difference"


def test_powersgd_two_rounds_for_one_worker_equal_compress():
    x = vector(1001, np.float64)
    rounds, single = get_compressor("powersgd", rank=2), get_compressor("powersgd", rank=2)
    for step in range(3):
        (p,), state = rounds.compress_p(x, "g")
        (q,) = rounds.compress_q(p, state)
        two = rounds.decompress_q(q, state)
        payload, ctx = single.compress(x, "g")
        np.testing.assert_allclose(two, single.decompress(payload, ctx), rtol=1e-12, atol=1e-12)
        assert state.ctx.step == ctx.step == step


@pytest.mark.parametrize("shape", [(300, 200), (1000, 16), (5, 3), (40000,)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_powersgd_rank_one_decodes_the_outer_product(shape, dtype):
    """At rank 1 the decode is a broadcast multiply (long rows) or a zero-padded matmul (short rows, the padded
    vector): the products p_i q_j of the outer product, value for value."""
    compressor = get_compressor("powersgd", rank=1, min_compression_rate=0.0)
    x = vector(math.prod(shape), dtype).reshape(shape)
    payload, ctx = compressor.compress(x, "g")
    rows, cols = ctx.info["rows"], ctx.info["cols"]
    expected = np.outer(payload[0].astype(np.float64), payload[1].astype(np.float64)).reshape(-1)[:x.size]
    decoded = compressor.decompress(payload, ctx)
    assert decoded.dtype == dtype and decoded.shape == shape
    np.testing.assert_array_equal(decoded.reshape(-1), expected.astype(dtype))
    assert rows * cols >= x.size


@pytest.mark.parametrize("name", NAMES)
def test_error_feedback_keeps_exactly_the_residual(name):
    ef = ErrorFeedback(get_compressor(name))
    compressor = get_compressor(name)  # a twin: the same payloads
    residual = np.zeros(1001, dtype=np.float32)
    sent, total = np.zeros(1001), np.zeros(1001)
    for step in range(4):
        x = vector(1001, seed=step)
        payload, ctx = ef.compress(x, name="grad")
        compensated = residual + x
        twin_payload, twin_ctx = compressor.compress(compensated, name="grad")
        assert all(np.array_equal(a, b) for a, b in zip(payload, twin_payload))
        residual = compensated - compressor.decompress(twin_payload, twin_ctx)
        assert np.array_equal(ef.residual("grad"), residual), f"step {step}: the residual is not exact"
        sent += ef.decompress(payload, ctx)
        total += x
    scale = 1 + np.abs(ef.residual("grad")).max()  # float32 roundings of the largest values sent
    np.testing.assert_allclose(sent + ef.residual("grad"), total, rtol=0, atol=1e-5 * scale)
    assert ef.residual("other") is None


def test_error_feedback_residuals_are_per_name_and_survive_a_checkpoint():
    ef = ErrorFeedback(get_compressor("topk", k=3))
    ef.compress(vector(50), "a")
    ef.compress(vector(20, seed=1), "b")
    assert ef.residual("a").shape == (50,) and ef.residual("b").shape == (20,)
    restored = ErrorFeedback(get_compressor("topk", k=3))
    restored.load_state_dict(ef.state_dict())
    x = vector(50, seed=9)
    assert np.array_equal(ef.compress(x, "a")[0][0], restored.compress(x, "a")[0][0])
    with pytest.raises(ValueError, match="buffer 'a' had shape \\(50,\\)"):
        ef.compress(vector(51), "a")
    with pytest.raises(ValueError, match="already has error feedback"):
        ErrorFeedback(ef)
