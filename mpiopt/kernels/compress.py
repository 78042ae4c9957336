"""The compressors' kernels: numpy twins and CUDA kernels (``kernels/compress.cu``) of the same semantics.

Every function dispatches on its array arguments: numpy arrays run the numpy
twin, CuPy arrays the CUDA kernel (compiled on first use), and the results
stay in the input's module.  Where the docs say *bitwise*, the two backends
compute the same float32/float64 operations in the same order (the CUDA code
with explicitly rounded intrinsics, no FMA contraction), so their results are
equal bit for bit; reductions whose order differs (the sign compressor's scale,
scatter-add with repeated indices) agree to floating-point tolerance.

On numpy arrays a third implementation runs while
:func:`~mpiopt.kernels.compiled.enabled` (numba installed, ``MPIOPT_NUMBA`` not
``0``): the compiled CPU kernels of :mod:`.compress_fast`, one streaming pass
each where the math allows, single-threaded.  The numpy twins stay as
``*_numpy`` functions, the reference they are tested against
(tests/test_kernels_compress_fast.py); column *fast* says how the compiled
kernel compares to the twin.

=====================  ============================================================  ========  ==========
function               what                                                          twins     fast
=====================  ============================================================  ========  ==========
``qsgd_norms``         float32 norm per bucket (l2: float64 sums in 16 interleaved    bitwise   bitwise
                       lanes, a fixed order; max), times ``NORM_MARGIN``
``qsgd_quantize``      levels ``clip(floor(x s / N + u), -s, s)``, u from a hash;     bitwise   bitwise
                       int8, or two signed nibbles per byte (4 bits)                       (norms and
                                                                                               levels in
                                                                                               one pass)
``qsgd_dequantize``    ``level * (N / s)``                                           bitwise   bitwise
``sign_pack``          bits of ``x >= 0``, eight per byte, first element high;       bitwise   bits bitwise
                       scale l1 ``||x||_1 / n`` or l2 ``||x||_2 / sqrt(n)``, summed   bits,     scale: the
                       in float64                                                    scale ~   sum rtol
                                                                                               1e-12
``sign_unpack``        ``+scale`` where the bit is 1, ``-scale`` where 0             bitwise   bitwise
``topk_select``        the k largest ``|x_i|``, ties to the lower index; ascending    bitwise   bitwise
                       int32 indices and their values
``scatter_add``        ``out[indices] += values`` (repeated indices add up)           bitwise   bitwise
                                                                                     if unique (index order)
``zero_scatter``       ``out[:] = 0; out[indices] = values`` (sparse decode)         --        bitwise
``sparse_gather``      Random-K's ``x[indices] * scale``                             --        bitwise
``to_fp16``            IEEE half, round to nearest even; +-inf beyond 65504          bitwise   bitwise (NaN
                                                                                     (not NaN  payloads too)
                                                                                     payloads)
``from_fp16``          exact widening                                                bitwise   bitwise
``to_bf16``            ``(bits + 0x7FFF + ((bits >> 16) & 1)) >> 16``; NaN -> 0x7FC0  bitwise   bitwise
                       with the sign; float64 first rounded to float32
``from_bf16``          ``bits << 16`` as float32 (exact)                             bitwise   bitwise
``uniform``            the Philox stream as uniform numbers                          bitwise   --
``*_feedback``         error feedback's step ``e += x; payload = C(e); e -= decoded``  --        bitwise the
                       for fp16, bf16, sign, Top-K, Random-K, QSGD (numpy arrays)              3 steps
=====================  ============================================================  ========  ==========

**QSGD's noise.** Element i of a buffer takes u_i = ``(w >> 8) 2^-24`` with
w = ``triple32((i mod 2^32) XOR s)``, a 32-bit integer hash of the index and a
seed s that :func:`~mpiopt.kernels.hash32.stream_seeds` draws once per call
from the Philox stream of the key :func:`~mpiopt.kernels.philox.philox_key`
``(seed, *stream_key)`` at ``step`` (see :mod:`.hash32`): any element is
computed on its own, in any order, on every backend (a CUDA thread per block of
eight elements, the compiled CPU loop, numpy's uint32 arithmetic), and the
payload depends only on the data, the seed, the stream key and the step.
"""
import functools
import importlib

import numpy as np

from ..core.backend import get_array_module
from .hash32 import add_uniform, stream_seeds
from .loader import raw_module
from .philox import ELEMENTS_PER_BLOCK, philox4x64, philox_key, philox_uniform


class _OnFirstUse:
    """Stands for a module of this package (or one of its attributes) until first used, then imports it and
    takes its place in this module: .compiled, .compress_fast and .qsgd_fast import numba (a quarter of a
    second), which a process that imports the compressors and never compresses (a solver, through
    mpiopt.collectives) should not pay for."""

    def __init__(self, alias, module, attribute=None):
        self.alias, self.module, self.attribute = alias, module, attribute

    def _load(self):
        loaded = importlib.import_module(self.module, __package__)
        loaded = getattr(loaded, self.attribute) if self.attribute else loaded
        globals()[self.alias] = loaded
        return loaded

    def __getattr__(self, name):
        return getattr(self._load(), name)

    def __call__(self, *args, **kwargs):
        return self._load()(*args, **kwargs)


