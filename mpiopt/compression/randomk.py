"""``randomk``: k entries at indices that every rank draws alike, so payloads add up.

Wangni, Wang, Liu and Zhang 2018, "Gradient Sparsification for
Communication-Efficient Distributed Optimization"; Stich, Cordonnier and Jaggi
2018 (Random-K with memory).

The k indices (without replacement, ascending) come from
``random_stream(seed, "randomk", name, step)``: the same on every rank for the
same buffer name and step, and new at every step.  Since the indices are
shared, only the values travel and the payloads of all ranks can be summed as
they travel: Random-K is linear.  With ``unbiased=True`` (the default) the
values are scaled by n/k, so E[decoded] = x (variance (n/k - 1) x_i^2 per
element); with ``unbiased=False`` they are not scaled, the operator is a
contraction (||decoded - x||^2 has expectation (1 - k/n) ||x||^2) and the
compressed reducer adds error feedback by default.

    bytes = k itemsize              (float32: 4 k; the indices never travel)

Compute: drawing k of n indices (numpy's ``choice`` without replacement, on
the host: they are part of the ctx), a gather and a scale; decompressing zeroes
n and scatters k.  On CuPy arrays the indices are copied to the GPU once per
ctx, and the values stay there.  Every rank with the
same ``seed`` must use the same one (it is the shared part).
"""
import numpy as np

from ..core.backend import get_array_module
from ..core.options import Option, Options, seed_option
from ..core.random import random_stream
from ..kernels.compress import scatter_add, sparse_gather, sparse_gather_feedback, zero_scatter
from ..core.registry import register
from .base import SPARSE_OPTIONS, SparseCompressor, element_count, sparse_count


@register("compressor", "randomk")
class RandomK(SparseCompressor):
    name = "randomk"
    linear = True
    options = SPARSE_OPTIONS + Options(
        seed_option("seed of the shared indices (every rank must use the same)"),
        Option("unbiased", bool, True, "scale the values by n/k (unbiased); False: a contraction, with error "
                                       "feedback by default"))

    def __init__(self, **options):
        super().__init__(**options)
        self.error_feedback = not self.unbiased

    def context(self, shape, dtype, name=None, step=0):
        size = element_count(shape)
        k = sparse_count(size, self.ratio, self.k)
        ctx = self.make_context(shape, dtype, name, step, [(dtype, k)], k=k)
        indices = random_stream(self.seed, "randomk", ctx.name, ctx.step).choice(size, k, replace=False)
        indices.sort()
        ctx.info["indices"] = indices
        ctx.info["scale"] = size / k if (self.unbiased and k) else 1.0
        return ctx

    def encode(self, flat, ctx):
        return (sparse_gather(flat, self.indices(ctx, flat), ctx.info["scale"]),)

    def decode(self, payload, ctx, flat_out):
        zero_scatter(flat_out, self.indices(ctx, flat_out), payload[0])

    def encode_feedback(self, flat, residual, ctx):
        """``residual += flat``, the payload of the new residual and ``residual -= decoded``, fused (flat numpy
        arrays of one dtype; :class:`~mpiopt.compression.error_feedback.ErrorFeedback` calls it)."""
        return (sparse_gather_feedback(flat, residual, ctx.info["indices"], ctx.info["scale"]),)

    def accumulate(self, payload, ctx, out, subtract=False):
        flat = self._output(ctx, out, payload).reshape(-1)
        scatter_add(flat, self.indices(ctx, flat), payload[0], subtract)
        return out

    @staticmethod
    def indices(ctx, like):
        """ctx's indices in the array module of ``like`` (copied to a GPU once per ctx, then kept in it)."""
        xp = get_array_module(like)
        if xp is np:
            return ctx.info["indices"]
        device = ctx.info.get("device_indices")
        if device is None:
            device = ctx.info["device_indices"] = xp.asarray(ctx.info["indices"])
        return device
