"""The reducer interface, shared by every collective algorithm.

A reducer is built once for a communicator and called many times:

    reducer = get_reducer("ring", comm)
    out = reducer.allreduce(sendbuf)                 # a new array
    reducer.allreduce(buf, buf, op="max")            # in place
    chunk = reducer.reduce_scatter(sendbuf)          # this rank's chunk of the reduction
    full = reducer.allgather(chunk)                  # the inverse: every rank's chunk, concatenated
    payloads, counts = reducer.allgatherv(payload)   # contributions of any length, concatenated

Every registered reducer provides all four operations.  A subclass writes the
algorithm into hooks; the base class validates, allocates and divides:

==================  =====================================================  ==========================
operation           returns                                                hook (default)
==================  =====================================================  ==========================
``allreduce``       the reduction of every rank's ``sendbuf``              ``_allreduce_into`` (copy,
                                                                           then ``_allreduce_inplace``)
``reduce_scatter``  chunk ``rank`` (``offsets(count, p)``) of the same     ``_reduce_scatter_into``
                                                                           (all-reduce, keep the chunk)
``allgather``       the full vector from every rank's ``offsets`` chunk    ``_allgather_into``
                                                                           (MPI_Allgatherv)
``allgatherv``      (concatenation in rank order, counts per rank)         ``_allgather_into``
==================  =====================================================  ==========================

Chunks follow :func:`mpiopt.core.partition.offsets`: the first ``count % p``
ranks hold one element more, and ranks beyond ``count`` hold none.  The
fallbacks cost one all-reduce of the reducer's own algorithm plus a copy of
n/p elements (``reduce_scatter``), or MPI_Allgatherv, about
log2(p) alpha + (p-1)/p n beta (``allgather``, ``allgatherv``).

Buffers are contiguous numpy (or CuPy) arrays of float64, float32, float16, int32, int64,
uint8 or int8; ops are sum, max, min and mean (mean for floating types only).
Integer sums wrap around as numpy's (and MPI's) do.  The data travel as raw
bytes and are reduced with numpy, so every dtype takes the same path.  Scratch
buffers are allocated once per size and reused across calls.

Each reducer works on its own ``comm.Dup()``, freed by :meth:`Reducer.close`:
its messages can never match one of the user's (or another reducer's), whatever
their tags; the tags themselves come from one table (:mod:`.tags`).

With ``check=True`` (the default) each ``allreduce`` and ``reduce_scatter``
first runs one small MPI_Allreduce over (length, dtype, op), so buffers that
disagree across ranks raise the same CollectiveError on every rank instead of
hanging; solvers whose sizes are fixed by construction pass ``check=False``
for the hot loop.  ``allgatherv`` (and ``allgather`` without ``count``) must
exchange the lengths anyway, so they always check, at no extra cost.

Each reducer class also carries its cost model, :meth:`Reducer.model`: the
alpha-beta-gamma prediction of one all-reduce (see :mod:`.models`).

**Bytes.**  Every reducer counts what its operations put on the wire, this
rank's bytes by the ring's formulas (:mod:`.traffic`: exact for ``ring`` and
``ring-seg``, a model for the others): ``last_bytes_sent`` and
``last_bytes_received`` for the last ``allreduce``, ``reduce_scatter``,
``allgather`` or ``allgatherv``, ``bytes_sent`` and ``bytes_received`` their
sums since construction or :meth:`Reducer.reset_counters`.  The compressed
reducer counts its payloads' bytes instead (:mod:`.compressed`), so a caller
reads the bytes of any reducer the same way.  ``allreduce`` also takes
``name`` and ``shapes`` (the buffer's key and the tensors that tile it), which
a reducer with per-buffer state uses (the compressed one) and the others
ignore, so one call suits every reducer.

**Building blocks for composite reducers.**  A reducer made of other reducers
(``auto``, ``hier``'s leaders, ``compressed``) drives them through four public
methods that run the algorithm on buffers already checked, with no argument
check, no collective check and no counting (the composite validates and counts
once): :meth:`Reducer.reduce_into` (all-reduce ``source`` into ``out``),
:meth:`Reducer.reduce_scatter_into`, :meth:`Reducer.gather_into` (fill the
other ranks' blocks) and :meth:`Reducer.gather` (a new array of every rank's
block at bounds that every rank knows).  Device buffers take the same route
as in the checked operations.

CuPy arrays are accepted wherever numpy arrays are, and the results are CuPy
arrays then: the hooks see pinned host copies (staged), or the device buffers
themselves when MPI is CUDA-aware and the reducer is ``direct_capable`` (its
hooks only call MPI, as ``mpi``'s do).  See :mod:`.device`.
"""
import numpy as np
from mpi4py import MPI

