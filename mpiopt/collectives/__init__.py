"""Collectives written by hand on MPI point-to-point, with MPI's own as the baseline.

``get_reducer(name, comm=None, **options)`` returns a reducer with
``allreduce(sendbuf, recvbuf=None, op="sum")``:

=============  ============================================================
``mpi``        MPI_Allreduce (the baseline)
``ring``       ring reduce-scatter + ring all-gather (bandwidth-optimal)
``ring-seg``   the ring, pipelined in segments (``segment_bytes``)
``rd``         recursive doubling with the non-power-of-two fold (latency)
``hier``       node-aware: shared-memory window within a node, ring across
``ps``         synchronous single parameter server (``server=``)
``ps-sharded`` sharded parameter servers owning key ranges (``servers=``)
``auto``       MPI below 64 KiB, then hier (several ranks per node) or ring
=============  ============================================================

:class:`AsyncParameterServer` is the asynchronous server (push/pull); its ``serve``
raises :class:`ParameterServerTimeout` after an optional idle timeout.
"""
from .async_server import AsyncParameterServer, ParameterServerTimeout
from .auto import AutoReducer
from .base import DTYPES, OPS, Reducer, chunk_bounds
from .hierarchical import HierarchicalReducer
from .mpi import MPIReducer
from .parameter_server import ParameterServerReducer, ShardedParameterServerReducer
from .recursive_doubling import RecursiveDoublingReducer
from .ring import RingReducer

SEGMENT_BYTES = 256 << 10

REDUCERS = {
    "mpi": MPIReducer,
    "ring": RingReducer,
    "ring-seg": lambda comm=None, check=True, segment_bytes=SEGMENT_BYTES, **options: RingReducer(
        comm, check, segment_bytes=segment_bytes, **options),
    "rd": RecursiveDoublingReducer,
    "hier": HierarchicalReducer,
    "ps": ParameterServerReducer,
    "ps-sharded": ShardedParameterServerReducer,
    "auto": AutoReducer,
}


def get_reducer(name="auto", comm=None, **options):
    """A reducer by name (see the module docstring); ``options`` go to its constructor."""
    if name not in REDUCERS:
        raise ValueError(f"unknown reducer {name!r}; choose one of {', '.join(REDUCERS)}")
    return REDUCERS[name](comm=comm, **options)


__all__ = ["AsyncParameterServer", "AutoReducer", "DTYPES", "HierarchicalReducer", "MPIReducer", "OPS",
           "ParameterServerReducer", "ParameterServerTimeout", "REDUCERS", "RecursiveDoublingReducer", "Reducer", "RingReducer",
           "ShardedParameterServerReducer", "chunk_bounds", "get_reducer"]
