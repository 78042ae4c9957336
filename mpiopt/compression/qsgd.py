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

Payload: the norms (float32; l2: the square root of the float64 sum of
squares in element order, stored rounded up by 2^-20 so that |y_i| < s despite
the roundings; levels are clipped to [-s, s] besides) and the levels, int8 for
8 bits, two signed nibbles per byte for 4 bits (element 2j in the low nibble):

    bytes = n (8 bits) or ceil(n / 2) (4 bits),  + 4 ceil(n / bucket_size)

Compute: the kernels of :mod:`mpiopt.kernels.compress` (one pass for the
norms, one that draws the noise and quantizes; one to decompress) on CuPy
arrays, their numpy twins (a few vectorized passes each) on numpy arrays; the
payload stays in the input's module, and both give the same bits.  Not
linear: each rank's norms differ.

Noise: u_i comes from Philox4x64-10, a counter-based generator, keyed by
``philox_key(seed, "qsgd", name, worker)`` (:mod:`mpiopt.kernels.philox`, the
key derived as :func:`~mpiopt.core.random.random_stream` derives its seed):
element i takes the low (even i) or high (odd i) 32 bits of word
(i // 2) % 4 of the block at counter (i // 8, step, 0, 0), as
``(bits >> 8) 2^-24``: one of 2^24 equally likely values in [0, 1), in
float32 (float64 for float64 input), the same bits on the CPU (numpy's own
``numpy.random.Philox``, the same generator, for the whole buffer) and the GPU
(a thread per block of eight elements).  Unbiasedness of the sum over ranks
needs independent noise on each rank, hence ``worker`` (the compressed reducer
sets it to the rank, for a compressor object handed to it too); reproducibility
needs seeding, hence ``seed`` and the step.  The rounding probabilities are
exact to 2^-24 of a level, save for float32's rounding of y_i + u_i (its
spacing near |y_i| <= s: at most 2^-17 of a level for 8 bits).
"""
import numpy as np

from ..core.options import Option, Options, seed_option
from ..core.registry import register
from ..kernels.compress import (NORM_MARGIN, NORMS, pack_nibbles, per_bucket, qsgd_dequantize, qsgd_feedback,
                                qsgd_norms, qsgd_quantize, unpack_nibbles)
from .base import Compressor, element_count

__all__ = ["NORM_MARGIN", "NORMS", "QSGD", "QSGD4", "QSGD8", "pack_nibbles", "per_bucket", "unpack_nibbles"]


@register("compressor", "qsgd")
class QSGD(Compressor):
    name = "qsgd"
    unbiased = True
    options = Options(
        Option("bits", int, 8, "bits per level: 8 (int8) or 4 (two per byte)", choices=(8, 4),
               message="bits must be 8 or 4, got {value!r}"),
        Option("bucket_size", int, 512, "elements per bucket, each with its own norm", low=1,
               message="bucket_size must be an integer >= 1, got {value!r}"),
        Option("norm", str, "l2", "the bucket's norm: l2 (the paper's) or max (less variance)", choices=NORMS),
        seed_option("seed of the rounding noise"),
        Option("worker", int, 0, "this worker's noise stream (the compressed reducer sets it to the rank)", low=0))

    def __init__(self, **options):
        super().__init__(**options)
        self.levels = 2 ** (self.bits - 1) - 1

    def context(self, shape, dtype, name=None, step=0):
        size = element_count(shape)
        buckets = -(-size // self.bucket_size)
        level_bytes = size if self.bits == 8 else -(-size // 2)
        level_dtype = np.int8 if self.bits == 8 else np.uint8
        return self.make_context(shape, dtype, name, step, [(np.float32, buckets), (level_dtype, level_bytes)])

    def bucket_norms(self, flat):
        """One float32 norm per bucket, rounded up by ``NORM_MARGIN`` (:func:`~mpiopt.kernels.compress.qsgd_norms`)."""
        return qsgd_norms(flat, self.bucket_size, self.norm)

    def encode(self, flat, ctx):
        return qsgd_quantize(flat, self.bits, self.bucket_size, self.norm, self.seed,
                             ("qsgd", ctx.name, self.worker), ctx.step)

    def decode(self, payload, ctx, flat_out):
        norms, stored = payload
        qsgd_dequantize(norms, stored, ctx.size, self.bits, self.bucket_size, out=flat_out)

    def encode_feedback(self, flat, residual, ctx):
        """``residual += flat``, the payload of the new residual and ``residual -= decoded``, fused (flat numpy
        arrays of one dtype; :class:`~mpiopt.compression.error_feedback.ErrorFeedback` calls it)."""
        return qsgd_feedback(flat, residual, self.bits, self.bucket_size, self.norm, self.seed,
                             ("qsgd", ctx.name, self.worker), ctx.step)


@register("compressor", "qsgd8")
class QSGD8(QSGD):
    name = "qsgd8"
    options = QSGD.options.without("bits")
    bits = 8


@register("compressor", "qsgd4")
class QSGD4(QSGD):
    name = "qsgd4"
    options = QSGD.options.without("bits")
    bits = 4