fast = _OnFirstUse("fast", ".compress_fast")
qsgd_fast = _OnFirstUse("qsgd_fast", ".qsgd_fast")
enabled = _OnFirstUse("enabled", ".compiled", "enabled")

NORM_MARGIN = 1.0 + 2.0 ** -20  # norms are stored rounded up by this factor (|y| < s despite the roundings)
NORMS = ("l2", "max")
SIGN_SCALES = ("l1", "l2")
THREADS = 256
CHUNK = 1 << 18  # elements per vectorized pass of the numpy norms (their float64 temporaries stay in cache)
LANES = 16  # interleaved partial sums of the l2 norms (the same in compress.cu: a thread each on the GPU)
VEC = 8  # elements per thread of compress.cu's elementwise kernels (16-byte loads and stores)
SIGN_WORDS = 8  # 32-element words per warp of compress.cu's sign_pack

__all__ = ["NORM_MARGIN", "bf16_feedback", "fp16_feedback", "from_bf16", "from_fp16", "pack_nibbles",
           "philox_blocks", "qsgd_dequantize", "qsgd_feedback", "qsgd_norms", "qsgd_quantize", "scatter_add", "sign_feedback", "sign_settle",
           "sign_pack", "sign_unpack", "sparse_gather", "sparse_gather_feedback", "to_bf16", "to_fp16",
           "topk_feedback", "topk_select", "uniform", "unpack_nibbles", "zero_scatter"]


# -- CuPy plumbing ---------------------------------------------------------------------------------------
@functools.cache
def _function(name):
    return raw_module("compress").get_function(name)


