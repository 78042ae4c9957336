"""``topk``: the k entries of largest magnitude, as values and int32 indices.

Aji and Heafield 2017, "Sparse Communication for Distributed Gradient Descent";
Stich, Cordonnier and Jaggi 2018, "Sparsified SGD with Memory" (with error
feedback, which the compressed reducer adds by default: Top-K is biased, and
||decoded - x||^2 <= (1 - k/n) ||x||^2, a contraction).

k is ``k`` when given (at most n), else round(ratio n), at least 1 for n > 0.
Payload: the values (the input's dtype) and their indices (int32, ascending):

    bytes = k (itemsize + 4)          (float32: 8 k, so below n/2 entries it saves bytes)

Compute: one ``argpartition`` of |x| (linear time), a sort of the k indices and
a gather; decompressing zeroes n and scatters k (adding into a sum scatters
only).  Not linear: each rank picks its own indices.  Ties in |x| are broken by
``argpartition`` (deterministically for the same input).
"""
import numpy as np

from ..core.registry import register
from .base import Compressor, check_sparse_options, sparse_count

MAX_INDEX = np.iinfo(np.int32).max


@register("compressor", "topk")
class TopK(Compressor):
    name = "topk"
    error_feedback = True
    options = ("ratio", "k")

    def __init__(self, ratio=0.01, k=None):
        super().__init__()
        check_sparse_options(self.name, ratio, k)
        self.ratio, self.k = ratio, k

    def context(self, shape, dtype, name=None, step=0):
        size = int(np.prod(shape, dtype=np.int64))
        if size > MAX_INDEX:
            raise ValueError(f"{self.name}: int32 indices address at most {MAX_INDEX} elements, got {size}")
        k = sparse_count(size, self.ratio, self.k)
        return self.make_context(shape, dtype, name, step, [(dtype, k), (np.int32, k)], k=k)

    def encode(self, flat, ctx):
        k = ctx.info["k"]
        if k == flat.size:
            indices = np.arange(k, dtype=np.int32)
        else:
            magnitudes = np.abs(flat)
            indices = np.argpartition(magnitudes, flat.size - k)[flat.size - k:].astype(np.int32)
            indices.sort()
        return flat[indices], indices

    def decode(self, payload, ctx, flat_out):
        values, indices = payload
        flat_out.fill(0)
        flat_out[indices] = values

    def accumulate(self, payload, ctx, out, subtract=False):
        values, indices = payload
        flat = self._output(ctx, out).reshape(-1)
        if subtract:
            flat[indices] -= values
        else:
            flat[indices] += values
        return out