from ..core.backend import Scratch, get_array_module
from ..core import registry
from ..core.comm import CollectiveError, check_collectively, resolve_comm
from ..core.options import NO_OPTIONS
from ..core.partition import offsets
from . import device
from .traffic import ring_allgather_bytes, ring_allreduce_bytes, ring_reduce_scatter_bytes

DTYPES = (np.float64, np.float32, np.float16, np.int32, np.int64, np.uint8, np.int8)
DTYPE_CODES = {np.dtype(t): code for code, t in enumerate(DTYPES, start=1)}
OPS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "mean": np.add}
OP_CODES = {name: code for code, name in enumerate(OPS, start=1)}
UFUNC_OPS = {np.add: "sum", np.maximum: "max", np.minimum: "min"}  # a hook's ufunc -> the op's name


def combiner(ufunc, dtype):
    """What a hand-written reducer calls as ``combine(a, b, out=...)`` for ``ufunc`` on ``dtype``: the ufunc,
    or for a float16 sum :func:`mpiopt.kernels.halves.add` (compiled, numpy's float16 sum bit for bit; numpy
    adds halves one element at a time in software, slower than the wire it saves)."""
    from ..kernels import halves  # here, not at the top: it imports numba, which only float16 sums need
    return halves.add if ufunc is np.add and np.dtype(dtype) == np.float16 else ufunc


def as_bytes(array):
    """A flat uint8 view of a contiguous array (for MPI.BYTE transfers of any dtype)."""
    return array.reshape(-1).view(np.uint8)


def _dtype_name(code):
    return np.dtype(DTYPES[code - 1]).name


def reducer_options_problem(name, options):
    """The one-line problem of ``options`` for the registered reducer ``name`` against its declaration
    (``comm`` and ``check`` are every reducer's, not declared), or None."""
    options = {key: value for key, value in options.items() if key not in ("comm", "check")}
    return registry.options("reducer", name).problem(options, f"reducer {name!r}")


def check_reducer_options(name, options):
    """Raise what :func:`reducer_options_problem` finds: TypeError for an undeclared option (as a constructor
    would), ValueError for a value outside its declaration."""
    message = reducer_options_problem(name, options)
    if message:
        undeclared = registry.options("reducer", name).unknown(
            {key: None for key in options if key not in ("comm", "check")}, f"reducer {name!r}")
        raise (TypeError if undeclared else ValueError)(message)


