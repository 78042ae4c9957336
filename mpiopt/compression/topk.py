"""``topk``: the k entries of largest magnitude, as values and int32 indices.

Aji and Heafield 2017, "Sparse Communication for Distributed Gradient Descent";
Stich, Cordonnier and Jaggi 2018, "Sparsified SGD with Memory" (with error
feedback, which the compressed reducer adds by default: Top-K is biased, and
||decoded - x||^2 <= (1 - k/n) ||x||^2, a contraction).

k is ``k`` when given (at most n), else round(ratio n), at least 1 for n > 0.
Payload: the values (the input's dtype) and their indices (int32, ascending):

    bytes = k (itemsize + 4)          (float32: 8 k, so below n/2 entries it saves bytes)

Compute: :func:`~mpiopt.kernels.compress.topk_select`: the k-th largest
magnitude (a linear ``partition`` on numpy, a sort on a GPU; compiled, one
pass that collects the candidates above a threshold estimated from a sample,
then a selection among them), the entries above it and the first of its ties,
compacted in index order; decompressing zeroes n and scatters k, adding into a
sum scatters only (:func:`~mpiopt.kernels.compress.scatter_add`).  With error
feedback the compiled pass adds x into the residual as it collects, and the k
selected residuals are zeroed.  Not linear: each rank picks
its own indices.  Ties in |x| go to the lower indices, so the selection is the
same on the CPU and the GPU.
"""
import numpy as np

from ..core.registry import register
from ..kernels.compress import scatter_add, topk_feedback, topk_select, zero_scatter
from .base import SparseCompressor, element_count, sparse_count

MAX_INDEX = np.iinfo(np.int32).max


@register("compressor", "topk")
class TopK(SparseCompressor):
    name = "topk"
    error_feedback = True

    def context(self, shape, dtype, name=None, step=0):
        size = element_count(shape)
        if size > MAX_INDEX:
            raise ValueError(f"{self.name}: int32 indices address at most {MAX_INDEX} elements, got {size}")
        k = sparse_count(size, self.ratio, self.k)
        return self.make_context(shape, dtype, name, step, [(dtype, k), (np.int32, k)], k=k)

    def encode(self, flat, ctx):
        return topk_select(flat, ctx.info["k"])

    def decode(self, payload, ctx, flat_out):
        values, indices = payload
        zero_scatter(flat_out, indices, values)

    def encode_feedback(self, flat, residual, ctx):
        """``residual += flat``, the payload of the new residual and ``residual -= decoded``, fused (flat numpy
        arrays of one dtype; :class:`~mpiopt.compression.error_feedback.ErrorFeedback` calls it)."""
        return topk_feedback(flat, residual, ctx.info["k"])

    def accumulate(self, payload, ctx, out, subtract=False):
        values, indices = payload
        scatter_add(self._output(ctx, out, payload).reshape(-1), indices, values, subtract)
        return out
