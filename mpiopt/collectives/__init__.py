"""Collectives written by hand on MPI point-to-point, with MPI's own as the baseline.

``get_reducer(name, comm=None, **options)`` returns a reducer with
``allreduce``, ``reduce_scatter``, ``allgather`` and ``allgatherv`` (see
:mod:`.base` for the interface):

=============  ============================================================
``mpi``        MPI's collectives (the baseline)
``ring``       ring reduce-scatter + ring all-gather (bandwidth-optimal)
``ring-seg``   the ring, pipelined in segments (``segment_bytes``)
``rd``         recursive doubling with the non-power-of-two fold (latency);
               recursive halving for reduce-scatter
``hier``       node-aware: shared-memory window within a node, ring across
``ps``         synchronous single parameter server (``server=``)
``ps-sharded`` sharded parameter servers owning key ranges (``servers=``)
``auto``       MPI below 64 KiB, then hier (several ranks per node) or ring
=============  ============================================================

Each reducer registers itself under its name in :mod:`mpiopt.core.registry`
(kind ``"reducer"``); a user's own :class:`Reducer` subclass registered the
same way is available by name to ``get_reducer`` and everything that takes a
reducer name.  ``REDUCERS`` maps the registered names to their classes, read
from the registry at each use.

``get_reducer(name, comm, compressor=..., error_feedback=None, mode="auto", **options)``
returns a :class:`CompressedReducer` (:mod:`.compressed`) whose ``allreduce``
compresses with a compressor of :mod:`mpiopt.compression` and moves the
payloads with the reducer ``name``; it counts the bytes each call sent and
received (``last_bytes_sent``, ``last_bytes_received``, ``bytes_sent``,
``bytes_received``).  ``compressor_options_problem(compressor, options,
reducer)`` says in one line what is wrong with such options (or None),
without building anything: front ends check with it before any work.  Every
reducer and compressor declares its options (:mod:`mpiopt.core.options`);
the checks read the declarations.

Every reducer takes CuPy arrays as well as numpy arrays (results are then
CuPy arrays): the buffers are staged through pinned host memory, or handed to
MPI as they are when MPI is CUDA-aware and the algorithm is MPI's own
(``get_reducer(..., cuda_aware=None|True|False)``; ``MPIOPT_CUDA_AWARE=0/1``);
see :mod:`.device`.

:class:`AsyncParameterServer` is the asynchronous server (push/pull); its ``serve``
raises :class:`ParameterServerTimeout` after an optional idle timeout.
"""
from ..core.partition import offsets as chunk_bounds
from ..core.registry import RegistryError, RegistryView, lookup
# Imported in this order, the reducers register their names in this order.
from .mpi import MPIReducer
from .ring import SEGMENT_BYTES, RingReducer, SegmentedRingReducer
from .recursive_doubling import RecursiveDoublingReducer
from .hierarchical import HierarchicalReducer
from .parameter_server import ParameterServerReducer, ShardedParameterServerReducer
from .auto import AutoReducer
from .async_server import AsyncParameterServer, ParameterServerTimeout
from .base import DTYPES, OPS, Reducer, check_reducer_options, reducer_options_problem
from .compressed import CompressedReducer, compressor_options_problem
from .device import cuda_aware as resolve_cuda_aware, detect_cuda_aware, parse_setting


REDUCERS = RegistryView("reducer", "REDUCERS")  # name -> class, a live view of the registry


def get_reducer(name="auto", comm=None, compressor=None, cuda_aware=None, **options):
    """A reducer by registered name (see the module docstring); ``options`` go to its constructor.

    ``cuda_aware`` (True, False, or None: the ``MPIOPT_CUDA_AWARE`` environment variable, else what
    MPI says) decides whether CuPy buffers may go to MPI as they are (see :mod:`.device`).

    With ``compressor`` (a registered compressor name or object) a :class:`CompressedReducer` over
    the reducer ``name``: ``error_feedback`` (None: by the compressor), ``mode`` and ``check`` are its
    own, options the compressor declares go to the compressor, the rest to the reducer ``name``.

    The options are checked against the reducer's declaration (``registry.options("reducer", name)``;
    ``check`` is every reducer's): TypeError for an undeclared one, ValueError for a bad value."""
    try:
        reducer_class = lookup("reducer", name)
    except RegistryError as error:
        raise RegistryError(f"unknown reducer {name!r}; {error}") from None
    parse_setting(cuda_aware, "cuda_aware")  # before any communicator is made
    if compressor is not None:
        return CompressedReducer(name, comm, compressor, cuda_aware=cuda_aware, **options)
    if "error_feedback" in options:
        raise TypeError("error_feedback needs a compressor: get_reducer(name, comm, compressor=..., "
                        "error_feedback=...)")
    check_reducer_options(name, options)
    reducer = reducer_class(comm=comm, **options)
    if cuda_aware is not None:
        reducer.cuda_aware = cuda_aware
    return reducer


class reducer_for:  # noqa: N801 (used as a function: ``with reducer_for(setting, comm) as reducer``)
    """The reducer of a ``reducer`` setting, for the length of a ``with`` block: a registered name is built for
    ``comm`` (``get_reducer(setting, comm, **options)``) and closed at the end of the block; a Reducer object
    the caller made is used as it is and left open (it is the caller's).  An object that keeps the reducer
    across calls enters it on a ``contextlib.ExitStack`` and closes the stack in its own ``close``.

    Only the end of the block closes it, never the garbage collector: closing frees the reducer's
    communicator, which every rank must do at the same point of the program, not whenever its collector runs
    (a context that is entered and dropped leaves the reducer open rather than risk a hang)."""

    def __init__(self, setting, comm=None, **options):
        self.setting, self.comm, self.options, self.reducer = setting, comm, options, None

    def __enter__(self):
        if isinstance(self.setting, Reducer):
            return self.setting
        self.reducer = get_reducer(self.setting, self.comm, **self.options)
        return self.reducer

    def __exit__(self, *exception):
        if self.reducer is not None:
            reducer, self.reducer = self.reducer, None
            reducer.close()
        return False


__all__ = ["AsyncParameterServer", "AutoReducer", "CompressedReducer", "DTYPES", "HierarchicalReducer",
           "MPIReducer", "OPS", "ParameterServerReducer", "ParameterServerTimeout", "REDUCERS",
           "RecursiveDoublingReducer", "Reducer", "RingReducer", "SEGMENT_BYTES", "SegmentedRingReducer",
           "ShardedParameterServerReducer", "chunk_bounds", "compressor_options_problem", "detect_cuda_aware",
           "get_reducer", "reducer_for", "reducer_options_problem", "resolve_cuda_aware"]
