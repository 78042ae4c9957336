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

    T_reduce_scatter = (p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma
    T_allgather      = (p-1) alpha + (p-1)/p n beta                     (n: the bytes gathered)
    T_allgatherv     = (p-1) alpha + beta sum over the p-1 steps of the largest block sent in the step

The segmented variant (``ring-seg``) cuts each chunk into segments of
``segment_bytes``: all the segments of a step are posted at once, and each
one is reduced as soon as it has arrived, while the later ones are still
travelling; its all-gather is the plain ring's.

**No copies.**  Each chunk is received and reduced at most once in the
reduce-scatter, so an out-of-place call never copies ``sendbuf`` into the
output: step 0 sends straight from ``sendbuf``, and every step reduces
``sendbuf``'s chunk and the incoming one into the output's chunk
(``ufunc(mine, incoming, out=...)``: the same operands in the same order as
reducing in place into a copy, so the same bits).  ``reduce_scatter`` writes
its last step straight into the caller's chunk.  The only work buffers are
one chunk for the incoming data (and, for ``reduce_scatter``, the partial
chunks in flight).

**Plans.**  The first call on a set of buffers builds its *plan*: the chunk
bounds, the segments, and persistent requests (``Send_init`` / ``Recv_init``)
for every message of every step, so that a step is ``Startall`` + ``Waitall``
(or one ``Wait`` per segment) and one ``ufunc(..., out=)``, with no buffer
specification and no ``offsets`` in the loop.  A persistent request binds a
buffer's address, so a plan is keyed by the operation, the output's address,
length and dtype (and the blocks, for a gather), and is used only on the very
memory it was built on: it holds a weak reference to the array that owns the
output's memory (the root of its chain of views), checked at every call, and
its requests name the memory by address, so the plan keeps no array of the
caller's alive.  When that array has died (its memory may come back at the
same address) the plan is dropped and its requests freed, never started.
The sends of the first step, the only messages read from ``sendbuf``, are
bound the same way to ``sendbuf`` apart, so a new ``sendbuf`` each call (a
compressor's payload) costs one ``Send_init`` per call, not a plan.  The work
buffers that a plan binds (the incoming chunk, ``reduce_scatter``'s partial
chunks) are the reducer's own and the plan holds them.  The last
``PLAN_CACHE`` (64) plans are kept (least recently used dropped first);
dropping a plan and :meth:`close` free its requests.  A training step's
buckets come round in a cycle, so a cache smaller than their number would
rebuild every plan (with 8, the 9 buckets of a 1.1M-parameter MLP did).

**Waiting.**  MPI's waits spin.  When more ranks share a node than this
process has cores (``oversubscribed``, decided once at construction), a rank
spinning in a step's wait holds the core that its neighbour needs to post
the matching message; the ring then waits with ``MPI_Testall`` and
``sched_yield`` between polls instead (``yielding`` is True), so each of its
2 (p-1) steps costs a switch, not a time slice.

**Segments.**  Over shared memory without asynchronous progress (MPICH's ch4
with CMA single-copy transfers) a transfer is copied by the receiving process
inside its own MPI calls, so the reduction of one segment cannot overlap the
copy of the next, and each segment is one more rendezvous: small segments
only add messages there (docs/collectives.md has the measurements).  The
default segment is therefore 4 MiB: ``ring-seg`` is the plain ring until a
chunk passes 4 MiB (a 16 MiB buffer at 4 ranks), where pipelining can start
to pay on a network with asynchronous progress.
"""
import os
import weakref
from collections import OrderedDict

import numpy as np
from mpi4py import MPI

from ..core.partition import offsets
from ..core.options import Option, Options
from ..core.registry import register
from . import tags
from .base import OPS, Reducer, combiner

SEGMENT_BYTES = 4 << 20  # ring-seg's default segment: one segment per chunk below 4 MiB (see above)
PLAN_CACHE = 64  # plans kept per reducer: more than a training step's buckets, which come round in a cycle

_startall = MPI.Prequest.Startall
_waitall = MPI.Request.Waitall
_testall = MPI.Request.Testall
_buffer = MPI.buffer
_fromaddress = MPI.buffer.fromaddress


def _yielding_waitall(requests):
    """MPI_Waitall that gives the core away between polls (when the ranks outnumber the cores)."""
    while not _testall(requests):
        os.sched_yield()


def _owner(array):
    """The ndarray at the root of ``array``'s chain of views: the one whose life keeps the memory."""
    base = array.base
    while isinstance(base, np.ndarray):
        array, base = base, base.base
    return array


def _free(requests):
    for request in requests:
        if request != MPI.REQUEST_NULL:
            request.Free()


def oversubscribed(comm):
    """Whether more ranks of ``comm`` share this node than this process has cores (collective)."""
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        ranks = node.Get_size()
    finally:
        node.Free()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return ranks > cores


class _Plan:
    """One operation's persistent requests on fixed memory (see the module docstring).

    ``reduce``: the reduce-scatter steps, each (requests, sends, receives, segments): segments are
    (lo, hi, incoming) with [lo, hi) the elements of the chunk received and ``incoming`` the view of the
    incoming buffer that holds them, reduced as ``ufunc(source[lo:hi], incoming, out=work[lo:hi])`` in the
    order of the receives; step 0's sends come from ``source`` (``sending``: their ranges; ``source``: the
    sendbuf they are bound to, its owner, the sends and step 0's requests).  ``gather``: the all-gather
    steps, each a list of requests."""

    __slots__ = ("owner", "reduce", "sending", "source", "gather", "requests", "hold", "itemsize")

    def __init__(self, owner, itemsize, hold=()):
        self.owner = None if owner is None else weakref.ref(owner)
        self.itemsize = itemsize
        self.hold = hold  # the reducer's own work buffers that the requests bind
        self.reduce, self.sending, self.source, self.gather, self.requests = (), (), None, (), []

    def source_requests(self, comm, right, source):
        """(step 0's sends from ``source``, all of step 0's requests), bound to ``source`` once."""
        address = _buffer(source).address
        slot = self.source
        if slot is not None and slot[0] == address and slot[1]() is _owner(source):
            return slot[2], slot[3]
        if slot is not None:
            _free(slot[2])
        size = self.itemsize
        sends = [comm.Send_init([_fromaddress(address + lo * size, (hi - lo) * size, True), MPI.BYTE], right,
                                tags.RING_SEGMENT) for lo, hi in self.sending]
        self.source = (address, weakref.ref(_owner(source)), sends, sends + self.reduce[0][2])
        return sends, self.source[3]

    def free(self):
        _free(self.requests)
        if self.source is not None:
            _free(self.source[2])
        self.requests, self.source = [], None
        self.reduce = self.gather = ()


@register("reducer", "ring")
class RingReducer(Reducer):
    """Bandwidth-optimal ring all-reduce; ``segment_bytes`` > 0 selects the pipelined variant."""

    name = "ring"
    options = Options(Option("segment_bytes", int, 0, "bytes per segment of the pipelined ring; 0: the plain ring",
                             low=0))

    def __init__(self, comm=None, check=True, segment_bytes=0):
        self._plans = OrderedDict()
        super().__init__(comm, check)
        self.segment_bytes = int(segment_bytes)
        self._agree_on_options(None, {"segment_bytes": self.segment_bytes})
        self.right = (self.rank + 1) % self.size
        self.left = (self.rank - 1) % self.size
        self.yielding = oversubscribed(self.comm)
        self._waitall = _yielding_waitall if self.yielding else _waitall

    @classmethod
    def model(cls, p, nbytes, fitted):
        n = float(nbytes)
        return 2 * (p - 1) * fitted.alpha + 2 * (p - 1) / p * n * fitted.beta + (p - 1) / p * n * fitted.gamma

    # -- plans ---------------------------------------------------------------
    def _plan(self, key, owner, build):
        """The cached plan of ``key`` when it was built on the memory of ``owner`` (None: only the reducer's
        own buffers), else a new one, cached."""
        plans = self._plans
        plan = plans.get(key)
        if plan is not None:
            if plan.owner is None or plan.owner() is owner:
                plans.move_to_end(key)
                return plan
            del plans[key]
            plan.free()
        plan = build()
        plans[key] = plan
        if len(plans) > PLAN_CACHE:
            plans.popitem(last=False)[1].free()
        return plan

    def _cuts(self, lo, hi, itemsize):
        """The [lo, hi) segments of the chunk [lo, hi) (none when it is empty)."""
        if hi <= lo:
            return []
        if self.segment_bytes <= 0:
            return [(lo, hi)]
        per_segment = max(1, self.segment_bytes // itemsize)
        return [(start, min(start + per_segment, hi)) for start in range(lo, hi, per_segment)]

    def _build_reduce(self, plan, work, incoming, bounds):
        """The reduce-scatter steps into ``work`` (whose address the sends of steps 1 .. p-2 bind; step 0's
        sends are bound to the sendbuf at the call); the receives bind ``incoming``."""
        p, r, comm, right, left = self.size, self.rank, self.comm, self.right, self.left
        size = work.itemsize
        address = _buffer(work).address
        steps = []
        for step in range(p - 1):
            sent, received = (r - step - 1) % p, (r - step - 2) % p
            # Both ends cut a chunk the same way, since they see the same chunk size.
            sending = self._cuts(bounds[sent], bounds[sent + 1], size)
            segments = self._cuts(bounds[received], bounds[received + 1], size)
            base = bounds[received]
            views = [incoming[lo - base:hi - base] for lo, hi in segments]
            receives = [comm.Recv_init([view, MPI.BYTE], left, tags.RING_SEGMENT) for view in views]
            if step == 0:
                plan.sending, sends = sending, []
            else:
                sends = [comm.Send_init([_fromaddress(address + lo * size, (hi - lo) * size), MPI.BYTE], right,
                                        tags.RING_SEGMENT) for lo, hi in sending]
            plan.requests += sends + receives
            steps.append((sends + receives, sends, receives,
                          tuple((lo, hi, view) for (lo, hi), view in zip(segments, views))))
        plan.reduce = tuple(steps)

    def _build_gather(self, plan, buffer, bounds):
        p, r, comm = self.size, self.rank, self.comm
        size = buffer.itemsize
        address = _buffer(buffer).address

        def message(block):
            lo, hi = bounds[block], bounds[block + 1]
            return [_fromaddress(address + lo * size, (hi - lo) * size), MPI.BYTE]
        steps = []
        for step in range(p - 1):
            sent, received = (r - step) % p, (r - step - 1) % p
            requests = []
            if bounds[sent + 1] > bounds[sent]:
                requests.append(comm.Send_init(message(sent), self.right, tags.RING_GATHER))
            if bounds[received + 1] > bounds[received]:
                requests.append(comm.Recv_init(message(received), self.left, tags.RING_GATHER))
            plan.requests += requests
            if requests:
                steps.append(requests)
        plan.gather = tuple(steps)

    def _incoming(self, bounds, dtype):
        return self.scratch("ring", bounds[1] - bounds[0], dtype)  # chunk 0 is the largest

    def _allreduce_plan(self, out):
        """The plan that reduces into ``out`` and gathers there (reduce-scatter into ``out``, all-gather)."""
        owner = _owner(out)

        def build():
            bounds = offsets(out.size, self.size)
            incoming = self._incoming(bounds, out.dtype)
            plan = _Plan(owner, out.itemsize, (incoming,))
            self._build_reduce(plan, out, incoming, bounds)
            self._build_gather(plan, out, bounds)
            return plan
        return self._plan(("allreduce", _buffer(out).address, out.size, out.dtype), owner, build)

    # -- running a plan ----------------------------------------------------------
    def _run_reduce(self, plan, source, work, ufunc, final=None, shift=0):
        """The reduce-scatter steps from ``source`` into ``work``; the last step into ``final`` instead
        (element i of the chunk at ``final[i - shift]``) when given."""
        steps = plan.reduce
        ufunc = combiner(ufunc, work.dtype)
        first_sends, first = plan.source_requests(self.comm, self.right, source)
        last = len(steps) - 1
        wait = self._waitall
        for index, (requests, sends, receives, segments) in enumerate(steps):
            if index == 0:
                requests, sends = first, first_sends
            if not requests:
                continue
            into, offset = (final, shift) if final is not None and index == last else (work, 0)
            _startall(requests)
            if len(segments) == 1:
                wait(requests)
                lo, hi, incoming = segments[0]
                ufunc(source[lo:hi], incoming, out=into[lo - offset:hi - offset])
            else:  # segments: each one reduced as soon as it is in, the later ones still travelling
                for receive, (lo, hi, incoming) in zip(receives, segments):
                    wait([receive])
                    ufunc(source[lo:hi], incoming, out=into[lo - offset:hi - offset])
                wait(sends)

    def _run_gather(self, plan):
        wait = self._waitall
        for requests in plan.gather:
            _startall(requests)
            wait(requests)

    # -- the ring ------------------------------------------------------------------
    def reduce_scatter_inplace(self, buffer, ufunc):
        """Ring reduce-scatter; afterwards chunk ``rank`` of ``buffer`` is complete. Returns the bounds."""
        self._run_reduce(self._allreduce_plan(buffer), buffer, buffer, ufunc)
        return offsets(buffer.size, self.size)

    def allgather_inplace(self, buffer, bounds):
        """Ring all-gather: rank r contributes block r of ``buffer`` (``bounds[r]:bounds[r + 1]``, any
        sizes); afterwards every block is everywhere."""
        bounds = tuple(int(b) for b in bounds)
        owner = _owner(buffer)

        def build():
            plan = _Plan(owner, buffer.itemsize)
            self._build_gather(plan, buffer, bounds)
            return plan
        self._run_gather(self._plan(("gather", _buffer(buffer).address, buffer.size, buffer.dtype, bounds), owner,
                                    build))

    def reduce_into(self, source, out, op="sum"):
        if type(out) is np.ndarray and type(source) is np.ndarray and self.size > 1 and out.size:
            self._allreduce_into(source, out, OPS[op])  # host arrays: no device staging to consider
        else:
            super().reduce_into(source, out, op)

    def _allreduce_into(self, source, out, ufunc):
        plan = self._allreduce_plan(out)
        self._run_reduce(plan, source, out, ufunc)
        self._run_gather(plan)

    def _allreduce_inplace(self, buffer, ufunc):
        self._allreduce_into(buffer, buffer, ufunc)

    def _reduce_scatter_into(self, source, out, bounds, ufunc):
        def build():
            incoming = self._incoming(bounds, source.dtype)
            work = self.scratch("ring-work", source.size, source.dtype)
            plan = _Plan(None, source.itemsize, (incoming, work))
            self._build_reduce(plan, work, incoming, bounds)
            return plan
        plan = self._plan(("reduce_scatter", source.size, source.dtype), None, build)
        self._run_reduce(plan, source, plan.hold[1], ufunc, out, bounds[self.rank])

    def _allgather_into(self, out, bounds):
        self.allgather_inplace(out, bounds)

    def close(self):
        """Free the plans' persistent requests, then what every reducer frees."""
        for plan in self._plans.values():
            plan.free()
        self._plans.clear()
        super().close()


@register("reducer", "ring-seg")
class SegmentedRingReducer(RingReducer):
    """The ring with each chunk sent in segments of ``segment_bytes`` (default 4 MiB)."""

    name = "ring-seg"
    options = Options(Option("segment_bytes", int, SEGMENT_BYTES, "bytes per segment: within a step the next "
                                                                  "segment's receive overlaps this one's sum", low=0))

    def __init__(self, comm=None, check=True, segment_bytes=SEGMENT_BYTES):
        super().__init__(comm, check, segment_bytes=segment_bytes)
