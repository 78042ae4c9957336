"""Ring all-reduce = ring reduce-scatter + ring all-gather, on point-to-point only.

The buffer is cut into p chunks (sizes differ by at most one element).  In the
reduce-scatter, at step s = 0 .. p-2 rank r sends chunk (r - s - 1) mod p to
rank r + 1 and receives chunk (r - s - 2) mod p from rank r - 1, adding it to
its own copy; after p - 1 steps rank r holds the complete chunk r.  The
all-gather then passes the complete chunks around the ring for p - 1 more steps.

    step 0 of the reduce-scatter, p = 4 (chunk index sent -> receiver)
    rank 0: c3 -> 1    rank 1: c0 -> 2    rank 2: c1 -> 3    rank 3: c2 -> 0

Each rank sends 2 (p-1)/p n elements whatever p is, so the bandwidth term does
not grow with p (Patarasuk and Yuan 2009; baidu-allreduce).  In the
alpha-beta-gamma model, for n bytes:

    T_ring = 2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma

The segmented variant cuts each chunk into segments and, within a step, posts
the receive of segment k+1 before reducing segment k, so reduction overlaps
communication.
"""
import numpy as np
from mpi4py import MPI

from ..core.comm import check_collectively
from .base import OPS, Reducer, as_bytes, chunk_bounds


class RingReducer(Reducer):
    """Bandwidth-optimal ring all-reduce; ``segment_bytes`` > 0 selects the pipelined variant."""

    name = "ring"

    def __init__(self, comm=None, check=True, segment_bytes=0):
        super().__init__(comm, check)
        self.segment_bytes = int(segment_bytes)
        check_collectively(self.comm, None, {"segment_bytes": self.segment_bytes})
        self.right = (self.rank + 1) % self.size
        self.left = (self.rank - 1) % self.size

    def _exchange_reduce(self, send, receive_into, ufunc):
        """Send ``send`` right; receive the same-size chunk from the left and reduce it into ``receive_into``."""
        incoming = self.scratch("ring", receive_into.size, receive_into.dtype)
        if self.segment_bytes <= 0:
            self.comm.Sendrecv([as_bytes(send), MPI.BYTE], self.right, 0,
                               [as_bytes(incoming), MPI.BYTE], self.left, 0)
            ufunc(receive_into, incoming, out=receive_into)
            return
        per_segment = max(1, self.segment_bytes // receive_into.itemsize)

        def cut(count):
            return [(lo, min(lo + per_segment, count)) for lo in range(0, count, per_segment)]
        # Both ends cut a chunk the same way, since they see the same chunk size.
        sends = [self.comm.Isend([as_bytes(send[lo:hi]), MPI.BYTE], self.right, 1) for lo, hi in cut(send.size)]
        segments = cut(receive_into.size)
        receive = self.comm.Irecv([as_bytes(incoming[slice(*segments[0])]), MPI.BYTE], self.left, 1) \
            if segments else None
        for k, (lo, hi) in enumerate(segments):
            receive.Wait()
            if k + 1 < len(segments):
                receive = self.comm.Irecv([as_bytes(incoming[slice(*segments[k + 1])]), MPI.BYTE], self.left, 1)
            ufunc(receive_into[lo:hi], incoming[lo:hi], out=receive_into[lo:hi])
        MPI.Request.Waitall(sends)

    def reduce_scatter_inplace(self, buffer, ufunc):
        """Ring reduce-scatter; afterwards chunk ``rank`` of ``buffer`` is complete. Returns the bounds."""
        p, r = self.size, self.rank
        bounds = chunk_bounds(buffer.size, p)
        for step in range(p - 1):
            send_chunk = (r - step - 1) % p
            receive_chunk = (r - step - 2) % p
            self._exchange_reduce(buffer[bounds[send_chunk]:bounds[send_chunk + 1]],
                                  buffer[bounds[receive_chunk]:bounds[receive_chunk + 1]], ufunc)
        return bounds

    def allgather_inplace(self, buffer, bounds):
        """Ring all-gather: rank r contributes chunk r of ``buffer``; afterwards all chunks are everywhere."""
        p, r = self.size, self.rank
        for step in range(p - 1):
            send_chunk = (r - step) % p
            receive_chunk = (r - step - 1) % p
            self.comm.Sendrecv([as_bytes(buffer[bounds[send_chunk]:bounds[send_chunk + 1]]), MPI.BYTE],
                               self.right, 2,
                               [as_bytes(buffer[bounds[receive_chunk]:bounds[receive_chunk + 1]]), MPI.BYTE],
                               self.left, 2)

    def _allreduce_inplace(self, buffer, ufunc):
        bounds = self.reduce_scatter_inplace(buffer, ufunc)
        self.allgather_inplace(buffer, bounds)

    def reduce_scatter(self, sendbuf, op="sum"):
        """This rank's chunk (``chunk_bounds(len, p)[rank]`` onwards) of the reduction of ``sendbuf``."""
        work = self._prepare(sendbuf, None, op)
        np.copyto(work, sendbuf.reshape(-1))
        bounds = chunk_bounds(work.size, self.size)
        if self.size > 1 and work.size:
            self.reduce_scatter_inplace(work, OPS[op])
        mine = work[bounds[self.rank]:bounds[self.rank + 1]].copy()
        if op == "mean":
            mine /= mine.dtype.type(self.size)
        return mine

    def allgather(self, chunk, count):
        """Concatenate every rank's chunk (rank r holds ``chunk_bounds(count, p)`` chunk r) on every rank."""
        bounds = chunk_bounds(count, self.size)
        mine = bounds[self.rank + 1] - bounds[self.rank]
        problem = None if getattr(chunk, "size", None) == mine else \
            f"chunk must have {mine} elements for count {count}, got {getattr(chunk, 'size', None)}"
        if self.check:
            check_collectively(self.comm, problem, {"count": count, "dtype": str(chunk.dtype)})
        elif problem:
            raise ValueError(f"rank {self.rank}: {problem}")
        out = np.empty(count, dtype=chunk.dtype)
        out[bounds[self.rank]:bounds[self.rank + 1]] = chunk
        if self.size > 1 and count:
            self.allgather_inplace(out, bounds)
        return out
