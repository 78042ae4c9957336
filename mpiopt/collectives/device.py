"""CuPy buffers in the collectives: staged through pinned host memory, or handed to a CUDA-aware MPI.

Every reducer accepts CuPy arrays wherever it accepts numpy arrays, and
returns CuPy arrays for them (on the current device).  A call with device
buffers takes one of two routes, decided per call on each rank:

``direct``
    The device buffers go to MPI as they are (mpi4py takes any object with
    ``__cuda_array_interface__``), after the current CUDA stream has been
    synchronized so that the kernels that wrote them have finished.  Only when
    MPI is CUDA-aware and the reducer's algorithm is MPI's own (``mpi``, and
    ``auto`` when it picks ``mpi`` for the size): the MPI library then does
    the arithmetic too.

``staged``
    Everything else: the input is copied into a pinned (page-locked) host
    buffer, the reducer runs its host algorithm on numpy arrays, exactly the
    code and the arithmetic of a numpy call, and the result is copied back to
    the device.  The hand-written reducers (ring, recursive doubling, the
    shared-memory ``hier``, the parameter servers) always stage: their local
    reductions are numpy's, so a CuPy call gives bit for bit what a numpy call
    on the same values gives.  Cost: 2 n c_pcie more per call (c_pcie: seconds
    per byte over PCIe; pinned memory is what lets the copies run at the link's speed).  The pinned
    buffers are kept per reducer and reused, grown when a larger one is asked.

Whether MPI is CUDA-aware (:func:`cuda_aware`): the ``cuda_aware`` argument
of :func:`~mpiopt.collectives.get_reducer` (True or False forces it), else the
environment variable ``MPIOPT_CUDA_AWARE`` (``1``/``true``/``yes``/``on`` or
``0``/``false``/``no``/``off``; ``auto`` or unset: detect), else detection:
``MPI.Query_cuda_support()`` where mpi4py has it (mpi4py >= 4 built on a
library with ``MPIX_Query_cuda_support``: MPICH >= 4, Open MPI >= 5), and
False when it is missing or fails.  Forcing True on a library that is not
CUDA-aware makes MPI read device pointers as host memory (a crash): force it
only where the library is known to be.

The ranks need not agree on the route: the same bytes travel either way.
"""
import contextlib
import os

import numpy as np

from ..core.backend import get_array_module

ENVIRONMENT = "MPIOPT_CUDA_AWARE"
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
AUTO = ("", "auto")


def is_device_array(array):
    """Whether ``array`` is a CuPy array (``get_array_module`` says so), whose data live on a GPU."""
    return array is not None and get_array_module(array) is not np


def address(array):
    """The address of an array's first element, host or device (to tell in-place calls apart)."""
    if isinstance(array, np.ndarray):
        return array.ctypes.data
    return array.__cuda_array_interface__["data"][0]


def detect_cuda_aware():
    """Whether the MPI library says it is CUDA-aware (``MPI.Query_cuda_support``); False when it cannot say."""
    try:
        from mpi4py import MPI
        query = getattr(MPI, "Query_cuda_support", None)
        return bool(query()) if query is not None else False
    except Exception:  # NotImplementedError (no MPIX_Query_cuda_support in the library), MPI errors
        return False


def parse_setting(value, what=ENVIRONMENT):
    """True, False or None (detect) from a setting: a bool, None, or one of the strings above."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE:
            return True
        if word in FALSE:
            return False
        if word in AUTO:
            return None
    raise ValueError(f"{what} must be one of {', '.join(TRUE + FALSE)} or auto, got {value!r}")


def cuda_aware(setting=None, environ=None, detect=detect_cuda_aware):
    """Whether to hand device buffers to MPI: ``setting`` (True/False) if given, else the environment
    variable ``MPIOPT_CUDA_AWARE``, else :func:`detect_cuda_aware`."""
    forced = parse_setting(setting, "cuda_aware")
    if forced is not None:
        return forced
    environ = os.environ if environ is None else environ
    forced = parse_setting(environ.get(ENVIRONMENT), ENVIRONMENT)
    if forced is not None:
        return forced
    return bool(detect())


def route(arrays, cuda_aware_mpi, direct_capable):
    """``"host"`` (numpy arrays only: the plain path), ``"direct"`` or ``"staged"`` for a call on ``arrays``."""
    if not any(is_device_array(array) for array in arrays):
        return "host"
    return "direct" if cuda_aware_mpi and direct_capable else "staged"


def synchronize(array):
    """Wait for the current CUDA stream (the kernels that wrote ``array``), before MPI reads device memory."""
    import cupy
    with array.device:
        cupy.cuda.get_current_stream().synchronize()


def download(pinned, key, array):
    """A pinned host copy of the device array ``array`` (flat), in buffer ``key`` of ``pinned`` (a
    :class:`~mpiopt.core.backend.Scratch` of pinned memory)."""
    host = pinned(key, array.size, array.dtype)
    if array.size:
        array.reshape(-1).get(out=host, blocking=True)
    return host


def upload(host, array):
    """Copy the host array ``host`` into the device array ``array`` (same size and dtype) and wait for it,
    so that the pinned buffer can be reused at once."""
    if not array.size:
        return
    import cupy
    flat = array.reshape(-1)
    with array.device:
        flat.set(host.reshape(flat.shape))
        cupy.cuda.get_current_stream().synchronize()


@contextlib.contextmanager
def on_wire(reducer, source, out, direct_capable):
    """Yield (source, out) as buffers the reducer's algorithm can take: themselves for numpy arrays
    or on the direct route (after a stream synchronization), pinned host copies on the staged route
    (``out`` is copied back to the device afterwards).  ``source`` may be ``out`` (in place) or None."""
    arrays = (source, out)
    way = route(arrays, reducer.cuda_aware, direct_capable)
    if way == "host":
        yield source, out
        return
    if way == "direct":
        synchronize(out)
        yield source, out
        return
    pinned = reducer.pinned
    in_place = source is not None and address(source) == address(out) and source.size == out.size
    host_out = download(pinned, "out", out) if (in_place or source is None) else pinned("out", out.size, out.dtype)
    host_source = host_out if in_place else (None if source is None else download(pinned, "source", source))
    yield host_source, host_out
    upload(host_out, out)
