"""The local vector steps of consensus ADMM: CUDA kernels (``kernels/admm.cu``) and their numpy twins.

Each function dispatches on the array module of its inputs
(:func:`mpiopt.core.backend.get_array_module`): numpy arrays run the numpy
twin, which is exactly the expression the engine has always evaluated, and CuPy
arrays run the kernel of the same name in ``kernels/admm.cu``.  The kernels
round every operation to nearest with no fused multiply-add, so on the same
inputs they give the twins' values bit for bit (the GPU tests check it to
floating tolerance).

* :func:`soft_threshold`: ``v - clip(v, -kappa, kappa)`` = sign(v) max(|v| - kappa, 0),
  the prox of kappa ||.||_1;
* :func:`relax`: the over-relaxation ``z + alpha (x - z)`` = alpha x + (1 - alpha) z;
* :func:`z_u_update`: the z-step of an L1 penalty (soft-thresholding of the
  mean of the all-reduced sums, the last ``free`` entries left unpenalized)
  fused with the u-step ``u + xh - z``: one pass instead of four.

The CUDA kernels take contiguous float64 vectors (the engine's are); other
CuPy inputs are copied to that form first.
"""
import numpy as np

from ..core.backend import get_array_module, is_numpy
from .loader import raw_module

SOURCE = "admm"
BLOCK = 256  # threads per block; one thread per entry


def _launch(kernel, size, *args):
    """Run kernel ``kernel`` of kernels/admm.cu with one thread per entry of a vector of ``size``."""
    if size:
        blocks = (size + BLOCK - 1) // BLOCK
        raw_module(SOURCE).get_function(kernel)((blocks,), (BLOCK,), args)


def _vector(xp, array):
    """A contiguous float64 CuPy array (no copy when ``array`` is one already)."""
    return xp.ascontiguousarray(array, dtype=xp.float64)


def _output(xp, out, like):
    if out is None:
        return xp.empty(like.shape, dtype=xp.float64)
    if out.shape != like.shape or out.dtype != xp.float64 or not out.flags.c_contiguous:
        raise ValueError(f"out must be a contiguous float64 array of shape {like.shape}")
    return out


def soft_threshold(v, kappa, out=None):
    """sign(v) max(|v| - kappa, 0) elementwise, computed as ``v - clip(v, -kappa, kappa)``.

    ``out`` (optional) receives the result and may be ``v`` itself.
    """
    xp = get_array_module(v, out)
    if is_numpy(xp):
        if out is None:
            return v - xp.clip(v, -kappa, kappa)
        return xp.subtract(v, xp.clip(v, -kappa, kappa), out=out)
    v = _vector(xp, v)
    out = _output(xp, out, v)
    _launch("soft_threshold", v.size, v, np.float64(kappa), out, np.int64(v.size))
    return out


def relax(x, z, alpha, out=None):
    """The over-relaxed x-hat ``z + alpha (x - z)`` (= alpha x + (1 - alpha) z); ``out`` may be x or z."""
    xp = get_array_module(x, z, out)
    if is_numpy(xp):
        if out is None:
            return z + alpha * (x - z)
        return xp.add(z, alpha * (x - z), out=out)
    x, z = _vector(xp, x), _vector(xp, z)
    if x.shape != z.shape:
        raise ValueError(f"x and z have shapes {x.shape} and {z.shape}")
    out = _output(xp, out, x)
    _launch("relax", x.size, x, z, np.float64(alpha), out, np.int64(x.size))
    return out


def z_u_update(sums, count, kappa, u, x_relaxed, free=0):
    """The fused z- and u-steps of an L1 penalty; returns new arrays (z, u_next).

    z = S_kappa(sums / count) on all but the last ``free`` entries, which are
    sums / count (an unpenalized intercept), and u_next = (u + x_relaxed) - z.
    The same values as ``L1(lam).prox(sums / count, step)`` (or its
    ``leaving_free(free)``) with kappa = lam step, followed by the engine's
    u-step.
    """
    xp = get_array_module(sums, u, x_relaxed)
    free = int(free)
    if is_numpy(xp):
        mean = sums / count
        if free:
            z = mean.copy()
            z[:-free] = soft_threshold(mean[:-free], kappa)
        else:
            z = soft_threshold(mean, kappa)
        u_next = u + x_relaxed
        u_next -= z
        return z, u_next
    sums, u, x_relaxed = _vector(xp, sums), _vector(xp, u), _vector(xp, x_relaxed)
    if not sums.shape == u.shape == x_relaxed.shape or sums.ndim != 1:
        raise ValueError(f"sums, u and x_relaxed must be vectors of one length, got shapes "
                         f"{sums.shape}, {u.shape}, {x_relaxed.shape}")
    size = sums.size
    z, u_next = xp.empty(size, dtype=xp.float64), xp.empty(size, dtype=xp.float64)
    _launch("z_u_update", size, sums, np.float64(count), np.float64(kappa), np.int64(max(size - free, 0)),
            u, x_relaxed, z, u_next, np.int64(size))
    return z, u_next
