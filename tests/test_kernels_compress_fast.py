"""The compiled CPU kernels of the compressors (mpiopt.kernels.compress_fast, numba) against their numpy twins
(mpiopt.kernels.compress, run with ``compiled.use(False)``): bitwise, except the sign scale's float64 sum
(64 interleaved lanes against numpy's pairwise sum: rtol 1e-12, so the float32 scale is within one ulp,
and usually equal); through the kernel functions and the compressors' public API (compress, decompress,
accumulate, error feedback's fused step against its three steps)."""
import numpy as np
import pytest

pytest.importorskip("numba")

from mpiopt.compression import ErrorFeedback, get_compressor  # noqa: E402
from mpiopt.kernels import compiled, compress as kc, compress_fast as fast  # noqa: E402

pytestmark = pytest.mark.skipif(not compiled.enabled(), reason="MPIOPT_NUMBA=0: the numpy twins run")

SIZES = [0, 1, 7, 8, 9, 1023, 1024, 1025, 5003]


def values(n, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def specials(dtype):
    """Zeros, infinities, NaNs (one signalling), subnormals, half and bfloat16 ties and overflow edges."""
    bits = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,
                     0x00000001, 0x807FFFFF, 0x3F808000, 0x3F818000, 0x7F7FFFFF, 0x7F7F8000, 0x477FF000,
                     0x477FEFFF, 0x47800000, 0x33000000, 0x33000001, 0x387FC000, 0xB3800000], dtype=np.uint32)
    with np.errstate(invalid="ignore"):
        return bits.view(np.float32).astype(dtype)


def twin(function, *args, **kwargs):
    with compiled.use(False):
        return function(*args, **kwargs)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- fp16 ---------------------------------------------------------------------------------------------------------
def test_widening_every_half_is_bitwise_numpys():
    halves = np.arange(2 ** 16, dtype=np.uint16).view(np.float16)
    for dtype in (np.float32, np.float64):
        with np.errstate(invalid="ignore"):
            expected = halves.astype(dtype)
        assert same_bits(kc.from_fp16(halves, dtype=dtype), expected)   # NaN payloads too


def float32_patterns():
    """Every exponent with mantissas at the rounding edges (ties, one below, one above, odd and even
    neighbours), the subnormal and overflow boundaries, and random patterns."""
    exponents = np.arange(256, dtype=np.uint32) << 23
    mantissas = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FEFFF, 0x7FF000, 0x7FF001,
                          0x7FFFFF, 0x400000, 0x3FF000, 0x401000], dtype=np.uint32)
    grid = (exponents[:, None] | mantissas[None, :]).reshape(-1)
    edges = np.array([0x477FEFFF, 0x477FF000, 0x477FF001, 0x477FE000, 0x387FC000, 0x387FE000, 0x387FFFFF,
                      0x38800000, 0x33000000, 0x33000001, 0x32FFFFFF, 0x33800000, 0x33C00000], dtype=np.uint32)
    rng = np.random.default_rng(1)
    patterns = np.concatenate([grid, edges, rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)])
    return np.concatenate([patterns, patterns | np.uint32(0x80000000)]).view(np.float32)


def test_narrowing_float32_is_bitwise_numpys():
    x = float32_patterns()
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(np.float16)
    assert same_bits(kc.to_fp16(x), expected)   # NaN payloads too (numpy's software rule)


def test_narrowing_float64_rounds_once_as_numpy():
    """1 + 2^-11 + 2^-40 rounds up from float64 and to even through float32; both at every exponent."""
    rng = np.random.default_rng(2)
    exponents = np.arange(2048, dtype=np.uint64) << np.uint64(52)
    offsets = np.array([0, 1, 1 << 41, (1 << 41) + 1, (1 << 41) - 1, 1 << 42, 3 << 41, (1 << 52) - 1,
                        0xFFC0000000000, 0xFFE0000000000, 0xFFE0000000001, 1 << 29], dtype=np.uint64)
    grid = (exponents[:, None] | offsets[None, :]).reshape(-1)
    random = rng.integers(0, 2 ** 63, 200_000, dtype=np.uint64) | (rng.integers(0, 2, 200_000, dtype=np.uint64)
                                                                    << np.uint64(63))
    x = np.concatenate([grid, grid | np.uint64(1 << 63), random]).view(np.float64)
    x = np.concatenate([x, [1 + 2 ** -11 + 2 ** -40, 65519.99, 65520.0, 2.0 ** -25, 2.0 ** -25 * 1.0000001,
                            2.0 ** -24 * 1.5, -(2.0 ** -14) * (1 - 2 ** -12)]])
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(np.float16)
    assert same_bits(kc.to_fp16(x), expected)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fp16_and_bf16_round_trips_equal_the_twins(n, dtype):
    x = np.concatenate([specials(dtype), values(n, seed=n, dtype=dtype) * 300])[:n]
    for encode, decode in ((kc.to_fp16, kc.from_fp16), (kc.to_bf16, kc.from_bf16)):
        with np.errstate(over="ignore", invalid="ignore"):
            payload, expected = encode(x), twin(encode, x)
            assert same_bits(payload, expected)
            for out_dtype in (np.float32, np.float64, np.float16):
                assert same_bits(decode(payload, dtype=out_dtype), twin(decode, payload, dtype=out_dtype))


