"""The one switch of the compiled CPU kernels (numba, the ``fast`` extra).

Every kernel module with a compiled CPU path (:mod:`.cd`, :mod:`.compress_fast`, :mod:`.qsgd_fast`,
:mod:`.halves`) builds it with :func:`jit` and runs it only while :func:`enabled` says so: numba is
installed and ``MPIOPT_NUMBA`` is not ``0``.  Otherwise the numpy twin runs, which is the reference the
compiled path is tested against.  :func:`use` switches the compiled path off (or back on) in this process
for a block, so that a benchmark times both paths side by side in one run and a test compares them::

    with use(False):
        reference = compressor.compress(x)      # the numpy twins
    fast = compressor.compress(x)                # the compiled kernels

Compiled functions are built with ``fastmath=False`` (no reassociation, no contraction into fused
multiply-adds: the same roundings as the twins) and ``cache=True`` (compiled once per machine, kept in
``__pycache__``).
"""
import contextlib
import os

try:
    import numba
except ImportError:  # the numpy twins run everywhere
    numba = None

AVAILABLE = numba is not None
_state = {"on": AVAILABLE and os.environ.get("MPIOPT_NUMBA", "1") != "0"}


def enabled():
    """Whether the compiled kernels run now (numba installed, MPIOPT_NUMBA != 0, not switched off)."""
    return _state["on"]


@contextlib.contextmanager
def use(on=True):
    """Run the block with the compiled kernels on (when numba is installed) or off (the numpy twins)."""
    before = _state["on"]
    _state["on"] = bool(on) and AVAILABLE
    try:
        yield
    finally:
        _state["on"] = before


def jit(function=None, **options):
    """``numba.njit`` with this package's options (``cache``, ``nogil``, no fastmath, no bounds checks,
    numpy's error model); ``function`` unchanged when numba is missing (the caller then never calls it)."""
    settings = dict(cache=True, nogil=True, fastmath=False, boundscheck=False, error_model="numpy")
    settings.update(options)
    if numba is None:
        return function if function is not None else (lambda f: f)
    return numba.njit(**settings)(function) if function is not None else numba.njit(**settings)
