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

Compute: one pass to pack (:func:`~mpiopt.kernels.compress.sign_pack`, a
CUDA kernel on CuPy arrays, ``np.packbits`` on numpy ones) and a reduction for
the scale (the compiled CPU kernel does both in one pass; with error feedback
``e += x`` too, and the previous call's ``e -= decoded``, left pending until
then because it needs the whole scale), accumulated in float64 for either scale (the squares of float32
values are exact in float64; a float32 sum of them was 1e-5 off at 2^22
elements); one pass to decompress (:func:`~mpiopt.kernels.compress.sign_unpack`,
which reads the scale where it is: no copy to the host on a GPU).  Biased
(and not linear: scales differ), but with the l1 scale
||decoded - x||^2 = ||x||^2 - ||x||_1^2 / n <= (1 - 1/n) ||x||^2, a contraction,
which is what error feedback needs; the compressed reducer wraps it in
:class:`~mpiopt.compression.error_feedback.ErrorFeedback` by default.
"""
import numpy as np

from ..core.options import Option, Options
from ..core.registry import register
from ..kernels.compress import SIGN_SCALES, sign_feedback, sign_pack, sign_scale, sign_settle, sign_unpack
from .base import Compressor, element_count

SCALES = SIGN_SCALES


@register("compressor", "sign")
class Sign(Compressor):
    name = "sign"
    error_feedback = True
    options = Options(Option("scale", str, "l1", "the magnitude sent: the mean absolute value (l1, EF-signSGD) "
                                                 "or the root mean square (l2, 1-bit Adam)", choices=SCALES))

    def context(self, shape, dtype, name=None, step=0):
        size = element_count(shape)
        return self.make_context(shape, dtype, name, step, [(np.float32, 1), (np.uint8, -(-size // 8))])

    def magnitude(self, flat):
        """The scale as a float32 array of one element (in the input's module)."""
        return sign_scale(flat, self.scale)

    def encode(self, flat, ctx):
        packed, scale = sign_pack(flat, self.scale)
        return scale, packed

    def decode(self, payload, ctx, flat_out):
        scale, packed = payload
        sign_unpack(packed, scale, ctx.size, out=flat_out)

    deferred_feedback = True

    def encode_feedback(self, flat, residual, ctx, pending=None):
        """``residual += flat``, the payload of the new residual and ``residual -= decoded``, fused (flat numpy
        arrays of one dtype; :class:`~mpiopt.compression.error_feedback.ErrorFeedback` calls it): returns the
        payload and what is left to subtract (see :func:`~mpiopt.kernels.compress.sign_feedback`), which the
        next call or :meth:`settle_feedback` applies."""
        packed, scale, left = sign_feedback(flat, residual, self.scale, pending)
        return (scale, packed), left

    def settle_feedback(self, residual, pending):
        """Apply what :meth:`encode_feedback` left pending to the flat ``residual``."""
        sign_settle(residual, pending)
