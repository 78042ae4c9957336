"""``qsgd`` (``qsgd8``, ``qsgd4``): stochastic quantization with one norm per bucket.

Alistarh, Grubic, Li, Tomioka and Vojnovic 2017, "QSGD: Communication-Efficient
SGD via Gradient Quantization and Encoding" (without the Elias coding: fixed
widths, so the payload size is known in advance).  The vector is cut into
buckets of ``bucket_size`` elements (the last may be shorter); bucket b has the
norm N_b (``norm="l2"`` as the paper, or ``"max"``), s = 2^(bits-1) - 1 levels
per sign (127 for 8 bits, 7 for 4 bits), and

    y_i = s x_i / N_b,    level_i = floor(y_i + u_i),  u_i ~ U[0, 1)   (so E[level_i] = y_i)
    decoded_i = N_b level_i / s

Stochastic rounding of the signed y_i has the distribution of the paper's
sign(x_i) xi(|x_i|).  Hence: unbiased; |decoded_i - x_i| < N_b / s; with the
l2 norm E||decoded_b - x_b||^2 <= min(d / s^2, sqrt(d) / s) ||x_b||^2 for a
bucket of d elements (the paper's Lemma 3.1); with the max norm the variance of
each element is at most N_b^2 / (4 s^2), much less for the same bits.

Payload: the norms (float32, stored rounded up by 2^-20 so that |y_i| < s
despite the roundings of a sum of squares in float32; levels are clipped to
[-s, s] besides) and the levels, int8 for 8 bits, two signed nibbles per
byte for 4 bits (element 2j in the low nibble):

    bytes = n (8 bits) or ceil(n / 2) (4 bits),  + 4 ceil(n / bucket_size)

Compute: about six vectorized passes to compress (norms, scale, noise, add,
floor, narrow), two to decompress.  Not linear: each rank's norms differ.

Noise: ``random_stream(seed, "qsgd", name, worker, step)``.  Unbiasedness of
the sum over ranks needs independent noise on each rank, hence ``worker`` (the
compressed reducer sets it to the rank when it builds the compressor by name);
reproducibility needs seeding, hence ``seed`` and the step.  The noise is
float32 (float64 for float64 input), so the rounding probabilities are exact
to about 2^-24 of a level.
"""
import numpy as np

from ..core.random import random_stream
from ..core.registry import register
from .base import Compressor

NORMS = ("l2", "max")
NORM_MARGIN = 1.0 + 2.0 ** -20


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
    """Signed 4-bit levels (int8 in [-8, 7]), two per byte: element 2j low, 2j + 1 high."""
    packed = np.bitwise_and(levels[0::2].view(np.uint8), np.uint8(0x0F))
    packed[:levels.size // 2] |= levels[1::2].view(np.uint8) << 4
    return packed


def unpack_nibbles(packed, count):
    """The int8 levels of :func:`pack_nibbles` (sign-extended by arithmetic shifts)."""
    levels = np.empty(2 * packed.size, dtype=np.int8)
    levels[0::2] = (packed << 4).view(np.int8) >> 4
    levels[1::2] = packed.view(np.int8) >> 4
    return levels[:count]


@register("compressor", "qsgd")
class QSGD(Compressor):
    name = "qsgd"
    unbiased = True
    options = ("bits", "bucket_size", "norm", "seed", "worker")

    def __init__(self, bits=8, bucket_size=512, norm="l2", seed=0, worker=0):
        super().__init__()
        if bits not in (4, 8):
            raise ValueError(f"{self.name}: bits must be 8 or 4, got {bits!r}")
        if isinstance(bucket_size, bool) or not isinstance(bucket_size, (int, np.integer)) or bucket_size < 1:
            raise ValueError(f"{self.name}: bucket_size must be an integer >= 1, got {bucket_size!r}")
        if norm not in NORMS:
            raise ValueError(f"{self.name}: norm must be one of {', '.join(NORMS)}, got {norm!r}")
        self.bits, self.bucket_size, self.norm = int(bits), int(bucket_size), norm
        self.seed, self.worker = seed, int(worker)
        self.levels = 2 ** (self.bits - 1) - 1

    def context(self, shape, dtype, name=None, step=0):
        size = int(np.prod(shape, dtype=np.int64))
        buckets = -(-size // self.bucket_size)
        level_bytes = size if self.bits == 8 else -(-size // 2)
        level_dtype = np.int8 if self.bits == 8 else np.uint8
        return self.make_context(shape, dtype, name, step, [(np.float32, buckets), (level_dtype, level_bytes)])

    def bucket_norms(self, flat):
        """One float32 norm per bucket, rounded up by ``NORM_MARGIN``."""
        full = flat.size // self.bucket_size * self.bucket_size
        rows = flat[:full].reshape(-1, self.bucket_size)
        tail = flat[full:]
        if self.norm == "l2":
            norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
            wide = tail.astype(np.float64)
            tail_norm = np.sqrt(wide @ wide) if tail.size else None
        else:
            norms = np.max(np.abs(rows), axis=1) if rows.size else np.empty(0)
            tail_norm = np.abs(tail).max() if tail.size else None
        if tail_norm is not None:
            norms = np.append(norms, tail_norm)
        return (np.asarray(norms, dtype=np.float64) * NORM_MARGIN).astype(np.float32)

    def encode(self, flat, ctx):
        norms = self.bucket_norms(flat)
        scale = np.zeros(norms.size, dtype=flat.dtype)
        np.divide(self.levels, norms, out=scale, where=norms > 0)
        y = per_bucket(np.multiply, flat, scale, self.bucket_size, self.scratch("y", flat.size, flat.dtype))
        noise = self.scratch("noise", flat.size, flat.dtype)
        random_stream(self.seed, "qsgd", ctx.name, self.worker, ctx.step).random(out=noise, dtype=flat.dtype)
        y += noise
        np.floor(y, out=y)
        bound = flat.dtype.type(self.levels)
        np.clip(y, -bound, bound, out=y)  # acts only where the margin did not cover a norm's rounding
        levels = y.astype(np.int8)
        return norms, (levels if self.bits == 8 else pack_nibbles(levels))

    def decode(self, payload, ctx, flat_out):
        norms, stored = payload
        levels = stored if self.bits == 8 else unpack_nibbles(stored, ctx.size)
        step = (norms / np.float32(self.levels)).astype(flat_out.dtype)
        per_bucket(np.multiply, levels, step, self.bucket_size, flat_out)


@register("compressor", "qsgd8")
class QSGD8(QSGD):
    name = "qsgd8"
    options = ("bucket_size", "norm", "seed", "worker")

    def __init__(self, bucket_size=512, norm="l2", seed=0, worker=0):
        super().__init__(8, bucket_size, norm, seed, worker)


@register("compressor", "qsgd4")
class QSGD4(QSGD):
    name = "qsgd4"
    options = ("bucket_size", "norm", "seed", "worker")

    def __init__(self, bucket_size=512, norm="l2", seed=0, worker=0):
        super().__init__(4, bucket_size, norm, seed, worker)