def test_bf16_of_every_float32_edge_and_of_float64_is_the_twins():
    x = float32_patterns()
    assert same_bits(kc.to_bf16(x), twin(kc.to_bf16, x))
    with np.errstate(over="ignore", invalid="ignore"):
        wide = np.concatenate([x.astype(np.float64), [1e300, -1e300, 1 + 2 ** -9 + 2 ** -40, 3.4028235e38 * 1.0000001]])
        assert same_bits(kc.to_bf16(wide), twin(kc.to_bf16, wide))


# -- sign ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SIZES + [3 * 1024 + 77])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sign_bits_are_packbits_and_the_scale_is_numpys_sum_to_rounding(n, dtype):
    x = values(n, seed=n + 1, dtype=dtype) * 5
    x[::13] = 0.0
    x[1::17] = -0.0
    for scale in ("l1", "l2"):
        bits, magnitude = kc.sign_pack(x, scale)
        expected_bits, expected = twin(kc.sign_pack, x, scale)
        assert same_bits(bits, expected_bits) and magnitude.dtype == np.float32
        np.testing.assert_allclose(magnitude, expected, rtol=2 ** -23)   # the float32 result: one ulp at most
        if n:
            wide = x.astype(np.float64)
            total = fast.sign_pack(x, np.empty_like(bits), scale == "l2")
            reference = np.sum(wide * wide) if scale == "l2" else np.sum(np.abs(wide))
            assert total == pytest.approx(reference, rel=1e-12)
        assert same_bits(kc.sign_scale(x, scale), magnitude)
        for out_dtype in (np.float32, np.float64, np.float16):
            assert same_bits(kc.sign_unpack(bits, magnitude, n, dtype=out_dtype),
                             twin(kc.sign_unpack, bits, magnitude, n, dtype=out_dtype))


def test_sign_bits_of_nan_inf_and_signed_zeros():
    x = np.concatenate([specials(np.float32), values(1011, seed=3)])
    with np.errstate(invalid="ignore", over="ignore"):
        bits, magnitude = kc.sign_pack(x)
    assert same_bits(bits, np.packbits(x >= 0)) and np.isnan(magnitude[0])


