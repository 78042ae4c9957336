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

The two halves are also the reducer's ``reduce_scatter`` and ``allgather``
(the chunks are those of ``offsets(n, p)``), and the all-gather passes blocks
of any sizes, so ``allgatherv`` is the same ring over the contributions:

    T_reduce_scatter = (p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma   [+ n c: a working copy]
    T_allgather      = (p-1) alpha + (p-1)/p n beta                     (n: the bytes gathered)
    T_allgatherv     = (p-1) alpha + beta sum over the p-1 steps of the largest block sent in the step

The segmented variant (``ring-seg``) cuts each chunk into segments and, within
a step, posts the receive of segment k+1 before reducing segment k, so
reduction overlaps communication; its all-gather is the plain ring's.
"""
import numpy as np
from mpi4py import MPI

from ..core.partition import offsets
from ..core.options import Option, Options
from ..core.registry import register
from . import tags
from .base import Reducer, as_bytes

SEGMENT_BYTES = 256 << 10  # ring-seg's default segment


@register("reducer", "ring")
class RingReducer(Reducer):
    """Bandwidth-optimal ring all-reduce; ``segment_bytes`` > 0 selects the pipelined variant."""

    name = "ring"
    options = Options(Option("segment_bytes", int, 0, "bytes per segment of the pipelined ring; 0: the plain ring",
                             low=0))

    def __init__(self, comm=None, check=True, segment_bytes=0):
        super().__init__(comm, check)
        self.segment_bytes = int(segment_bytes)
        self._agree_on_options(None, {"segment_bytes": self.segment_bytes})
        self.right = (self.rank + 1) % self.size
        self.left = (self.rank - 1) % self.size

    @classmethod
    def model(cls, p, nbytes, fitted):
        n = float(nbytes)
        return 2 * (p - 1) * fitted.alpha + 2 * (p - 1) / p * n * fitted.beta + (p - 1) / p * n * fitted.gamma

    def _exchange_reduce(self, send, receive_into, ufunc):
        """Send ``send`` right; receive the same-size chunk from the left and reduce it into ``receive_into``."""
        incoming = self.scratch("ring", receive_into.size, receive_into.dtype)
        if self.segment_bytes <= 0:
            self.comm.Sendrecv([as_bytes(send), MPI.BYTE], self.right, tags.RING_REDUCE,
                               [as_bytes(incoming), MPI.BYTE], self.left, tags.RING_REDUCE)
            ufunc(receive_into, incoming, out=receive_into)
            return
        per_segment = max(1, self.segment_bytes // receive_into.itemsize)

        def cut(count):
            return [(lo, min(lo + per_segment, count)) for lo in range(0, count, per_segment)]
        # Both ends cut a chunk the same way, since they see the same chunk size.
        sends = [self.comm.Isend([as_bytes(send[lo:hi]), MPI.BYTE], self.right, tags.RING_SEGMENT)
                 for lo, hi in cut(send.size)]
        segments = cut(receive_into.size)

        def receive_segment(k):
            return self.comm.Irecv([as_bytes(incoming[slice(*segments[k])]), MPI.BYTE], self.left, tags.RING_SEGMENT)
        receive = receive_segment(0) if segments else None
        for k, (lo, hi) in enumerate(segments):
            receive.Wait()
            if k + 1 < len(segments):
                receive = receive_segment(k + 1)
            ufunc(receive_into[lo:hi], incoming[lo:hi], out=receive_into[lo:hi])
        MPI.Request.Waitall(sends)

    def reduce_scatter_inplace(self, buffer, ufunc):
        """Ring reduce-scatter; afterwards chunk ``rank`` of ``buffer`` is complete. Returns the bounds."""
        p, r = self.size, self.rank
        bounds = offsets(buffer.size, p)
        for step in range(p - 1):
            send_chunk = (r - step - 1) % p
            receive_chunk = (r - step - 2) % p
            self._exchange_reduce(buffer[bounds[send_chunk]:bounds[send_chunk + 1]],
                                  buffer[bounds[receive_chunk]:bounds[receive_chunk + 1]], ufunc)
        return bounds

    def allgather_inplace(self, buffer, bounds):
        """Ring all-gather: rank r contributes block r of ``buffer`` (``bounds[r]:bounds[r + 1]``, any
        sizes); afterwards every block is everywhere."""
        p, r = self.size, self.rank
        for step in range(p - 1):
            send_chunk = (r - step) % p
            receive_chunk = (r - step - 1) % p
            self.comm.Sendrecv([as_bytes(buffer[bounds[send_chunk]:bounds[send_chunk + 1]]), MPI.BYTE],
                               self.right, tags.RING_GATHER,
                               [as_bytes(buffer[bounds[receive_chunk]:bounds[receive_chunk + 1]]), MPI.BYTE],
                               self.left, tags.RING_GATHER)

    def _allreduce_inplace(self, buffer, ufunc):
        bounds = self.reduce_scatter_inplace(buffer, ufunc)
        self.allgather_inplace(buffer, bounds)

    def _reduce_scatter_into(self, source, out, bounds, ufunc):
        work = self.scratch("ring-work", source.size, source.dtype)
        np.copyto(work, source)
        self.reduce_scatter_inplace(work, ufunc)
        np.copyto(out, work[bounds[self.rank]:bounds[self.rank + 1]])

    def _allgather_into(self, out, bounds):
        self.allgather_inplace(out, bounds)


@register("reducer", "ring-seg")
class SegmentedRingReducer(RingReducer):
    """The ring with each chunk sent in segments of ``segment_bytes`` (default 256 KiB)."""

    name = "ring-seg"
    options = Options(Option("segment_bytes", int, SEGMENT_BYTES, "bytes per segment: within a step the next "
                                                                  "segment's receive overlaps this one's sum", low=0))

    def __init__(self, comm=None, check=True, segment_bytes=SEGMENT_BYTES):
        super().__init__(comm, check, segment_bytes=segment_bytes)
