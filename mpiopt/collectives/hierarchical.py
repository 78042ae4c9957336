"""Node-aware all-reduce through an MPI-3 shared-memory window.

The communicator is split by node (MPI_COMM_TYPE_SHARED, or any grouping the
caller gives, such as ranks grouped by parity to stand in for two nodes).  The
ranks of a node share one window with a slot per rank:

    1. each rank's data is in its slot;                              (node barrier)
    2. local rank j owns slice j: block by block it sums slice j of
       every slot and writes the sum back into slice j of every slot,
       so the reduction's output goes straight to all ranks;         (node barrier)
    3. with several nodes, the leaders (local rank 0) all-reduce
       their slot over the leaders' communicator with the ring, and
       the other ranks copy the leader's slot into their own.        (node barrier)

No data travel in MPI messages within a node.  Per rank, step 2 reads n bytes
and writes n bytes:

    T_hier = 3 alpha_barrier + n (c + gamma (p-1)/p) + T_ring(leaders, n) [+ n c with several nodes]

``shared_buffer(count, dtype)`` hands out an array that already lives in a
window: reducing it in place costs only step 2 (zero copy), which is how a
training loop should hold its gradient buckets.  Any other buffer is copied
into a scratch window first and copied out afterwards (2 n c more).

The other operations take the base class's fallbacks: ``reduce_scatter`` is
this all-reduce followed by keeping the rank's chunk (T_hier + n/p c), and
``allgather``/``allgatherv`` are MPI_Allgatherv on the reducer's communicator.
"""
import numpy as np
from mpi4py import MPI

from ..core.comm import check_collectively
from ..core.partition import offsets
from ..core.options import Option, Options
from ..core.registry import register
from .base import UFUNC_OPS, Reducer, combiner
from .ring import RingReducer

BLOCK_BYTES = 256 << 10  # reduce and fan out in cache-sized blocks


class SharedSlots:
    """A window on one node's communicator holding one slot of ``nbytes`` per rank."""

    def __init__(self, node, nbytes):
        self.node = node
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        self.nbytes = max(64, -(-nbytes // 64) * 64)  # whole cache lines: every slot aligned for any dtype
        size = self.nbytes * self.local_size if self.local_rank == 0 else 0
        self.window = MPI.Win.Allocate_shared(size, 1, comm=node)
        self.window.Lock_all(MPI.MODE_NOCHECK)
        memory, _ = self.window.Shared_query(0)
        self.bytes = np.frombuffer(memory, dtype=np.uint8)[:self.nbytes * self.local_size].reshape(
            self.local_size, self.nbytes)

    def typed(self, dtype, count):
        """All slots as a (local_size, count) array of ``dtype``."""
        return self.bytes[:, :count * np.dtype(dtype).itemsize].view(dtype)

    def sync(self):
        """Make every rank's writes visible to every rank of the node."""
        self.window.Sync()
        self.node.Barrier()
        self.window.Sync()

    def free(self):
        if self.window is not None:
            self.window.Unlock_all()
            self.window.Free()
            self.window = None


@register("reducer", "hier")
class HierarchicalReducer(Reducer):
    """Shared-memory reduction within a node, ring across node leaders.

    ``node_of`` (optional) maps a rank of ``comm`` to a node id; ranks with the
    same id must share memory.  By default nodes come from MPI_COMM_TYPE_SHARED.
    """

    name = "hier"
    options = Options(Option("node_of", object, None, "a function rank -> node id (a node's ranks share memory); "
                                               "None: MPI_COMM_TYPE_SHARED"))

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
        self._scratch_slots = None
        self._shared = {}  # address of this rank's slot -> SharedSlots, for shared_buffer arrays

    @classmethod
    def model(cls, p, nbytes, fitted, in_window=False):
        """T_hier; ``in_window``: the buffer comes from :meth:`shared_buffer` (no copy in or out)."""
        n = float(nbytes)
        leaders = RingReducer.model(fitted.nodes, nbytes, fitted) + n * fitted.copy if fitted.nodes > 1 else 0.0
        copies = 0.0 if in_window else 2 * n * fitted.copy
        return 3 * fitted.alpha + n * (fitted.copy + (p - 1) / p * fitted.gamma) + copies + leaders

    def shared_buffer(self, count, dtype=np.float64):
        """A zeroed array of ``count`` elements in shared memory (collective over ``comm``).

        ``allreduce(buffer, buffer)`` on it reduces in place with no copy in or out.
        """
        dtype = np.dtype(dtype)
        check_collectively(self.comm, None if count >= 0 else f"count must be >= 0, got {count}",
                           {"count": count, "dtype": str(dtype)})
        slots = SharedSlots(self.node, count * dtype.itemsize)
        mine = slots.typed(dtype, count)[self.local_rank]
        mine[...] = 0
        self._shared[mine.ctypes.data] = slots
        return mine

    def free_shared(self, buffer):
        """Release an array from :meth:`shared_buffer` (collective over the node)."""
        slots = self._shared.pop(buffer.ctypes.data, None)
        if slots is None:
            raise ValueError(f"rank {self.rank}: that array was not made by shared_buffer")
        slots.free()

    def _allreduce_into(self, source, out, ufunc):
        slots = self._shared.get(out.ctypes.data)
        if slots is not None and out.nbytes <= slots.nbytes and out.ctypes.data == source.ctypes.data:
            self._reduce_slots(slots, out.dtype, out.size, ufunc)
            return
        if self._scratch_slots is None or self._scratch_slots.nbytes < out.nbytes:
            if self._scratch_slots is not None:
                self._scratch_slots.free()
            self._scratch_slots = SharedSlots(self.node, out.nbytes)
        typed = self._scratch_slots.typed(out.dtype, out.size)
        np.copyto(typed[self.local_rank], source)
        self._reduce_slots(self._scratch_slots, out.dtype, out.size, ufunc)
        np.copyto(out, typed[self.local_rank])

    def _reduce_slots(self, slots, dtype, count, ufunc):
        typed = slots.typed(dtype, count)
        slots.sync()
        bounds = offsets(count, self.local_size)
        block = max(1, BLOCK_BYTES // np.dtype(dtype).itemsize)
        combine = combiner(ufunc, dtype)
        for lo in range(bounds[self.local_rank], bounds[self.local_rank + 1], block):
            hi = min(lo + block, bounds[self.local_rank + 1])
            total = typed[self.local_rank, lo:hi]
            for slot in range(self.local_size):
                if slot != self.local_rank:
                    combine(total, typed[slot, lo:hi], out=total)
            for slot in range(self.local_size):
                if slot != self.local_rank:
                    typed[slot, lo:hi] = total
        slots.sync()
        if self.nodes > 1:
            if self.leader_ring is not None:
                self.leader_ring.reduce_into(typed[0], typed[0], UFUNC_OPS[ufunc])
            slots.sync()
            if self.local_rank != 0:
                np.copyto(typed[self.local_rank], typed[0])
            slots.sync()  # the leader's slot is not overwritten before everyone has read it

    def close(self):
        super().close()
        for slots in [self._scratch_slots, *self._shared.values()]:
            if slots is not None:
                slots.free()
        self._scratch_slots = None
        self._shared.clear()
        if self.leader_ring is not None:
            self.leader_ring.close()
        for comm in (self.leaders, self.node):
            if comm != MPI.COMM_NULL:
                comm.Free()
        self.leaders = self.node = MPI.COMM_NULL
