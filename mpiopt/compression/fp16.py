"""``fp16``: IEEE half precision, as Horovod's ``Compression.fp16`` and PyTorch DDP's
``fp16_compress_hook``.

Cost: 2 B per element (half of float32); one conversion pass each way
(:func:`~mpiopt.kernels.compress.to_fp16` and ``from_fp16``: CUDA kernels on
CuPy arrays, compiled kernels (numba) or numpy casts on numpy ones, the same
bits); with error feedback one pass does ``e += x``, the payload and
``e -= decoded`` (:func:`~mpiopt.kernels.compress.fp16_feedback`).
Relative error at most 2^-11 (round to nearest even) for |x| in the normal
range [6.1e-5, 65504]; smaller values lose bits gradually (subnormals down to
6e-8, then 0), larger ones become +-inf.

Linear: float16 payloads are summed as they travel (the compressed reducer's
ring adds them in float16), so the *sum* must stay below 65504 too and each
addition rounds to 11 bits: p ranks add up to (p - 1) more roundings.  Divide
before compressing, reduce with ``op="mean"`` on the decoded values, or use
``mode="allgather"`` (decoded and summed in the input's precision) when that
matters; bf16 has float32's range.
"""
import numpy as np

from ..core.registry import register
from ..kernels.compress import fp16_feedback, from_fp16, to_fp16
from .base import Compressor, element_count


@register("compressor", "fp16")
class FP16(Compressor):
    name = "fp16"
    linear = True

    def context(self, shape, dtype, name=None, step=0):
        size = element_count(shape)
        return self.make_context(shape, dtype, name, step, [(np.float16, size)])

    def encode(self, flat, ctx):
        return (to_fp16(flat),)  # beyond 65504: inf, as documented

    def decode(self, payload, ctx, flat_out):
        from_fp16(payload[0], out=flat_out)

    def encode_feedback(self, flat, residual, ctx):
        """``residual += flat``, the payload of the new residual and ``residual -= decoded``, fused (flat numpy
        arrays of one dtype; :class:`~mpiopt.compression.error_feedback.ErrorFeedback` calls it)."""
        return (fp16_feedback(flat, residual),)
