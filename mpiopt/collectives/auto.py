"""``auto``: pick the all-reduce algorithm by message size.

Measured on a 2-core machine at 2 and 4 ranks (docs/collectives.md):

* below ``small_bytes`` (64 KiB) latency dominates and MPICH's MPI_Allreduce
  is the fastest (our recursive doubling, driven from Python, takes 1.2-1.4x
  its time at 8 B), so ``small`` defaults to ``mpi``; pass ``small="rd"`` to
  stay on hand-written code;
* from 64 KiB the node-aware shared-memory reducer wins wherever a node holds
  more than one rank (1.5-2.7x MPI at 256 KiB - 4 MiB); with one rank per node
  the ring is used (1.0-2.2x MPI from 1 MiB).

Pass your own threshold after running benchmarks/allreduce.py on your machine.
"""
from mpi4py import MPI

from .base import Reducer
from .hierarchical import HierarchicalReducer
from .mpi import MPIReducer
from .recursive_doubling import RecursiveDoublingReducer
from .ring import RingReducer

SMALL_BYTES = 64 << 10
SMALL = {"mpi": MPIReducer, "rd": RecursiveDoublingReducer}


class AutoReducer(Reducer):
    name = "auto"

    def __init__(self, comm=None, check=True, small_bytes=SMALL_BYTES, small="mpi", node_of=None):
        super().__init__(comm, check)
        if small not in SMALL:
            raise ValueError(f"small must be one of {', '.join(SMALL)}, got {small!r}")
        self.small_bytes = int(small_bytes)
        self.small = SMALL[small](self.comm, check=False)
        hierarchical = HierarchicalReducer(self.comm, check=False, node_of=node_of)
        if self.comm.allreduce(hierarchical.local_size, op=MPI.MAX) > 1:
            self.large = hierarchical
        else:
            hierarchical.close()
            self.large = RingReducer(self.comm, check=False)

    def choose(self, nbytes):
        """The reducer used for a buffer of ``nbytes``."""
        return self.small if nbytes < self.small_bytes else self.large

    def _allreduce_into(self, source, out, ufunc):
        self.choose(out.nbytes)._allreduce_into(source, out, ufunc)

    def close(self):
        super().close()
        self.small.close()
        self.large.close()
