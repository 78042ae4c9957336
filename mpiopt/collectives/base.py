"""The reducer interface shared by every all-reduce algorithm.

A reducer is built once for a communicator and called many times:

    reducer = get_reducer("ring", comm)
    out = reducer.allreduce(sendbuf)                 # a new array
    reducer.allreduce(buf, buf, op="max")            # in place
    chunk = reducer.reduce_scatter(sendbuf)          # this rank's reduced chunk (ring, ps-sharded)
    full = reducer.allgather(chunk, count)           # the inverse

Buffers are contiguous numpy arrays of float64, float32, float16, int32 or
int64; ops are sum, max, min and mean (mean for floating types only).  The data
travel as raw bytes and are reduced with numpy, so every dtype takes the same
path.  Scratch buffers are allocated once per size and reused across calls.

With ``check=True`` (the default) each call first runs one small
MPI_Allreduce over (length, dtype, op), so buffers that disagree across ranks
raise the same CollectiveError on every rank instead of hanging; solvers whose
sizes are fixed by construction pass ``check=False`` for the hot loop.
"""
import numpy as np
from mpi4py import MPI

from ..core.comm import CollectiveError, resolve_comm

DTYPES = (np.float64, np.float32, np.float16, np.int32, np.int64)
DTYPE_CODES = {np.dtype(t): code for code, t in enumerate(DTYPES, start=1)}
OPS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "mean": np.add}
OP_CODES = {name: code for code, name in enumerate(OPS, start=1)}


def chunk_bounds(count, parts):
    """Element offsets [0, ..., count] splitting ``count`` into ``parts`` near-equal chunks."""
    base, extra = divmod(count, parts)
    sizes = [base + (i < extra) for i in range(parts)]
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64).tolist()


def as_bytes(array):
    """A flat uint8 view of a contiguous array (for MPI.BYTE transfers of any dtype)."""
    return array.reshape(-1).view(np.uint8)


class Reducer:
    """Base class: argument handling, the collective check, scratch buffers."""

    name = "base"

    def __init__(self, comm=None, check=True):
        self.comm = resolve_comm(comm)
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.check = check
        self._scratch = {}

    # -- helpers -----------------------------------------------------------
    def scratch(self, key, count, dtype):
        """A reusable buffer of at least ``count`` elements (one per key and dtype)."""
        dtype = np.dtype(dtype)
        buffer = self._scratch.get((key, dtype))
        if buffer is None or buffer.size < count:
            buffer = np.empty(max(count, 1), dtype=dtype)
            self._scratch[(key, dtype)] = buffer
        return buffer[:count]

    def _local_problem(self, sendbuf, recvbuf, op):
        if not isinstance(sendbuf, np.ndarray):
            return f"sendbuf must be a numpy array, got {type(sendbuf).__name__}"
        if sendbuf.dtype not in DTYPE_CODES:
            return (f"dtype {sendbuf.dtype} is not supported; use one of "
                    f"{', '.join(np.dtype(t).name for t in DTYPES)}")
        if op not in OPS:
            return f"op must be one of {', '.join(OPS)}, got {op!r}"
        if op == "mean" and sendbuf.dtype.kind != "f":
            return f"op 'mean' needs a floating dtype, got {sendbuf.dtype}; use 'sum'"
        if not sendbuf.flags.c_contiguous:
            return "sendbuf must be C-contiguous"
        if recvbuf is not None and recvbuf is not sendbuf:
            if not isinstance(recvbuf, np.ndarray) or recvbuf.dtype != sendbuf.dtype \
                    or recvbuf.size != sendbuf.size or not recvbuf.flags.c_contiguous:
                return (f"recvbuf must be a C-contiguous {sendbuf.dtype} array of {sendbuf.size} elements, "
                        f"got {getattr(recvbuf, 'dtype', type(recvbuf).__name__)} of "
                        f"{getattr(recvbuf, 'size', '?')}")
        return None

    def _collective_check(self, sendbuf, recvbuf, op):
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
            raise CollectiveError({rank: f"{self.name} allreduce arguments differ across ranks: {arguments}"
                                   for rank, (_, arguments) in enumerate(gathered)})

    def _prepare(self, sendbuf, recvbuf, op):
        """Validate (collectively when ``check``); return the flat output array, not yet filled."""
        if self.check:
            self._collective_check(sendbuf, recvbuf, op)
        else:
            problem = self._local_problem(sendbuf, recvbuf, op)
            if problem:
                raise ValueError(f"rank {self.rank}: {problem}")
        out = np.empty_like(sendbuf) if recvbuf is None else recvbuf
        return out.reshape(-1)

    # -- the interface -----------------------------------------------------
    def allreduce(self, sendbuf, recvbuf=None, op="sum"):
        """Reduce ``sendbuf`` over all ranks; the result goes to ``recvbuf``
        (a new array when None; in place when ``recvbuf is sendbuf``)."""
        out = self._prepare(sendbuf, recvbuf, op)
        source = sendbuf.reshape(-1)
        if self.size > 1 and out.size:
            self._allreduce_into(source, out, OPS[op])
        elif out is not source:
            np.copyto(out, source)
        if op == "mean":
            out /= out.dtype.type(self.size)
        return out.reshape(sendbuf.shape)

    def _allreduce_into(self, source, out, ufunc):
        """Reduce ``source`` into ``out`` (which may be ``source``); by default copy, then in place."""
        if out.ctypes.data != source.ctypes.data:
            np.copyto(out, source)
        self._allreduce_inplace(out, ufunc)

    def _allreduce_inplace(self, buffer, ufunc):
        raise NotImplementedError

    def close(self):
        """Release scratch buffers and any communicators or windows the reducer owns."""
        self._scratch.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r}, size={self.size})"
