"""``sign``: one bit per element and one scale (signSGD with a scale; EF-signSGD).

Bernstein, Wang, Azizzadenesheli and Anandkumar 2018, "signSGD: Compressed
Optimisation for Non-Convex Problems"; Karimireddy, Rebjock, Stich and Jaggi
2019, "Error Feedback Fixes SignSGD and other Gradient Compression Schemes"
(the scale ||x||_1 / n, ``scale="l1"``, the default); DeepSpeed's 1-bit Adam
(Tang et al. 2021) uses ||x||_2 / sqrt(n) (``scale="l2"``).

    decoded_i = scale * (+1 if x_i >= 0 else -1)

Payload: the scale (float32) and the signs packed eight per byte
(``np.packbits``, first element in the high bit; 1 = non-negative):

    bytes = 4 + ceil(n / 8)          (1/32 of float32, plus 4 bytes)

Compute: a comparison and a pack to compress, an unpack and a multiply-add to
decompress.  Biased (and not linear: scales differ), but with the l1 scale
||decoded - x||^2 = ||x||^2 - ||x||_1^2 / n <= (1 - 1/n) ||x||^2, a contraction,
which is what error feedback needs; the compressed reducer wraps it in
:class:`~mpiopt.compression.error_feedback.ErrorFeedback` by default.
"""
import numpy as np

from ..core.registry import register
from .base import Compressor

SCALES = ("l1", "l2")


@register("compressor", "sign")
class Sign(Compressor):
    name = "sign"
    error_feedback = True
    options = ("scale",)

    def __init__(self, scale="l1"):
        super().__init__()
        if scale not in SCALES:
            raise ValueError(f"{self.name}: scale must be one of {', '.join(SCALES)}, got {scale!r}")
        self.scale = scale

    def context(self, shape, dtype, name=None, step=0):
        size = int(np.prod(shape, dtype=np.int64))
        return self.make_context(shape, dtype, name, step, [(np.float32, 1), (np.uint8, -(-size // 8))])

    def magnitude(self, flat):
        if not flat.size:
            return 0.0
        if self.scale == "l1":
            return float(np.abs(flat).sum(dtype=np.float64)) / flat.size
        return float(np.sqrt(np.dot(flat, flat))) / np.sqrt(flat.size)

    def encode(self, flat, ctx):
        non_negative = self.scratch("signs", flat.size, np.bool_)
        np.greater_equal(flat, 0, out=non_negative)
        return np.array([self.magnitude(flat)], dtype=np.float32), np.packbits(non_negative)

    def decode(self, payload, ctx, flat_out):
        scale, packed = payload
        bits = np.unpackbits(packed, count=ctx.size)
        magnitude = flat_out.dtype.type(scale[0])
        np.multiply(bits, 2 * magnitude, out=flat_out)   # 0 or 2 scale ...
        flat_out -= magnitude                             # ... minus scale: -scale or +scale
