"""The compiled QSGD path (mpiopt.kernels.qsgd_fast, numba) against the numpy twins of mpiopt.kernels.compress,
bit for bit: norms (l2, max), levels (8 and 4 bits), decoded values, float32 and float64, awkward sizes (n = 0,
n < 8, n odd, n not a multiple of the bucket or of the piece), bucket sizes 1, 7, 512 and larger than n, zero
buckets, norms that overflow float32, norms too small (the clip acts), several keys and steps (the noise's
hash in the kernel's 32-bit lanes)."""
import numpy as np
import pytest

pytest.importorskip("numba")

from mpiopt.kernels import compiled  # noqa: E402
from mpiopt.kernels import compress  # noqa: E402
from mpiopt.kernels import qsgd_fast as qf  # noqa: E402
from mpiopt.kernels.hash32 import stream_seeds  # noqa: E402
from mpiopt.kernels.philox import philox_key  # noqa: E402

pytestmark = pytest.mark.skipif(not (qf.AVAILABLE and compiled.enabled()),
                                reason="the compiled kernels are off (MPIOPT_NUMBA=0)")


class Twins:
    """mpiopt.kernels.compress's QSGD functions with the compiled path switched off: the numpy twins."""

    def __getattr__(self, name):
        function = getattr(compress, name)
        if not callable(function):
            return function

        def twin(*args, **kwargs):
            with compiled.use(False):
                return function(*args, **kwargs)
        return twin


kc = Twins()

SIZES = [0, 1, 5, 8, 13, 100, 1023, 2 * qf.CHUNK + 515]
BUCKETS = [1, 7, 512, 5000]


def same_bits(a, b):
    """Equal dtypes, shapes and bytes (NaNs and signed zeros included)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def values(n, dtype, seed=0):
    """Normal values with a zero stretch (zero buckets) and a few large ones."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp(rng.uniform(-3, 3, n))
    x[n // 3:n // 3 + 20] = 0.0
    return x.astype(dtype)


def test_the_constants_are_those_of_the_twins():
    assert qf.NORM_MARGIN == kc.NORM_MARGIN and qf.LANES == kc.LANES
    assert qf.CHUNK % 8 == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("use_max", [False, True])
def test_norms_are_bitwise_the_twin(dtype, use_max):
    for n in SIZES:
        x = values(n, dtype, seed=n)
        for bucket in BUCKETS + [16, 17, 100]:
            got = qf.norms(x, bucket, use_max)
            assert same_bits(got, kc.qsgd_norms(x, bucket, "max" if use_max else "l2")), (n, bucket)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("use_max", [False, True])
def test_compress_quantize_and_dequantize_are_bitwise_the_twin(dtype, bits, use_max):
    s = 2 ** (bits - 1) - 1
    norm = "max" if use_max else "l2"
    for n in SIZES:
        x = values(n, dtype, seed=n + 1)
        for bucket in BUCKETS:
            for seed, stream, step in [(0, ("qsgd", "g", 0), 0), (5, ("qsgd", "w", 3), 2 ** 32 + 7)]:
                seeds = stream_seeds(philox_key(seed, *stream), step, n)
                norms, stored = kc.qsgd_quantize(x, bits, bucket, norm, seed, stream, step)
                fast_norms, fast_stored = qf.compress(x, bits, bucket, use_max, s, seeds)
                assert same_bits(fast_norms, norms) and same_bits(fast_stored, stored), (n, bucket, step)
                assert same_bits(qf.quantize(x, norms, bits, bucket, s, seeds), stored)
                for out_dtype in (np.float32, np.float64):
                    expected = kc.qsgd_dequantize(norms, stored, n, bits, bucket, dtype=out_dtype)
                    out = np.full(n, np.nan, dtype=out_dtype)
                    assert qf.dequantize(norms, stored, n, bits, bucket, s, out) is out
                    assert same_bits(out, expected), (n, bucket, out_dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bits", [8, 4])
def test_extremes_are_bitwise_the_twin(dtype, bits):
    """Norms that overflow (to float32 inf; float64's squares to inf), zero buckets, negative zeros,
    subnormals (s / N overflows: the scale is inf), and given norms too small for the values (the levels clip
    to +-s).  The twin warns of the overflows (and of 0 * inf when decoding): silenced here."""
    s = 2 ** (bits - 1) - 1
    big = np.finfo(dtype).max
    x = values(3001, dtype, seed=3)
    x[:64] = big
    x[64:128] = -big
    x[128:300] = 0.0
    x[300:310] = -0.0
    x[2000:2100] = np.finfo(np.float32).tiny / 3  # subnormal in float32
    seeds = stream_seeds(philox_key(2, "qsgd", "x"), 11, x.size)
    for bucket in [1, 7, 64, 512]:
        for use_max in (False, True):
            with np.errstate(over="ignore", invalid="ignore"):
                norms, stored = kc.qsgd_quantize(x, bits, bucket, "max" if use_max else "l2", 2, ("qsgd", "x"),
                                                 11)
                expected = kc.qsgd_dequantize(norms, stored, x.size, bits, bucket, dtype=dtype)
            assert np.isinf(norms[0])
            fast_norms, fast_stored = qf.compress(x, bits, bucket, use_max, s, seeds)
            assert same_bits(fast_norms, norms) and same_bits(fast_stored, stored)
            out = np.empty(x.size, dtype=dtype)
            assert same_bits(qf.dequantize(norms, stored, x.size, bits, bucket, s, out), expected)
        with np.errstate(over="ignore", invalid="ignore"):
            small = kc.qsgd_norms(x, bucket) / np.float32(5)
            small[::3] = 0.0
            expected = kc.qsgd_quantize(x, bits, bucket, "l2", 2, ("qsgd", "x"), 11, norms=small)[1]
        assert same_bits(qf.quantize(x, small, bits, bucket, s, seeds), expected)
        assert np.any(np.abs(expected.view(np.int8) if bits == 8 else kc.unpack_nibbles(expected, x.size)) == s)


def test_the_layouts_and_the_checks():
    x = values(1001, np.float32)
    seeds = np.array([3], dtype=np.uint32)
    norms, stored = qf.compress(x.reshape(7, 143), 4, 128, False, 7, seeds)  # any shape: flattened
    assert norms.dtype == np.float32 and norms.size == 8 and stored.dtype == np.uint8 and stored.size == 501
    assert stored[-1] >> 4 == 0  # the missing 1002nd element: a zero high nibble
    assert qf.compress(x, 8, 128, False, 127, seeds)[1].dtype == np.int8
    with pytest.raises(ValueError):
        qf.compress(x, 5, 128, False, 15, seeds)
    with pytest.raises(ValueError):
        qf.norms(x, 0, False)
    with pytest.raises(ValueError):
        qf.quantize(x, norms[:-1], 4, 128, 7, seeds)
    with pytest.raises(ValueError):
        qf.quantize(x, norms, 4, 128, 7, seeds[:0])  # no seed
    with pytest.raises(ValueError):
        qf.dequantize(norms, stored, 1001, 4, 128, 7, np.empty(1000, np.float32))
    with pytest.raises(TypeError):
        qf.norms(x.astype(np.float16), 128, False)
