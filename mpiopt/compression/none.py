"""``none``: the identity, the baseline every compressor is measured against.

Cost: the input's itemsize per element (4 B for float32); one copy to compress
(the payload never aliases the input), one to decompress.  Linear and exact.
"""
import numpy as np

from ..core.registry import register
from .base import Compressor, element_count


@register("compressor", "none")
class NoCompression(Compressor):
    name = "none"
    linear = True
    unbiased = True

    def context(self, shape, dtype, name=None, step=0):
        size = element_count(shape)
        return self.make_context(shape, dtype, name, step, [(dtype, size)])

    def encode(self, flat, ctx):
        return (flat.copy(),)

    def decode(self, payload, ctx, flat_out):
        np.copyto(flat_out, payload[0])
