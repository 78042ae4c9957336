"""Asynchronous parameter server on point-to-point.

One rank serves a model; the other ranks (workers) push updates whenever they
are ready and pull the latest model, without waiting for each other.  Each
message carries the model version it was based on, so the server knows the
staleness of every update (the asynchronous-SGD work uses this).

    worker:  model, version = ps.pull(); ...; ps.push(update, version); ...; ps.close()
    server:  stats = ps.serve(model, apply)      # returns once every worker has closed

Protocol (tags on a private duplicate of the communicator): PUSH carries an
8-byte version and the update; PULL asks for the model, answered by MODEL with
the version and the model; DONE says the worker will send nothing more.  The
server exits after a DONE from every worker, so workers that never push (idle
workers) still shut the server down cleanly.
"""
import numpy as np
from mpi4py import MPI

from ..core.comm import check_collectively, resolve_comm
from .base import DTYPE_CODES

TAG_PUSH, TAG_PULL, TAG_MODEL, TAG_DONE = 40, 41, 42, 43
HEADER = 8


def add_update(model, update, worker, staleness):
    """The default server rule: model += update."""
    model += update


class AsyncParameterServer:
    """Server rank ``server``; every other rank of ``comm`` is a worker."""

    def __init__(self, size, dtype=np.float64, comm=None, server=0):
        comm = resolve_comm(comm)
        dtype = np.dtype(dtype)
        problem = None
        if not (isinstance(size, (int, np.integer)) and size >= 0):
            problem = f"model size must be an integer >= 0, got {size!r}"
        elif dtype not in DTYPE_CODES:
            problem = f"dtype {dtype} is not supported"
        elif not 0 <= server < comm.Get_size():
            problem = f"server must be a rank in 0..{comm.Get_size() - 1}, got {server}"
        check_collectively(comm, problem, {"size": int(size) if problem is None else None,
                                           "dtype": str(dtype), "server": server})
        self.comm = comm.Dup()
        self.size, self.dtype, self.server = int(size), dtype, server
        self.rank = self.comm.Get_rank()
        self.is_server = self.rank == server
        self.workers = [r for r in range(self.comm.Get_size()) if r != server]
        self._message = np.empty(HEADER + self.size * dtype.itemsize, dtype=np.uint8)
        self._closed = False

    def _pack(self, version, array):
        self._message[:HEADER].view(np.int64)[0] = version
        self._message[HEADER:].view(self.dtype)[...] = array
        return [self._message, MPI.BYTE]

    # -- worker side ---------------------------------------------------------
    def pull(self):
        """(a copy of the latest model, its version)."""
        self._require_worker("pull")
        self.comm.Send([self._message[:0], MPI.BYTE], self.server, TAG_PULL)
        self.comm.Recv([self._message, MPI.BYTE], self.server, TAG_MODEL)
        return self._message[HEADER:].view(self.dtype).copy(), int(self._message[:HEADER].view(np.int64)[0])

    def push(self, update, version=-1):
        """Send an update computed from model ``version`` (-1: unknown); returns at once after the send."""
        self._require_worker("push")
        update = np.asarray(update)
        if update.size != self.size:
            raise ValueError(f"rank {self.rank}: update has {update.size} elements, the model has {self.size}")
        self.comm.Send(self._pack(version, update.reshape(-1)), self.server, TAG_PUSH)

    def close(self):
        """Tell the server this worker is done (idempotent)."""
        if not self.is_server and not self._closed:
            self.comm.Send([self._message[:0], MPI.BYTE], self.server, TAG_DONE)
            self._closed = True

    def _require_worker(self, what):
        if self.is_server:
            raise RuntimeError(f"rank {self.rank} is the server; only workers {what}")
        if self._closed:
            raise RuntimeError(f"rank {self.rank}: this worker has closed the parameter server")

    # -- server side ---------------------------------------------------------
    def serve(self, model, apply=add_update):
        """Serve ``model`` (updated in place by ``apply(model, update, worker, staleness)``)
        until every worker has closed; returns statistics."""
        if not self.is_server:
            raise RuntimeError(f"rank {self.rank} is a worker; the server is rank {self.server}")
        model = np.asarray(model).reshape(-1)
        if model.size != self.size or model.dtype != self.dtype:
            raise ValueError(f"model must be {self.size} elements of {self.dtype}")
        pushes = {worker: 0 for worker in self.workers}
        pulls = {worker: 0 for worker in self.workers}
        staleness = []
        version = 0
        open_workers = set(self.workers)
        status = MPI.Status()
        update = self._message[HEADER:].view(self.dtype)
        while open_workers:
            self.comm.Recv([self._message, MPI.BYTE], MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            source, tag = status.Get_source(), status.Get_tag()
            if tag == TAG_PUSH:
                based_on = int(self._message[:HEADER].view(np.int64)[0])
                lag = version - based_on if based_on >= 0 else -1
                apply(model, update, source, lag)
                version += 1
                pushes[source] += 1
                staleness.append(lag)
            elif tag == TAG_PULL:
                self.comm.Send(self._pack(version, model), source, TAG_MODEL)
                pulls[source] += 1
            elif tag == TAG_DONE:
                open_workers.discard(source)
        known = [s for s in staleness if s >= 0]
        return {"version": version, "pushes": pushes, "pulls": pulls,
                "max_staleness": max(known, default=0),
                "mean_staleness": float(np.mean(known)) if known else 0.0}

    def free(self):
        self.comm.Free()
