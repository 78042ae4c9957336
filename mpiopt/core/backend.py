"""Array backends chosen by the data: numpy on the CPU, CuPy on a GPU.

The numerical engines never call numpy directly.  They take ``xp`` from
:func:`get_array_module` and use the few dense-algebra helpers below, each with
a numpy/scipy implementation and a CuPy one, so the same engine runs on either:
:func:`cholesky` (LAPACK through scipy, or cuSOLVER's potrf through
``cupy.linalg.cholesky``) and :func:`cholesky_solve` (two triangular solves,
scipy's or ``cupyx.scipy.linalg.solve_triangular``).

:func:`select_device` gives each MPI rank its GPU by its rank within the node;
call it once, before the data are moved to the GPU.
"""
import functools

import numpy as np


@functools.cache
def _cupy():
    """The cupy module, or None when it is not installed (looked up once: a failed import is not cached by
    Python, and the engines ask for the array module of their vectors every iteration)."""
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
    """Return a numpy copy of a CuPy array; numpy arrays pass through, other array-likes go through np.asarray."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "__cuda_array_interface__"):
        return array.get()
    return np.asarray(array)


def device_count():
    """The number of GPUs CuPy can use here: 0 without CuPy, a driver or a device."""
    cupy = _cupy()
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # CUDARuntimeError: no driver, an old driver, no device
        return 0


def local_rank(comm):
    """This rank's rank among the ranks of ``comm`` on its node (collective: a shared-memory split)."""
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        return node.rank
    finally:
        node.Free()


def select_device(comm=None):
    """Make this rank use GPU ``local rank mod device count`` (CuPy's current device); returns its id.

    The local rank comes from splitting ``comm`` (default COMM_WORLD) by shared
    memory, so the ranks of a node share its GPUs round-robin.  Collective:
    every rank of ``comm`` must call it, also one without CuPy or a GPU, which
    gets None and stays on the CPU.  Call it before the shards are moved to the
    GPU (``cupy.asarray``): the solvers compute on the device holding the data.
    """
    from .comm import resolve_comm
    rank = local_rank(resolve_comm(comm))  # the collective part first, whatever happens below
    count = device_count()
    if count == 0:
        return None
    device = rank % count
    _cupy().cuda.Device(device).use()
    return device


def device_of(array):
    """A context manager making ``array``'s GPU the current device (a no-op for a numpy array)."""
    if not hasattr(array, "__cuda_array_interface__"):
        import contextlib
        return contextlib.nullcontext()
    return array.device


def to_module(array, xp):
    """``array`` as an array of module ``xp`` (numpy or CuPy), copied across only when it lives in the other."""
    if get_array_module(array) is xp:
        return array
    return to_host(array) if is_numpy(xp) else xp.asarray(array)


def cholesky(xp, matrix):
    """Lower Cholesky factor of a symmetric positive definite matrix."""
    if is_numpy(xp):
        import scipy.linalg
        # Fortran order: LAPACK's triangular solves then read the factor without a copy.
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
    """Reusable work buffers, one per key and dtype, grown when a larger one is asked for.

    The one buffer cache of mpiopt (the reducers' work buffers, the compressors', the staging of device
    arrays).  By default it holds numpy buffers, or CuPy ones for a call with ``xp=cupy`` (kept apart from
    the numpy ones).  ``Scratch(pinned=True)`` holds page-locked host memory (``cupyx.empty_pinned``) for
    staging device arrays through PCIe: one block of bytes per key (at least 64), handed out as a numpy
    view of the dtype asked for, so one key serves any dtype.
    """

    def __init__(self, pinned=False):
        self.pinned = bool(pinned)
        self._buffers = {}

    def __call__(self, key, count, dtype, xp=np):
        """A buffer of ``count`` elements of ``dtype`` (its contents are whatever was left in it), of module
        ``xp`` (numpy or CuPy; a pinned cache always gives numpy views of host memory)."""
        dtype = np.dtype(dtype)
        if self.pinned:
            return self._pinned(key, count * dtype.itemsize).view(dtype)
        slot = (key, dtype) if xp is np else (key, dtype, xp.__name__)
        buffer = self._buffers.get(slot)
        if buffer is None or buffer.size < count:
            buffer = xp.empty(max(count, 1), dtype=dtype)
            self._buffers[slot] = buffer
        return buffer[:count]

    def _pinned(self, key, nbytes):
        buffer = self._buffers.get(key)
        if buffer is None or buffer.size < nbytes:
            import cupyx
            buffer = cupyx.empty_pinned(max(nbytes, 64), dtype=np.uint8)
            self._buffers[key] = buffer
        return buffer[:nbytes]

    def items(self):
        """(key, buffer) pairs, to see which buffers are held (the key of a numpy buffer is (key, dtype))."""
        return self._buffers.items()

    def clear(self):
        self._buffers.clear()


def all_finite(array):
    """True when every entry of ``array`` (numpy or CuPy) is finite, in one BLAS pass without an array-sized
    temporary.

    A NaN or inf entry makes its column sum (a product with a vector of ones)
    non-finite; so does an overflowing sum of huge finite values, which
    :func:`finite_message` tells apart on the error path.  Every method checks
    its data with this pair (inside ``check_collectively``), so NaN or inf is
    refused the same way everywhere.
    """
    if array.size == 0 or not np.issubdtype(array.dtype, np.inexact):
        return True
    xp = get_array_module(array)
    ones = xp.ones(array.shape[0], dtype=array.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(xp.isfinite(ones @ array).all())


def finite_message(name, array):
    """Why ``array`` failed :func:`all_finite`, naming it as ``name``."""
    xp = get_array_module(array)
    if not bool(xp.isfinite(array).all()):
        return f"{name} contains NaN or inf"
    return f"{name} has values so large that their sums overflow; rescale the data"


def finite_problem(name, array):
    """The message when ``array`` has a NaN or inf entry (or sums that overflow), else None."""
    return None if all_finite(array) else finite_message(name, array)