class Reducer:
    """Base class: the interface, argument handling, the collective check, scratch buffers,
    the private communicator.

    Subclasses set ``name``, register themselves with
    ``mpiopt.core.registry.register("reducer", name)`` and implement at least
    ``_allreduce_inplace(buffer, ufunc)`` (or ``_allreduce_into``); the other
    hooks have correct fallbacks (see the module docstring).

    Public interface: the checked operations ``allreduce``, ``reduce_scatter``,
    ``allgather``, ``allgatherv``; the byte counters ``last_bytes_sent``,
    ``last_bytes_received``, ``bytes_sent``, ``bytes_received`` and
    ``reset_counters()``; the unchecked building blocks of composite reducers
    ``reduce_into``, ``reduce_scatter_into``, ``gather_into`` and ``gather``
    (see the module docstring); ``model``, ``scratch``, ``cuda_aware``, ``close``.
    """

    name = "base"
    options = NO_OPTIONS  # the constructor's options besides comm and check (mpiopt.core.options)
    direct_capable = False  # the hooks only call MPI: a CUDA-aware MPI can take device buffers as they are

    def __init__(self, comm=None, check=True):
        self.comm = resolve_comm(comm).Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.check = check
        self._scratch = Scratch()
        self._cuda_aware = None  # resolved at the first call with device buffers (mpiopt.collectives.device)
        self._pinned = None
        self.reset_counters()

    # -- device buffers (mpiopt.collectives.device) -------------------------
    @property
    def cuda_aware(self):
        """Whether device buffers go to MPI as they are (where the algorithm allows): the setting given,
        else ``MPIOPT_CUDA_AWARE``, else what MPI says."""
        if self._cuda_aware is None:
            self._cuda_aware = device.cuda_aware()
        return self._cuda_aware

    @cuda_aware.setter
    def cuda_aware(self, setting):
        """True or False forces it; None (or "auto") goes back to the environment variable and detection."""
        self._cuda_aware = device.cuda_aware(setting)

    @property
    def pinned(self):
        """This reducer's pinned host buffers for staging device arrays (made at first use)."""
        if self._pinned is None:
            self._pinned = Scratch(pinned=True)
        return self._pinned

    def _direct_capable(self, nbytes):
        """Whether the algorithm used for ``nbytes`` can take device buffers (``auto`` asks its choice)."""
        return self.direct_capable

    def _on_wire(self, source, out, nbytes=None):
        """The context of :func:`mpiopt.collectives.device.on_wire` for this reducer; ``nbytes`` (default
        ``out``'s) is the size by which the algorithm is chosen, as the hook will choose it."""
        return device.on_wire(self, source, out, self._direct_capable(out.nbytes if nbytes is None else nbytes))

    @classmethod
    def model(cls, p, nbytes, fitted):
        """Predicted seconds of one all-reduce of ``nbytes`` over ``p`` ranks, or None when there
        is no model.  ``fitted`` has ``alpha``, ``beta``, ``gamma``, ``copy`` (seconds per
        message or per byte) and ``nodes``, as :class:`mpiopt.collectives.models.Fitted`."""
        return None

    # -- bytes on the wire ----------------------------------------------------
    def reset_counters(self):
        """Set the byte counters (``last_bytes_*``, ``bytes_*``) to zero."""
        self.bytes_sent = self.bytes_received = 0
        self.last_bytes_sent = self.last_bytes_received = 0

    def _record(self, traffic):
        """This operation's (sent, received) bytes: now the last ones, and added to the sums."""
        self.last_bytes_sent, self.last_bytes_received = traffic
        self.bytes_sent += traffic[0]
        self.bytes_received += traffic[1]

    def _record_gather(self, bounds, itemsize):
        self._record(ring_allgather_bytes([(bounds[r + 1] - bounds[r]) * itemsize for r in range(self.size)],
                                          self.rank))

    # -- helpers -----------------------------------------------------------
    def scratch(self, key, count, dtype):
        """A reusable buffer of at least ``count`` elements (one per key and dtype)."""
        return self._scratch(key, count, dtype)

    def _agree_on_options(self, problem, options):
        """Check constructor options collectively; on failure free the private communicator first."""
        try:
            check_collectively(self.comm, problem, options)
        except CollectiveError:
            self.close()
            raise

    @staticmethod
    def _array_problem(array, what):
        if not (isinstance(array, np.ndarray) or device.is_device_array(array)):
            return f"{what} must be a numpy array (or a CuPy array), got {type(array).__name__}"
        if array.dtype not in DTYPE_CODES:
            return (f"dtype {array.dtype} is not supported; use one of "
                    f"{', '.join(np.dtype(t).name for t in DTYPES)}")
        if not array.flags.c_contiguous:
            return f"{what} must be C-contiguous"
        return None

    def _local_problem(self, sendbuf, recvbuf, op):
        problem = self._array_problem(sendbuf, "sendbuf")
        if problem:
            return problem
        if op not in OPS:
            return f"op must be one of {', '.join(OPS)}, got {op!r}"
        if op == "mean" and sendbuf.dtype.kind != "f":
            return f"op 'mean' needs a floating dtype, got {sendbuf.dtype}; use 'sum'"
        if recvbuf is not None and recvbuf is not sendbuf:
            if device.is_device_array(recvbuf) != device.is_device_array(sendbuf) \
                    or self._array_problem(recvbuf, "recvbuf") or recvbuf.dtype != sendbuf.dtype \
                    or recvbuf.size != sendbuf.size or not recvbuf.flags.c_contiguous:
                return (f"recvbuf must be a C-contiguous {sendbuf.dtype} array of {sendbuf.size} elements "
                        f"on the {'device' if device.is_device_array(sendbuf) else 'host'}, as sendbuf, "
                        f"got {getattr(recvbuf, 'dtype', type(recvbuf).__name__)} of "
                        f"{getattr(recvbuf, 'size', '?')}")
        return None

    def _collective_check(self, sendbuf, recvbuf, op, operation):
        """One small MPI_Allreduce: every rank learns whether any rank's call is bad or differs."""
        problem = self._local_problem(sendbuf, recvbuf, op)
        if problem is None:
            signature = [sendbuf.size, DTYPE_CODES[sendbuf.dtype], OP_CODES[op]]
        else:
            signature = [-1, -1, -1]
        local = np.array([problem is not None] + signature + [-v for v in signature], dtype=np.int64)
        merged = np.empty_like(local)
        self.comm.Allreduce(local, merged, op=MPI.MAX)
        failed = bool(merged[0])
        differs = any(merged[1 + i] != -merged[4 + i] for i in range(3))
        if failed or differs:
            mine = None if problem else f"length {sendbuf.size}, dtype {sendbuf.dtype}, op {op}"
            gathered = self.comm.allgather((problem, mine))
            if failed:
                raise CollectiveError({rank: bad for rank, (bad, _) in enumerate(gathered) if bad})
            raise CollectiveError({rank: f"{self.name} {operation} arguments differ across ranks: {arguments}"
                                   for rank, (_, arguments) in enumerate(gathered)})

    def _prepare(self, sendbuf, recvbuf, op, operation="allreduce"):
        """Validate (collectively when ``check``); return the flat output array, not yet filled."""
        if self.check:
            self._collective_check(sendbuf, recvbuf, op, operation)
        else:
            problem = self._local_problem(sendbuf, recvbuf, op)
            if problem:
                raise ValueError(f"rank {self.rank}: {problem}")
        out = get_array_module(sendbuf).empty_like(sendbuf) if recvbuf is None else recvbuf
        return out.reshape(-1)

    def _gather_lengths(self, array, problem, operation, count=-1):
        """Every rank's length, by one MPI_Allgather of (problem?, length, dtype, count).

        A problem on any rank, or dtypes (or ``count``) that differ, raise the
        same CollectiveError on every rank."""
        valid = problem is None
        row = np.array([not valid, array.size if valid else -1,
                        DTYPE_CODES[array.dtype] if valid else -1, count], dtype=np.int64)
        table = np.empty((self.size, row.size), dtype=np.int64)
        self.comm.Allgather(row, table)
        if table[:, 0].any():
            problems = self.comm.allgather(problem)
            raise CollectiveError({rank: bad for rank, bad in enumerate(problems) if bad})
        if (table[:, 2] != table[0, 2]).any() or (table[:, 3] != table[0, 3]).any():
            raise CollectiveError({
                rank: f"{self.name} {operation} arguments differ across ranks: dtype {_dtype_name(code)}"
                      + (f", count {rank_count}" if rank_count >= 0 else "")
                for rank, (_, _, code, rank_count) in enumerate(table.tolist())})
        return table[:, 1].tolist()

    # -- the interface -----------------------------------------------------
    def allreduce(self, sendbuf, recvbuf=None, op="sum", name=None, shapes=None):
        """Reduce ``sendbuf`` over all ranks; the result goes to ``recvbuf``
        (a new array when None; in place when ``recvbuf is sendbuf``).  ``name`` and ``shapes`` (the
        buffer's key, the tensors that tile it) are for reducers with per-buffer state; this one ignores them."""
        out = self._prepare(sendbuf, recvbuf, op)
        self.reduce_into(sendbuf.reshape(-1), out, op)
        if op == "mean":
            out /= out.dtype.type(self.size)
        self._record(ring_allreduce_bytes(out.size, out.itemsize, self.size, self.rank))
        return out.reshape(sendbuf.shape)

    def reduce_scatter(self, sendbuf, op="sum"):
        """This rank's chunk of the reduction of every rank's ``sendbuf`` (all of the same
        length n): elements ``offsets(n, p)[rank]`` to ``offsets(n, p)[rank + 1]``, a new 1-D array."""
        flat = self._prepare(sendbuf, None, op, "reduce_scatter")
        bounds = offsets(flat.size, self.size)
        out = get_array_module(sendbuf).empty(bounds[self.rank + 1] - bounds[self.rank], dtype=sendbuf.dtype)
        self.reduce_scatter_into(sendbuf.reshape(-1), out, op)
        if op == "mean":
            out /= out.dtype.type(self.size)
        self._record(ring_reduce_scatter_bytes(flat.size, flat.itemsize, self.size, self.rank))
        return out

    def allgather(self, chunk, count=None):
        """The full vector of ``count`` elements from every rank's chunk: rank r passes chunk r of
        ``offsets(count, p)`` (what :meth:`reduce_scatter` returned).  Without ``count`` the
        lengths are exchanged (and checked) first; with it they are checked when ``check``."""
        problem = self._array_problem(chunk, "chunk")
        if problem is None and count is not None:
            if not isinstance(count, (int, np.integer)) or count < 0:
                problem = f"count must be an integer >= 0, got {count!r}"
            else:
                mine = offsets(count, self.size)
                expected = mine[self.rank + 1] - mine[self.rank]
                if chunk.size != expected:
                    problem = f"chunk must have {expected} elements for count {count}, got {chunk.size}"
        if count is None or self.check:
            lengths = self._gather_lengths(chunk, problem, "allgather", -1 if count is None else int(count))
            count = sum(lengths)
            bounds = offsets(count, self.size)
            wrong = {rank: f"chunk has {length} elements; chunk {rank} of {count} elements over "
                           f"{self.size} ranks has {bounds[rank + 1] - bounds[rank]}"
                     for rank, length in enumerate(lengths) if length != bounds[rank + 1] - bounds[rank]}
            if wrong:
                raise CollectiveError(wrong)
        elif problem:
            raise ValueError(f"rank {self.rank}: {problem}")
        bounds = offsets(int(count), self.size)
        self._record_gather(bounds, chunk.itemsize)
        return self.gather(chunk, bounds)

    def allgatherv(self, sendbuf):
        """(every rank's contribution concatenated in rank order, the list of their lengths).

        Contributions are flattened, may have any length (0 included) and share
        one dtype; the lengths are exchanged (and checked) first."""
        lengths = self._gather_lengths(sendbuf, self._array_problem(sendbuf, "sendbuf"), "allgatherv")
        bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64).tolist()
        self._record_gather(bounds, sendbuf.itemsize)
        return self.gather(sendbuf, bounds), lengths

    # -- the building blocks of composite reducers (unchecked, not counted) --
    def reduce_into(self, source, out, op="sum"):
        """Reduce every rank's flat ``source`` into ``out`` (same length and dtype; ``out`` may be
        ``source``: in place) by this reducer's algorithm.  No argument check, no collective check, no
        counting: for a caller that has checked (a composite reducer).  ``op``: sum, max or min ("mean" sums;
        the caller divides)."""
        if self.size > 1 and out.size:
            with self._on_wire(source, out) as (wire_source, wire_out):
                self._allreduce_into(wire_source, wire_out, OPS[op])
        elif out is not source:
            get_array_module(out).copyto(out, source)

    def reduce_scatter_into(self, source, out, op="sum"):
        """Put this rank's chunk (``offsets(source.size, p)``) of the reduction of every rank's flat
        ``source`` into ``out``; unchecked, not counted, as :meth:`reduce_into`."""
        bounds = offsets(source.size, self.size)
        if self.size > 1 and source.size:
            with self._on_wire(source, out, source.nbytes) as (wire_source, wire_out):
                self._reduce_scatter_into(wire_source, wire_out, bounds, OPS[op])
        else:
            get_array_module(out).copyto(out, source[bounds[self.rank]:bounds[self.rank + 1]])

    def gather_into(self, out, bounds):
        """Fill every other rank's block of ``out`` (rank r's is ``bounds[r]:bounds[r + 1]``, the same
        ``bounds`` on every rank; this rank's block is already there); unchecked, not counted."""
        if self.size > 1 and out.size:
            with self._on_wire(None, out) as (_, wire_out):
                self._allgather_into(wire_out, bounds)

    def gather(self, block, bounds):
        """A new array of every rank's ``block`` (rank r's at ``bounds[r]:bounds[r + 1]``, the same
        ``bounds`` on every rank, so no lengths are exchanged); unchecked, not counted."""
        out = get_array_module(block).empty(bounds[-1], dtype=block.dtype)
        out[bounds[self.rank]:bounds[self.rank + 1]] = block.reshape(-1)
        self.gather_into(out, bounds)
        return out

    # -- the hooks ---------------------------------------------------------
    def _allreduce_into(self, source, out, ufunc):
        """Reduce ``source`` into ``out`` (which may be ``source``); by default copy, then in place."""
        if device.address(out) != device.address(source):
            get_array_module(out).copyto(out, source)
        self._allreduce_inplace(out, ufunc)

    def _allreduce_inplace(self, buffer, ufunc):
        raise NotImplementedError(f"{type(self).__name__} must implement _allreduce_inplace or _allreduce_into")

    def _reduce_scatter_into(self, source, out, bounds, ufunc):
        """Put chunk ``rank`` of the reduction into ``out``; by default all-reduce, then keep the chunk."""
        full = self.scratch("reduce-scatter", source.size, source.dtype)
        self._allreduce_into(source, full, ufunc)
        np.copyto(out, full[bounds[self.rank]:bounds[self.rank + 1]])

    def _allgather_into(self, out, bounds):
        """Fill every rank's block of ``out`` (rank r's is ``bounds[r]:bounds[r + 1]``; this rank's is
        already there); by default MPI_Allgatherv on the bytes."""
        itemsize = out.itemsize
        counts = [(bounds[r + 1] - bounds[r]) * itemsize for r in range(self.size)]
        displacements = [bounds[r] * itemsize for r in range(self.size)]
        self.comm.Allgatherv(MPI.IN_PLACE, [as_bytes(out), counts, displacements, MPI.BYTE])

    def close(self):
        """Release scratch buffers, the private communicator and anything else the reducer owns."""
        self._scratch.clear()
        if self._pinned is not None:
            self._pinned.clear()
        if self.comm != MPI.COMM_NULL:
            self.comm.Free()
            self.comm = MPI.COMM_NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r}, size={self.size})"
