"""``bf16``: bfloat16 (the upper 16 bits of a float32), stored as uint16.

Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training".
Cost: 2 B per element; one kernel each way on CuPy arrays, one compiled pass
(numba) or a few integer passes on numpy ones
(:func:`~mpiopt.kernels.compress.to_bf16` and ``from_bf16``, the same bits;
with error feedback one pass for ``e += x``, the payload and ``e -= decoded``).  float32's range with 8 significant bits:
relative error at most 2^-8, rounding to nearest with ties to even, computed
on the float32 bit pattern:

    bits = float32 bits of x;  bf16 = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16

NaN stays NaN (quiet), +-inf stays +-inf, values that round beyond the largest
bfloat16 become +-inf.  float64 input is first rounded to float32.

Not linear here: numpy has no bfloat16 arithmetic, so the compressed reducer
gathers the payloads and sums the decoded values (in the input's precision).
"""
import numpy as np

from ..core.registry import register
from ..kernels.compress import bf16_feedback, from_bf16, to_bf16
from .base import Compressor, element_count

QUIET_NAN = np.uint16(0x7FC0)


def float32_to_bf16(x):
    """uint16 bfloat16 bit patterns of ``x``, rounded to nearest, ties to even (``kernels.compress.to_bf16``)."""
    return to_bf16(x)


def bf16_to_float32(bits, out=None):
    """float32 values of uint16 bfloat16 bit patterns (exact; :func:`~mpiopt.kernels.compress.from_bf16`)."""
    return from_bf16(bits, out=out)


@register("compressor", "bf16")
class BF16(Compressor):
    name = "bf16"

    def context(self, shape, dtype, name=None, step=0):
        size = element_count(shape)
        return self.make_context(shape, dtype, name, step, [(np.uint16, size)])

    def encode(self, flat, ctx):
        return (float32_to_bf16(flat),)

    def decode(self, payload, ctx, flat_out):
        bf16_to_float32(payload[0], flat_out)

    def encode_feedback(self, flat, residual, ctx):
        """``residual += flat``, the payload of the new residual and ``residual -= decoded``, fused (flat numpy
        arrays of one dtype; :class:`~mpiopt.compression.error_feedback.ErrorFeedback` calls it)."""
        return (bf16_feedback(flat, residual),)
