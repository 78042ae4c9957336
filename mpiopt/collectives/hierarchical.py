"""Node-aware all-reduce through an MPI-3 shared-memory window.

The communicator is split by node (MPI_COMM_TYPE_SHARED, or any grouping the
caller gives, such as ranks grouped by parity to stand in for two nodes).  On
each node the ranks share one window holding a slot per rank and a result slot:

    1. each rank copies its buffer into its slot;                 (node barrier)
    2. local rank j reduces slice j of every slot into the
       result slot: a reduce-scatter with no MPI messages;        (node barrier)
    3. the node leaders (local rank 0) all-reduce the result slot
       over the leaders' communicator with the ring;              (node barrier)
    4. every rank copies the result slot into its output.         (node barrier)

On one node a rank moves about 3n bytes through memory (copy in, its slice of
the reduction reading all slots, copy out) instead of sending 2 (p-1)/p n bytes
through MPI, where each message is copied through an intermediate buffer:

    T_hier = 4 alpha_barrier + n (2 c + gamma) + T_ring(leaders, n)

with c the cost of copying one byte.  The window grows when a larger buffer
arrives and is kept for later calls.
"""
import numpy as np
from mpi4py import MPI

from .base import Reducer, chunk_bounds
from .ring import RingReducer


class HierarchicalReducer(Reducer):
    """Shared-memory reduction within a node, ring across node leaders.

    ``node_of`` (optional) maps a rank of ``comm`` to a node id; ranks with the
    same id must share memory.  By default nodes come from MPI_COMM_TYPE_SHARED.
    """

    name = "hier"

    def __init__(self, comm=None, check=True, node_of=None):
        super().__init__(comm, check)
        if node_of is None:
            self.node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        else:
            self.node = self.comm.Split(color=int(node_of(self.rank)), key=self.rank)
        self.local_rank = self.node.Get_rank()
        self.local_size = self.node.Get_size()
        is_leader = self.local_rank == 0
        self.leaders = self.comm.Split(color=0 if is_leader else MPI.UNDEFINED, key=self.rank)
        self.leader_ring = RingReducer(self.leaders, check=False) if is_leader else None
        self.nodes = self.comm.allreduce(int(is_leader))
        self._window = None
        self._window_bytes = 0

    def _slots(self, nbytes):
        """(window, this node's slots as one 2-D byte array, result slot); grows when needed."""
        if nbytes > self._window_bytes:
            self._free_window()
            nbytes = -(-nbytes // 64) * 64  # whole cache lines, so every slot is aligned for any dtype
            size = nbytes * (self.local_size + 1) if self.local_rank == 0 else 0
            self._window = MPI.Win.Allocate_shared(size, 1, comm=self.node)
            self._window.Lock_all(MPI.MODE_NOCHECK)
            self._window_bytes = nbytes
        memory, _ = self._window.Shared_query(0)
        raw = np.frombuffer(memory, dtype=np.uint8)
        return raw[:self._window_bytes * (self.local_size + 1)].reshape(self.local_size + 1, self._window_bytes)

    def _sync(self):
        self._window.Sync()
        self.node.Barrier()
        self._window.Sync()

    def _allreduce_inplace(self, buffer, ufunc):
        nbytes = buffer.nbytes
        slots = self._slots(nbytes)
        dtype, count = buffer.dtype, buffer.size
        typed = slots[:, :nbytes].view(dtype)        # (local_size + 1) x count
        typed[self.local_rank] = buffer
        self._sync()
        bounds = chunk_bounds(count, self.local_size)
        lo, hi = bounds[self.local_rank], bounds[self.local_rank + 1]
        if hi > lo:
            result = typed[self.local_size, lo:hi]
            np.copyto(result, typed[0, lo:hi])
            for slot in range(1, self.local_size):
                ufunc(result, typed[slot, lo:hi], out=result)
        self._sync()
        if self.nodes > 1:
            if self.leader_ring is not None:
                self.leader_ring._allreduce_inplace(typed[self.local_size], ufunc)
            self._sync()
        np.copyto(buffer, typed[self.local_size])
        self.node.Barrier()  # nobody overwrites a slot until everyone has read the result

    def _free_window(self):
        if self._window is not None:
            self._window.Unlock_all()
            self._window.Free()
            self._window = None
            self._window_bytes = 0

    def close(self):
        super().close()
        self._free_window()
        if self.leader_ring is not None:
            self.leader_ring.close()
        for comm in (self.leaders, self.node):
            if comm != MPI.COMM_NULL:
                comm.Free()
        self.leaders = self.node = MPI.COMM_NULL