# -- Top-K, scatter -----------------------------------------------------------------------------------------------
def topk_inputs(dtype):
    rng = np.random.default_rng(4)
    for n in (2, 9, 1000, 70_001, 300_007):
        x = rng.standard_normal(n).astype(dtype)
        yield x
        spiky = x.copy()
        spiky[::3] = 0
        spiky[1::7] = np.nan
        spiky[2::11] = -np.inf
        spiky[3::5] = -spiky[3::5]
        yield spiky
        yield np.full(n, -2.5, dtype=dtype)                       # all ties
        yield np.round(x * 2).astype(dtype)                        # few distinct magnitudes, many ties
        if n > 1000:
            heavy = x.copy()
            heavy[n // 2:] *= 1e6                                  # the sample's estimate is far off
            yield heavy


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_topk_is_bitwise_the_twin(dtype):
    for x in topk_inputs(dtype):
        n = x.size
        for k in sorted({1, 2, max(1, n // 100), n // 3, n - 1} - {0, n}):
            got, expected = kc.topk_select(x, k), twin(kc.topk_select, x, k)
            assert same_bits(got[1], expected[1]) and same_bits(got[0], expected[0]), (n, k)


def test_topk_retries_when_the_sample_misleads():
    """A sample that sees only zeros (too low an estimate: too many candidates) or only the small values
    (too high: too few)."""
    n = 1 << 17
    few = np.zeros(n, dtype=np.float32)
    few[1::8] = np.arange(1, n // 8 + 1)                            # never at the sampled positions
    many = np.ones(n, dtype=np.float32)
    many[np.arange(0, n, n // fast.SAMPLE)] = 0                      # the sample sees only zeros
    for x in (few, many):
        for k in (1, 100, 5000):
            got, expected = kc.topk_select(x, k), twin(kc.topk_select, x, k)
            assert same_bits(got[1], expected[1]) and same_bits(got[0], expected[0])


@pytest.mark.parametrize("subtract", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_add_and_zero_scatter_equal_numpy(subtract, dtype):
    rng = np.random.default_rng(5)
    indices = rng.integers(-100, 100, 700).astype(np.int32)         # repeated and negative indices
    added = values(700, seed=6)
    out = values(100, seed=7, dtype=dtype)
    assert same_bits(kc.scatter_add(out.copy(), indices, added, subtract),
                     twin(kc.scatter_add, out.copy(), indices, added, subtract))
    expected = np.zeros(100, dtype=dtype)
    expected[indices] = added
    assert same_bits(kc.zero_scatter(out.copy(), indices, added), expected)
    for function in (kc.scatter_add, kc.zero_scatter):
        with pytest.raises(IndexError, match="index 100 is out of bounds for axis 0 with size 100"):
            function(out.copy(), np.int32([3, 100]), np.ones(2, np.float32))


# -- the compressors ----------------------------------------------------------------------------------------------
COMPRESSORS = {"fp16": {}, "bf16": {}, "sign": {}, "sign-l2": {"scale": "l2"}, "topk": {"ratio": 0.05},
               "topk-k1": {"k": 1}, "randomk": {"ratio": 0.1}, "randomk-biased": {"ratio": 0.1, "unbiased": False},
               "qsgd8": {"bucket_size": 100}, "qsgd4-max": {"bucket_size": 512, "norm": "max"}}


def build(label):
    return get_compressor(label.split("-")[0], **COMPRESSORS[label])


@pytest.mark.parametrize("label", sorted(COMPRESSORS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 9, 1500, 100_003])
def test_compressors_equal_their_numpy_twins(label, dtype, n):
    x = values(n, seed=8, dtype=dtype) * 40
    compressor, reference = build(label), build(label)
    payload, ctx = compressor.compress(x, "g", step=2)
    expected, expected_ctx = twin(reference.compress, x, "g", step=2)
    assert ctx.parts == expected_ctx.parts
    for mine, theirs in zip(payload, expected):
        if label.startswith("sign") and mine.dtype == np.float32:
            np.testing.assert_allclose(mine, theirs, rtol=2 ** -23)
        else:
            assert same_bits(mine, theirs)
    for out_dtype in (dtype, np.float32):
        out = np.full(x.shape, np.nan, dtype=out_dtype)
        assert same_bits(compressor.decompress(payload, ctx, out=out),
                         twin(compressor.decompress, payload, ctx, out=np.empty_like(out)))
        for subtract in (False, True):
            total = values(n, seed=9, dtype=out_dtype)
            assert same_bits(compressor.accumulate(payload, ctx, total.copy(), subtract),
                             twin(compressor.accumulate, payload, ctx, total.copy(), subtract))


@pytest.mark.parametrize("label", sorted(COMPRESSORS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 9, 1500, 100_003])
def test_fused_error_feedback_is_the_three_steps(label, dtype, n):
    """Both sides compiled: the fused hook against ErrorFeedback's three steps (compress, then accumulate
    with subtract) of the same kernels, bitwise, residual included; and the twins' fused path."""
    fused, steps = ErrorFeedback(build(label)), ErrorFeedback(build(label))
    steps.compressor.encode_feedback = None                              # forces the three steps
    for step in range(3):
        x = values(n, seed=10 + step, dtype=dtype) * 40
        if n > 2:
            x[2] = np.inf if step == 1 else x[2]
        with np.errstate(invalid="ignore", over="ignore"):
            payload, ctx = fused.compress(x, "g", step=step)
            expected, _ = steps.compress(x, "g", step=step)
        for mine, theirs in zip(payload, expected):
            assert same_bits(mine, theirs)
        assert same_bits(fused.residual("g"), steps.residual("g"))
    numpy_fused = ErrorFeedback(build(label))
    x = values(n, seed=20, dtype=dtype)
    with compiled.use(False):
        numpy_payload, _ = numpy_fused.compress(x, "h")
        numpy_residual = numpy_fused.residual("h").copy()
    fast_payload, _ = fused.compress(x, "h")
    for mine, theirs in zip(fast_payload, numpy_payload):
        if label.startswith("sign") and mine.dtype == np.float32:
            np.testing.assert_allclose(mine, theirs, rtol=2 ** -23)
        else:
            assert same_bits(mine, theirs)
    if not label.startswith("sign"):
        assert same_bits(fused.residual("h"), numpy_residual)


def test_kernels_take_misaligned_and_readonly_views():
    raw = np.zeros(4 * 1001 + 1, dtype=np.uint8)[1:]
    x = raw.view(np.float32)
    x[:] = values(1001, seed=11)
    x.flags.writeable = False
    for function in (kc.to_fp16, kc.to_bf16, lambda v: kc.sign_pack(v)[0], lambda v: kc.topk_select(v, 10)[1]):
        assert same_bits(function(x), twin(function, x.copy()))


@pytest.mark.parametrize("label", ["sign", "sign-l2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sign_feedback_left_pending_is_the_three_steps(label, dtype):
    """Sign's ``e -= decoded`` is done in the next call's pass: payloads call after call, a checkpoint taken
    between calls and the residual read at the end equal the three steps, bitwise."""
    fused, steps = ErrorFeedback(build(label)), ErrorFeedback(build(label))
    steps.compressor.encode_feedback = None
    for step in range(5):
        x = values(10_007, seed=30 + step, dtype=dtype)
        payload, _ = fused.compress(x, "g", step=step)
        expected, _ = steps.compress(x, "g", step=step)
        assert all(same_bits(mine, theirs) for mine, theirs in zip(payload, expected)), step
        assert "g" in fused._pending  # the subtraction is left to the next pass
        if step == 2:
            saved = fused.state_dict()["residuals"]["g"]
            assert same_bits(saved, steps.residual("g")) and "g" not in fused._pending
    assert same_bits(fused.residual("g"), steps.residual("g"))