def _launch(name, count, *args):
    """Run kernel ``name`` with ``count`` threads (nothing when count is 0): one per element, per group of VEC
    elements or per lane of a bucket, as compress.cu says of each kernel.

    A CuPy array argument must start at an address aligned to its itemsize: a kernel that reads a
    misaligned float64 (say a view into a byte buffer at an odd offset) faults with
    cudaErrorMisalignedAddress, which is sticky (every later CUDA call of the process fails, and the other
    ranks wait in their next collective); here it is a ValueError instead."""
    if count > 0:
        for position, arg in enumerate(args):
            pointer = getattr(getattr(arg, "data", None), "ptr", None)
            if pointer is not None and arg.size and pointer % arg.dtype.alignment:
                raise ValueError(f"{name}: argument {position} ({arg.dtype}[{arg.size}]) starts at a misaligned "
                                 f"address ({pointer:#x}, not a multiple of {arg.dtype.alignment}); pass a copy")
        _function(name)(((count + THREADS - 1) // THREADS,), (THREADS,), args)


def _suffix(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return "f32"
    if dtype == np.float64:
        return "f64"
    raise TypeError(f"the CUDA kernels take float32 or float64 arrays, got {dtype}")


def _flat(xp, x):
    return xp.ascontiguousarray(x).reshape(-1)


def _check_float(x):
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"expected float32 or float64 values, got {x.dtype}")


def _new_output(xp, out, n, dtype):
    """(the array to return, its flat view): ``out`` as given, or a new array of ``dtype``."""
    if out is None:
        out = xp.empty(n, dtype=dtype)
    if out.size != n or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous array of {n} elements, got {out.size}")
    return out, out.reshape(-1)


# -- Philox -------------------------------------------------------------------------------------------------
def philox_blocks(counters, key):
    """Philox4x64-10 of each row of ``counters`` (m x 4 uint64) under ``key`` (two ints): m x 4 uint64."""
    xp = get_array_module(counters)
    counters = xp.ascontiguousarray(counters, dtype=xp.uint64).reshape(-1, 4)
    if xp is np:
        return np.stack(philox4x64(counters.T, key), axis=1)
    out = xp.empty(counters.shape, dtype=xp.uint64)
    _launch("philox4x64_10_blocks", counters.shape[0], counters, np.uint64(key[0]), np.uint64(key[1]), out,
            np.int64(counters.shape[0]))
    return out


def uniform(key, step, count, dtype=np.float32, xp=np):
    """Uniform numbers u_0 .. u_{count-1} in [0, 1) of the stream (key, step), in ``xp`` (see the docstring)."""
    if xp is np:
        return philox_uniform(key, step, count, dtype)
    out = xp.empty(count, dtype=dtype)
    _launch(f"philox_uniform_{_suffix(dtype)}", -(-count // ELEMENTS_PER_BLOCK), np.uint64(key[0]),
            np.uint64(key[1]), np.uint64(step), out, np.int64(count))
    return out


# -- QSGD ---------------------------------------------------------------------------------------------------
def per_bucket(ufunc, flat, per_bucket_values, bucket_size, out):
    """``out = ufunc(flat, value of its bucket)`` for every element, without Python loops over elements."""
    full = flat.size // bucket_size * bucket_size
    buckets = full // bucket_size
    ufunc(flat[:full].reshape(buckets, bucket_size), per_bucket_values[:buckets, None],
          out=out[:full].reshape(buckets, bucket_size))
    if full < flat.size:
        ufunc(flat[full:], per_bucket_values[buckets], out=out[full:])
    return out


def pack_nibbles(levels):
    """Signed 4-bit levels (int8 in [-8, 7]), two per byte: element 2j low, 2j + 1 high (numpy)."""
    packed = np.bitwise_and(levels[0::2].view(np.uint8), np.uint8(0x0F))
    packed[:levels.size // 2] |= levels[1::2].view(np.uint8) << 4
    return packed


def unpack_nibbles(packed, count):
    """The int8 levels of :func:`pack_nibbles` (sign-extended by arithmetic shifts; numpy)."""
    levels = np.empty(2 * packed.size, dtype=np.int8)
    levels[0::2] = (packed << 4).view(np.int8) >> 4
    levels[1::2] = packed.view(np.int8) >> 4
    return levels[:count]


def _check_qsgd(bits, bucket_size, norm=None):
    if bits not in (4, 8):
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")
    if int(bucket_size) < 1:
        raise ValueError(f"bucket_size must be >= 1, got {bucket_size!r}")
    if norm is not None and norm not in NORMS:
        raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
    return 2 ** (bits - 1) - 1


def _bucket_accumulators(rows, use_max):
    """Per row: max |x| (float64), or the sum of squares in float64 in LANES interleaved lanes (element t
    adds to lane t % LANES in element order; then the lanes are added in order; see :func:`qsgd_norms`)."""
    buckets, size = rows.shape
    if use_max:
        wide = rows.astype(np.float64)
        np.abs(wide, out=wide)
        return wide.max(axis=1)
    groups = -(-size // LANES)
    wide = np.zeros((buckets, groups * LANES)) if size % LANES else np.empty((buckets, size))
    wide[:, :size] = rows  # the padding adds +0.0: exact
    wide *= wide
    wide = wide.reshape(buckets, groups, LANES)
    if groups <= 256:
        lanes = wide[:, 0, :].copy()
        for group in range(1, groups):
            lanes += wide[:, group, :]
    else:  # a cumulative sum is sequential too
        lanes = np.cumsum(wide, axis=1, out=wide)[:, -1, :]
    total = lanes[:, 0].copy()
    for lane in range(1, LANES):
        total += lanes[:, lane]
    return total


def qsgd_norms(x, bucket_size=512, norm="l2"):
    """The float32 norm of each bucket of ``bucket_size`` elements of ``x`` (the last may be shorter),
    rounded up by ``NORM_MARGIN``: ``norm="max"``: ``float32(max |x_t| * margin)``; ``"l2"``:
    ``float32(sqrt(total) * margin)``, computed in float64 in an order both backends follow: element t of
    the bucket adds x_t^2 to lane t % 16, each lane in element order, then
    ``total = ((lane_0 + lane_1) + lane_2) + ... + lane_15``."""
    _check_qsgd(8, bucket_size, norm)
    xp = get_array_module(x)
    flat = _flat(xp, x)
    _check_float(flat)
    n, bucket_size = flat.size, int(bucket_size)
    buckets = -(-n // bucket_size)
    use_max = norm == "max"
    if xp is not np:
        norms = xp.empty(buckets, dtype=xp.float32)
        _launch(f"qsgd_norms_{_suffix(flat.dtype)}", buckets * LANES, flat, np.int64(n), np.int64(bucket_size),
                np.int32(use_max), np.float64(NORM_MARGIN), norms)
        return norms
    if enabled() and qsgd_fast.AVAILABLE:
        return qsgd_fast.norms(flat, bucket_size, use_max)
    acc = np.empty(buckets, dtype=np.float64)
    full = n // bucket_size
    rows_per_pass = max(1, CHUNK // bucket_size)
    for first in range(0, full, rows_per_pass):
        last = min(full, first + rows_per_pass)
        acc[first:last] = _bucket_accumulators(
            flat[first * bucket_size:last * bucket_size].reshape(last - first, bucket_size), use_max)
    if full < buckets:
        acc[full] = _bucket_accumulators(flat[full * bucket_size:].reshape(1, -1), use_max)[0]
    if not use_max:
        np.sqrt(acc, out=acc)
    acc *= NORM_MARGIN
    with np.errstate(over="ignore"):
        return acc.astype(np.float32)


def qsgd_quantize(x, bits=8, bucket_size=512, norm="l2", seed=0, stream_key=(), step=0, norms=None):
    """QSGD's payload of ``x``: (float32 norms per bucket, levels).

    With s = 2^(bits-1) - 1 and N the bucket's norm (``norms`` when given, else
    :func:`qsgd_norms`), in the input's precision, step by step::

        scale = s / N (0 where N <= 0);  y = x * scale;  y = y + u;  level = clip(floor(y), -s, s)

    u from the hashed stream of ``philox_key(seed, *stream_key)`` at ``step``
    (see the module docstring).  Levels: int8 (8 bits), or uint8 holding two
    signed nibbles, element 2j in the low one (4 bits; ceil(n/2) bytes).
    """
    levels = _check_qsgd(bits, bucket_size, norm)
    if isinstance(stream_key, (str, int, np.integer)):
        stream_key = (stream_key,)
    xp = get_array_module(x)
    flat = _flat(xp, x)
    _check_float(flat)
    n, bucket_size = flat.size, int(bucket_size)
    seeds = stream_seeds(philox_key(seed, *stream_key), step, n)
    if xp is np and enabled() and qsgd_fast.AVAILABLE:  # one compiled pass (norms, levels), bitwise the twin
        if norms is None:
            return qsgd_fast.compress(flat, bits, bucket_size, norm == "max", levels, seeds)
        return norms, qsgd_fast.quantize(flat, norms, bits, bucket_size, levels, seeds)
    if norms is None:
        norms = qsgd_norms(flat, bucket_size, norm)
    if xp is not np:
        stored = xp.empty(n if bits == 8 else -(-n // 2), dtype=xp.int8 if bits == 8 else xp.uint8)
        _launch(f"qsgd_quantize_{_suffix(flat.dtype)}", -(-n // ELEMENTS_PER_BLOCK), flat, norms, np.int64(n),
                np.int64(bucket_size), np.int32(bits), np.int32(levels), xp.asarray(seeds), stored)
        return norms, stored
    dtype = flat.dtype
    scale = np.zeros(norms.size, dtype=dtype)
    np.divide(dtype.type(levels), norms.astype(dtype), out=scale, where=norms > 0)
    y = per_bucket(np.multiply, flat, scale, bucket_size, np.empty(n, dtype=dtype))
    add_uniform(y, seeds)  # y + u, rounded once
    np.floor(y, out=y)
    np.clip(y, -levels, levels, out=y)  # acts only where the margin did not cover a norm's rounding
    stored = y.astype(np.int8)
    return norms, (stored if bits == 8 else pack_nibbles(stored))


def qsgd_feedback(x, residual, bits=8, bucket_size=512, norm="l2", seed=0, stream_key=(), step=0):
    """Error feedback's step for QSGD on flat numpy arrays of one dtype: ``e += x``, the payload (norms, levels)
    of e as :func:`qsgd_quantize` gives it, ``e -= decoded``: one compiled pass (bitwise the three steps), or
    the twins' three steps."""
    levels = _check_qsgd(bits, bucket_size, norm)
    if isinstance(stream_key, (str, int, np.integer)):
        stream_key = (stream_key,)
    if enabled() and qsgd_fast.AVAILABLE:
        seeds = stream_seeds(philox_key(seed, *stream_key), step, x.size)
        return qsgd_fast.feedback(x, residual, bits, int(bucket_size), norm == "max", levels, seeds)
    residual += x
    norms, stored = qsgd_quantize(residual, bits, bucket_size, norm, seed, stream_key, step)
    residual -= qsgd_dequantize(norms, stored, residual.size, bits, bucket_size, dtype=residual.dtype)
    return norms, stored


def qsgd_dequantize(norms, stored, n, bits=8, bucket_size=512, out=None, dtype=np.float32):
    """The decoded values ``level * float(N / s)`` (the division in float32, then the product in the
    output's precision) of a :func:`qsgd_quantize` payload, into ``out`` (n elements) or a new array."""
    levels = _check_qsgd(bits, bucket_size)
    xp = get_array_module(norms, stored, out)
    out, flat_out = _new_output(xp, out, n, dtype)
    if xp is not np:
        if flat_out.dtype in (np.float32, np.float64):
            _launch(f"qsgd_dequantize_{_suffix(flat_out.dtype)}", -(-n // VEC), stored, norms, np.int64(n),
                    np.int64(bucket_size), np.int32(bits), np.int32(levels), flat_out)
        else:
            xp.copyto(flat_out, qsgd_dequantize(norms, stored, n, bits, bucket_size))
        return out
    if enabled() and qsgd_fast.AVAILABLE and flat_out.dtype in (np.float32, np.float64) \
            and flat_out.flags.c_contiguous:
        qsgd_fast.dequantize(norms, stored, n, bits, bucket_size, levels, flat_out)
        return out
    decoded_levels = stored.view(np.int8)[:n] if bits == 8 else unpack_nibbles(stored, n)
    step = (norms / np.float32(levels)).astype(flat_out.dtype)
    per_bucket(np.multiply, decoded_levels, step, int(bucket_size), flat_out)
    return out


# -- sign ---------------------------------------------------------------------------------------------------
def sign_scale(x, scale="l1"):
    """The sign compressor's scale as a float32 array of one element: ``||x||_1 / n`` (the sum in float64) or
    ``||x||_2 / sqrt(n)``; 0 for an empty ``x``."""
    _check_sign_scale(scale)
    xp = get_array_module(x)
    flat = _flat(xp, x)
    n = flat.size
    if not n:
        return xp.zeros(1, dtype=xp.float32)
    if xp is np:
        if enabled() and flat.dtype in (np.float32, np.float64):
            return _sign_magnitude(fast.sign_pack(flat, np.empty(-(-n // 8), np.uint8), scale == "l2"), n, scale)
        return _sign_magnitude(_sign_sum_numpy(flat, scale), n, scale)
    if scale == "l1":
        magnitude = xp.abs(flat).sum(dtype=xp.float64) / n
    else:
        magnitude = xp.sqrt(_sum_of_squares(xp, flat)) / float(np.sqrt(n))
    return magnitude.astype(xp.float32).reshape(1)


def _check_sign_scale(scale):
    if scale not in SIGN_SCALES:
        raise ValueError(f"scale must be one of {', '.join(SIGN_SCALES)}, got {scale!r}")


def _sign_sum_numpy(flat, scale):
    """The float64 sum of |x| (l1) or x^2 (l2) of the numpy twin (numpy's pairwise sum; CHUNK-wise dots)."""
    if scale == "l1":
        return float(np.abs(flat).sum(dtype=np.float64))
    return float(_sum_of_squares(np, flat))


def _sign_magnitude(total, n, scale):
    """The scale (float32, one element) from the float64 ``total`` of n elements: total / n (l1) or
    sqrt(total) / sqrt(n) (l2); 0 when n is 0."""
    if not n:
        return np.zeros(1, dtype=np.float32)
    magnitude = float(total) / n if scale == "l1" else float(np.sqrt(total)) / np.sqrt(n)
    return np.array([magnitude], dtype=np.float32)


def _sum_of_squares(xp, flat):
    """sum x_i^2 accumulated in float64 (a float32 accumulation is 1e-5 off at 2^22 elements): float32 values
    are widened first, their squares then exact; CHUNK elements at a time on the host (no array-sized
    temporary), the whole vector at once on a GPU."""
    if flat.dtype == np.float64:
        return xp.dot(flat, flat)
    step = CHUNK if xp is np else flat.size
    total = 0.0
    for start in range(0, flat.size, step):
        wide = flat[start:start + step].astype(np.float64)
        total = total + xp.dot(wide, wide)
    return total


def sign_pack(x, scale="l1"):
    """(the bits of ``x >= 0`` packed eight per byte, first element in the high bit, as ``np.packbits``;
    the scale, a float32 array of one element, see :func:`sign_scale`).  On numpy arrays with the compiled
    kernels: both in one pass (the scale's float64 sum in 16 interleaved lanes, which may differ from the
    twin's pairwise sum in its last bits)."""
    xp = get_array_module(x)
    flat = _flat(xp, x)
    _check_float(flat)
    if xp is np:
        _check_sign_scale(scale)
        if enabled():
            bits = np.empty(-(-flat.size // 8), dtype=np.uint8)
            return bits, _sign_magnitude(fast.sign_pack(flat, bits, scale == "l2"), flat.size, scale)
        return sign_pack_numpy(flat, scale)
    _check_sign_scale(scale)
    n = flat.size
    bits = xp.empty(-(-n // 8), dtype=xp.uint8)
    if not n:
        return bits, xp.zeros(1, dtype=xp.float32)
    threads = -(-n // (32 * SIGN_WORDS)) * 32  # one pass: the bits and the scale's partial sums, per block
    partials = xp.zeros(-(-threads // THREADS), dtype=xp.float64)
    _launch(f"sign_pack_{_suffix(flat.dtype)}", threads, flat, np.int64(n), np.int32(scale == "l2"), bits, partials)
    total = partials.sum()
    magnitude = total / n if scale == "l1" else xp.sqrt(total) / float(np.sqrt(n))
    return bits, magnitude.astype(xp.float32).reshape(1)


def sign_pack_numpy(flat, scale="l1"):
    """The numpy twin of :func:`sign_pack` (``np.packbits``; the scale from numpy's sums)."""
    return np.packbits(flat >= 0), _sign_magnitude(_sign_sum_numpy(flat, scale), flat.size, scale)


def sign_unpack(bits, scale, n, out=None, dtype=np.float32):
    """``+scale[0]`` where the bit is 1 and ``-scale[0]`` where it is 0 (the scale cast to the output's
    dtype), for n elements, into ``out`` or a new array.  ``scale`` stays where it is (no host copy on a GPU)."""
    xp = get_array_module(bits, scale, out)
    out, flat_out = _new_output(xp, out, n, dtype)
    if xp is np:
        if enabled() and flat_out.dtype in (np.float32, np.float64):
            fast.sign_unpack(bits, flat_out.dtype.type(scale[0]), flat_out)
        else:
            sign_unpack_numpy(bits, scale, flat_out)
        return out
    if flat_out.dtype in (np.float32, np.float64):
        _launch(f"sign_unpack_{_suffix(flat_out.dtype)}", -(-n // VEC), bits, xp.ascontiguousarray(scale, xp.float32),
                np.int64(n), flat_out)
    else:
        xp.copyto(flat_out, sign_unpack(bits, scale, n))
    return out


def sign_unpack_numpy(bits, scale, flat_out):
    """The numpy twin of :func:`sign_unpack`, into the flat ``flat_out`` (any floating dtype)."""
    magnitude = flat_out.dtype.type(scale[0])
    table = np.array([-magnitude, magnitude], dtype=flat_out.dtype)
    np.take(table, np.unpackbits(bits, count=flat_out.size), out=flat_out)
    return flat_out


def sign_feedback(x, residual, scale="l1", pending=None):
    """Error feedback's step for sign on flat numpy arrays of one dtype: ``e += x``, the payload (bits,
    scale) of e, ``e -= decoded``; returns (bits, scale, what is still to subtract).

    ``pending``: the third value of the previous call for this residual, or None.  Compiled: one pass
    (the previous call's ``e -= decoded`` if pending, e += x, the bits and the scale's sum), and the new
    ``e -= decoded`` is left pending (returned: the scale), so each call reads and writes e once; until
    :func:`sign_settle` applies it, ``residual`` holds e before that subtraction.  Bitwise the three steps
    of the compiled kernels.  Without numba: the twins' three steps, nothing pending."""
    _check_sign_scale(scale)
    if enabled():
        bits = np.empty(-(-x.size // 8), dtype=np.uint8)
        previous = residual.dtype.type(0 if pending is None else pending[0])
        total = fast.sign_pack_feedback(x, residual, bits, scale == "l2", pending is not None, previous)
        magnitude = _sign_magnitude(total, x.size, scale)
        return bits, magnitude, magnitude
    if pending is not None:
        sign_settle(residual, pending)
    residual += x
    bits, magnitude = sign_pack_numpy(residual, scale)
    residual -= sign_unpack_numpy(bits, magnitude, np.empty_like(residual))
    return bits, magnitude, None


def sign_settle(residual, pending):
    """``e -= +scale where e >= 0, else -scale``: what :func:`sign_feedback` left pending (``pending``, its
    scale), subtracted from the flat numpy ``residual`` in place."""
    magnitude = residual.dtype.type(pending[0])
    if enabled():
        fast.sign_feedback_finish(residual, magnitude)
    else:
        residual -= np.where(residual >= 0, magnitude, -magnitude)


# -- Top-K, Random-K and scatter-add ------------------------------------------------------------------------------
def _magnitude_keys(flat):
    """|x| as unsigned integers (the bits without the sign): ordered as the magnitudes, NaN above inf."""
    if flat.dtype == np.float32:
        return flat.view(np.uint32) & np.uint32(0x7FFFFFFF)
    return flat.view(np.uint64) & np.uint64(0x7FFFFFFFFFFFFFFF)


def topk_select(x, k):
    """(values, int32 indices) of the k entries of largest magnitude, indices ascending.

    Magnitudes compare as the bits of |x| (so NaN ranks above inf and -0 ties
    +0); ties at the k-th magnitude go to the lower indices, so the selection
    is a function of x alone, the same on both backends (and the compiled
    kernel's, which estimates the threshold from a sample and selects among
    the candidates above it: :func:`~.compress_fast.topk`)."""
    xp = get_array_module(x)
    flat = _flat(xp, x)
    _check_float(flat)
    n, k = flat.size, int(k)
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, {n}], got {k}")
    if n > np.iinfo(np.int32).max:
        raise ValueError(f"int32 indices address at most {np.iinfo(np.int32).max} elements, got {n}")
    if k == n:
        indices = xp.arange(n, dtype=xp.int32)
        return flat.copy(), indices
    if k == 0:
        return xp.empty(0, dtype=flat.dtype), xp.empty(0, dtype=xp.int32)
    if xp is np:
        return fast.topk(flat, k) if enabled() else topk_select_numpy(flat, k)
    keys = _magnitude_keys(flat)
    threshold = xp.sort(keys)[n - k]                # the k-th largest key, kept on the device
    take = keys > threshold
    need = k - xp.count_nonzero(take)               # ties to take, lowest indices first
    equal = keys == threshold
    take |= equal & (xp.cumsum(equal, dtype=xp.int64) <= need)
    positions = xp.cumsum(take, dtype=xp.int64)
    values, indices = xp.empty(k, dtype=flat.dtype), xp.empty(k, dtype=xp.int32)
    _launch(f"topk_compact_{_suffix(flat.dtype)}", n, flat, take, positions, np.int64(n), values, indices)
    return values, indices


def topk_select_numpy(flat, k):
    """The numpy twin of :func:`topk_select` for 0 < k < n (a linear ``np.partition`` of the keys)."""
    keys = _magnitude_keys(flat)
    n = flat.size
    threshold = np.partition(keys, n - k)[n - k]
    take = keys > threshold
    ties = np.flatnonzero(keys == threshold)[:k - np.count_nonzero(take)]
    take[ties] = True
    indices = np.flatnonzero(take).astype(np.int32)
    return flat[indices], indices


def topk_feedback(x, residual, k):
    """Error feedback's step for Top-K on flat numpy arrays of one dtype: ``e += x``, the top k of e
    (values, indices), ``e[indices] -= values`` (zeros, NaN where e was inf or NaN).  Compiled: e += x in
    the pass that collects the candidates, bitwise the three steps; else the twins' three steps."""
    if enabled() and 0 < k < x.size:
        return fast.topk(x, k, residual)
    residual += x
    values, indices = topk_select(residual, k)
    scatter_add(residual, indices, values, subtract=True)
    return values, indices


def _checked_indices(indices, n):
    """``indices`` as an integer array, with numpy's IndexError for one outside [-n, n) (compiled paths)."""
    indices = np.asarray(indices)
    if indices.dtype.kind not in "iu":
        raise IndexError("arrays used as indices must be of integer type")
    bad = fast.first_bad_index(indices.reshape(-1), n)
    if bad >= 0:
        raise IndexError(f"index {indices.reshape(-1)[bad]} is out of bounds for axis 0 with size {n}")
    return indices.reshape(-1)


def zero_scatter(flat_out, indices, values):
    """``flat_out[:] = 0; flat_out[indices] = values``: the decode of Top-K and Random-K (numpy or CuPy;
    one compiled pass on float32/float64 numpy arrays)."""
    if get_array_module(flat_out) is np and enabled() and flat_out.dtype in (np.float32, np.float64):
        fast.zero_scatter(flat_out, _checked_indices(indices, flat_out.size), values)
    else:
        flat_out.fill(0)
        flat_out[indices] = values
    return flat_out


def sparse_gather(flat, indices, scale=1.0):
    """Random-K's values ``flat[indices]``, times ``scale`` (in flat's dtype) unless it is 1 (numpy or CuPy;
    one compiled loop on numpy arrays)."""
    if get_array_module(flat) is np and enabled():
        values = np.empty(indices.size, dtype=flat.dtype)
        fast.gather(flat, _checked_indices(indices, flat.size), flat.dtype.type(scale), scale != 1.0, values)
        return values
    values = flat[indices]
    if scale != 1.0:
        values *= values.dtype.type(scale)
    return values


def sparse_gather_feedback(x, residual, indices, scale=1.0):
    """Error feedback's step for Random-K on flat numpy arrays (``indices`` unique): ``e += x``, the values
    :func:`sparse_gather` of e, ``e[indices] -= values``; compiled: the gather and the subtraction in one
    loop over the k indices, bitwise the three steps."""
    residual += x
    if enabled():
        values = np.empty(indices.size, dtype=residual.dtype)
        fast.gather_feedback(residual, _checked_indices(indices, residual.size), residual.dtype.type(scale),
                             scale != 1.0, values)
        return values
    values = sparse_gather(residual, indices, scale)
    scatter_add(residual, indices, values, subtract=True)
    return values


def scatter_add(out, indices, values, subtract=False):
    """``out[indices] += values`` (``-=`` with ``subtract``), repeated indices adding up (``np.add.at``);
    ``out`` is a contiguous array, addressed flat; ``values`` are first cast to its dtype.  Returns ``out``."""
    xp = get_array_module(out, indices, values)
    if not out.flags.c_contiguous:
        raise ValueError("scatter_add: out must be C-contiguous")
    flat = out.reshape(-1)
    values = values.astype(flat.dtype, copy=False)
    if xp is np:
        if enabled() and flat.dtype in (np.float32, np.float64):
            fast.scatter_add(flat, _checked_indices(indices, flat.size), values.reshape(-1), -1 if subtract else 1)
        else:
            scatter_add_numpy(flat, indices, values, subtract)
        return out
    if subtract:
        values = -values
    if flat.dtype in (np.float32, np.float64) and flat.size <= np.iinfo(np.int32).max:
        indices = xp.ascontiguousarray(indices, dtype=xp.int32)
        _launch(f"scatter_add_{_suffix(flat.dtype)}", indices.size, flat, indices, xp.ascontiguousarray(values),
                np.int64(indices.size))
    else:
        import cupyx
        cupyx.scatter_add(flat, indices, values)
    return out


def scatter_add_numpy(flat, indices, values, subtract=False):
    """The numpy twin of :func:`scatter_add` (``np.add.at``; values already of flat's dtype)."""
    (np.subtract if subtract else np.add).at(flat, indices, values)
    return flat


# -- fp16 and bf16 -------------------------------------------------------------------------------------------------
def to_fp16(x):
    """IEEE half of ``x`` (float32 or float64, rounded once to nearest even), as float16; beyond 65504: +-inf."""
    xp = get_array_module(x)
    flat = _flat(xp, x)
    _check_float(flat)
    if xp is np:
        if enabled():
            out = np.empty(flat.size, dtype=np.float16)
            (fast.to_fp16_f32 if flat.dtype == np.float32 else fast.to_fp16_f64)(flat, out.view(np.uint16))
            return out
        return to_fp16_numpy(flat)
    out = xp.empty(flat.size, dtype=xp.float16)
    _launch(f"to_fp16_{_suffix(flat.dtype)}", -(-flat.size // VEC), flat, out, np.int64(flat.size))
    return out


def to_fp16_numpy(flat):
    """The numpy twin of :func:`to_fp16` (a cast)."""
    with np.errstate(over="ignore"):  # beyond 65504: inf, as documented
        return flat.astype(np.float16)


def from_fp16(halves, out=None, dtype=np.float32):
    """The values of float16 ``halves`` (exact), into ``out`` or a new array of ``dtype``."""
    xp = get_array_module(halves, out)
    out, flat_out = _new_output(xp, out, halves.size, dtype)
    if xp is np:
        if enabled() and flat_out.dtype in (np.float32, np.float64) and halves.dtype == np.float16:
            (fast.from_fp16_f32 if flat_out.dtype == np.float32 else fast.from_fp16_f64)(
                _flat(np, halves).view(np.uint16), flat_out)
        else:
            from_fp16_numpy(halves, flat_out)
    elif flat_out.dtype in (np.float32, np.float64):
        _launch(f"from_fp16_{_suffix(flat_out.dtype)}", -(-halves.size // VEC), xp.ascontiguousarray(halves), flat_out,
                np.int64(halves.size))
    else:
        with np.errstate(invalid="ignore"):  # widening a signalling NaN
            xp.copyto(flat_out, halves.reshape(-1))
    return out


def from_fp16_numpy(halves, flat_out):
    """The numpy twin of :func:`from_fp16`, into the flat ``flat_out`` (a cast)."""
    with np.errstate(invalid="ignore"):  # widening a signalling NaN
        np.copyto(flat_out, halves.reshape(-1))
    return flat_out


def fp16_feedback(x, residual):
    """Error feedback's step for fp16 on flat numpy arrays of one dtype: ``e += x``, the float16 payload of
    e, ``e -= float(payload)``: one compiled pass (bitwise the three steps), or the twins' three steps."""
    if enabled():
        halves = np.empty(x.size, dtype=np.float16)
        (fast.fp16_feedback_f32 if x.dtype == np.float32 else fast.fp16_feedback_f64)(
            x, residual, halves.view(np.uint16))
        return halves
    residual += x
    halves = to_fp16_numpy(residual)
    residual -= from_fp16_numpy(halves, np.empty_like(residual))
    return halves


def to_bf16(x):
    """uint16 bfloat16 bit patterns of ``x``: float64 first rounded to float32, then
    ``(bits + 0x7FFF + ((bits >> 16) & 1)) >> 16`` (nearest, ties to even); NaN -> 0x7FC0 with its sign."""
    xp = get_array_module(x)
    flat = _flat(xp, x)
    if xp is not np:
        _check_float(flat)
        out = xp.empty(flat.size, dtype=xp.uint16)
        _launch(f"to_bf16_{_suffix(flat.dtype)}", -(-flat.size // VEC), flat, out, np.int64(flat.size))
        return out
    if enabled() and flat.dtype in (np.float32, np.float64):
        out = np.empty(flat.size, dtype=np.uint16)
        fast.to_bf16(flat, out)
        return out
    return to_bf16_numpy(flat)


def to_bf16_numpy(flat):
    """The numpy twin of :func:`to_bf16` (a few integer passes)."""
    with np.errstate(over="ignore"):  # float64 beyond float32's range: +-inf
        bits = np.ascontiguousarray(flat, dtype=np.float32).view(np.uint32)
    rounded = (bits >> 16) & np.uint32(1)
    rounded += bits
    rounded += np.uint32(0x7FFF)
    rounded >>= 16
    out = rounded.astype(np.uint16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():  # the rounding carry may have reached the sign bit: keep the input's sign
        out[nan] = np.uint16(0x7FC0) | ((bits[nan] >> 16).astype(np.uint16) & np.uint16(0x8000))
    return out


def from_bf16(bits, out=None, dtype=np.float32):
    """The float32 values of uint16 bfloat16 bit patterns (exact), into ``out`` or a new array of ``dtype``."""
    xp = get_array_module(bits, out)
    out, flat_out = _new_output(xp, out, bits.size, dtype)
    if xp is np and enabled() and flat_out.dtype in (np.float32, np.float64) and bits.dtype == np.uint16:
        fast.from_bf16(_flat(np, bits), flat_out)
    elif xp is not np and flat_out.dtype in (np.float32, np.float64):
        _launch(f"from_bf16_{_suffix(flat_out.dtype)}", -(-bits.size // VEC), xp.ascontiguousarray(bits), flat_out,
                np.int64(bits.size))
    else:
        from_bf16_numpy(bits, flat_out)
    return out


def from_bf16_numpy(bits, flat_out):
    """The numpy twin of :func:`from_bf16`, into the flat ``flat_out`` (also the CuPy path to outputs of
    other dtypes)."""
    xp = get_array_module(flat_out)
    wide = bits.reshape(-1).astype(xp.uint32)
    wide <<= 16
    with np.errstate(invalid="ignore"):  # widening a signalling NaN
        xp.copyto(flat_out, wide.view(xp.float32))
    return flat_out


def bf16_feedback(x, residual):
    """Error feedback's step for bf16 on flat numpy arrays of one dtype: ``e += x``, the bfloat16 payload of
    e, ``e -= float(payload)``: one compiled pass (bitwise the three steps), or the twins' three steps."""
    if enabled():
        patterns = np.empty(x.size, dtype=np.uint16)
        fast.bf16_feedback(x, residual, patterns)
        return patterns
    residual += x
    patterns = to_bf16_numpy(residual)
    residual -= from_bf16_numpy(patterns, np.empty_like(residual))
    return patterns
