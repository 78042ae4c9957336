"""``auto``: pick the all-reduce algorithm by message size.

Below ``small_bytes`` recursive doubling (log2 p messages) wins; above it the
node-aware shared-memory reducer when more than one rank shares a node, else
the ring.  The default thresholds come from benchmarks/allreduce.py on a
2-core machine (docs/collectives.md); pass your own after measuring yours.
"""
from mpi4py import MPI

from .base import Reducer
from .hierarchical import HierarchicalReducer
from .recursive_doubling import RecursiveDoublingReducer
from .ring import RingReducer

SMALL_BYTES = 16 << 10


class AutoReducer(Reducer):
    name = "auto"

    def __init__(self, comm=None, check=True, small_bytes=SMALL_BYTES, node_of=None):
        super().__init__(comm, check)
        self.small_bytes = int(small_bytes)
        self.small = RecursiveDoublingReducer(self.comm, check=False)
        hierarchical = HierarchicalReducer(self.comm, check=False, node_of=node_of)
        if self.comm.allreduce(hierarchical.local_size, op=MPI.MAX) > 1:
            self.large = hierarchical
        else:
            hierarchical.close()
            self.large = RingReducer(self.comm, check=False)

    def choose(self, nbytes):
        """The reducer used for a buffer of ``nbytes``."""
        return self.small if nbytes < self.small_bytes else self.large

    def _allreduce_inplace(self, buffer, ufunc):
        self.choose(buffer.nbytes)._allreduce_inplace(buffer, ufunc)

    def close(self):
        super().close()
        self.small.close()
        self.large.close()

