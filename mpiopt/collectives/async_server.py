"""Asynchronous parameter server on point-to-point.

One rank serves a model; the other ranks (workers) push updates whenever they
are ready and pull the latest model, without waiting for each other.  Each
message carries the model version it was based on, so the server knows the
staleness of every update (the asynchronous-SGD work uses this).

    worker:  with AsyncParameterServer(size) as ps:
                 model, version = ps.pull(); ...; ps.push(update, version); ...
    server:  stats = ps.serve(model, apply, idle_timeout=None)   # returns once every worker has closed

Protocol (tags from :mod:`.tags`, on a private duplicate of the communicator):
PUSH carries an 8-byte version and the update; PULL asks for the model,
answered by MODEL with the version and the model; DONE says the worker will
send nothing more. The server exits after a DONE from every worker, so workers
that never push (idle workers) still shut the server down cleanly.

Shutdown: a worker sends DONE exactly once, the first time one of these
happens: ``close()``, the end of its ``with`` block, ``free()``, its object
being garbage-collected, or its interpreter exiting (a ``weakref.finalize``
hook: it holds no reference to the object, and Python runs it at exit before
mpi4py finalizes MPI).  A worker that returns or calls ``sys.exit`` without
``close()`` therefore still releases the server.  Nothing is sent once MPI is
finalized, and the automatic paths never raise (Python prints an error there
instead).

Idle timeout: ``serve(..., idle_timeout=t)`` raises
:class:`ParameterServerTimeout` when no message at all arrives for ``t``
seconds (a worker that hangs, or one killed before it could send DONE); the
error names the workers that have not closed and carries the statistics
gathered so far.  With ``idle_timeout=None`` (the default) the server waits for
ever.

Waiting cost: MPICH's blocking receive busy-polls, so a server blocked in
``Recv`` would burn a core while the workers compute.  The server instead polls
with ``Improbe`` and receives the message it matched.  After each message it
probes up to ``SPIN_PROBES`` times (about 1 ms), calling ``sched_yield`` every
``YIELD_EVERY`` probes as MPICH's own busy wait does, so that messages arriving
back to back are taken at once and ranks sharing the core still run; then it
sleeps between probes, doubling the pause from ``FIRST_PAUSE`` up to
``LAST_PAUSE`` (1 ms).  A server waiting for long uses a few percent of a core
instead of all of it, and a message that ends a quiet spell waits at most
about ``LAST_PAUSE`` longer than with a blocking receive.  Counting probes rather
than time keeps a server that was descheduled from falling asleep under load.
"""
import math
import numbers
import os
import time
import weakref

import numpy as np
from mpi4py import MPI

from ..core.backend import to_host
from ..core.comm import check_collectively, resolve_comm
from .base import DTYPE_CODES
from .tags import ASYNC_DONE as TAG_DONE, ASYNC_MODEL as TAG_MODEL, ASYNC_PULL as TAG_PULL, ASYNC_PUSH as TAG_PUSH

HEADER = 8
SPIN_PROBES, YIELD_EVERY = 1000, 4
FIRST_PAUSE, LAST_PAUSE = 20e-6, 1e-3
NO_BYTES = np.empty(0, dtype=np.uint8)


def add_update(model, update, worker, staleness):
    """The default server rule: model += update."""
    model += update


def next_message(comm, status, idle_timeout=math.inf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):
    """The next incoming message on ``comm`` (an ``MPI.Message`` to receive; ``status`` describes it),
    or None when none arrives within ``idle_timeout`` seconds.

    Probes SPIN_PROBES times, yielding the core every YIELD_EVERY probes,
    then sleeps between probes, doubling the pause from FIRST_PAUSE to
    LAST_PAUSE (see the module docstring).  The asynchronous-SGD runtime's
    server and workers wait the same way."""
    message = comm.Improbe(source, tag, status)
    started, probes, pause = time.monotonic(), 1, FIRST_PAUSE
    while message is None:
        waited = time.monotonic() - started
        if waited >= idle_timeout:
            return None
        if probes < SPIN_PROBES:
            if probes % YIELD_EVERY == 0:
                os.sched_yield()
        else:
            time.sleep(min(pause, idle_timeout - waited))
            pause = min(2 * pause, LAST_PAUSE)
        message = comm.Improbe(source, tag, status)
        probes += 1
    return message


class ParameterServerTimeout(TimeoutError):
    """``serve`` heard nothing for ``idle_timeout`` seconds.

    ``silent_workers`` lists the workers that had not closed; ``stats`` is the
    dictionary ``serve`` would have returned, with what it had gathered so far.
    """

    def __init__(self, server, idle_timeout, silent_workers, stats):
        self.silent_workers, self.stats = list(silent_workers), stats
        who = (f"worker {self.silent_workers[0]}" if len(self.silent_workers) == 1
               else "workers " + ", ".join(map(str, self.silent_workers)))
        super().__init__(f"parameter server on rank {server}: no message for {idle_timeout:g} s; "
                         f"{who} never closed")


def _send_done(comm, server):
    """Tell the server this worker is done, unless MPI is already finalized."""
    if not MPI.Is_finalized():
        comm.Send([NO_BYTES, MPI.BYTE], server, TAG_DONE)


class AsyncParameterServer:
    """Server rank ``server``; every other rank of ``comm`` is a worker.

    A context manager: leaving the ``with`` block closes a worker (see the
    module docstring for every way a worker closes).
    """

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
        # Sends DONE once: when close() calls it, or when this object is collected or the interpreter exits.
        self._done = None if self.is_server else weakref.finalize(self, _send_done, self.comm, server)

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def _pack(self, version, array):
        self._message[:HEADER].view(np.int64)[0] = version
        self._message[HEADER:].view(self.dtype)[...] = array
        return [self._message, MPI.BYTE]

    # -- worker side ---------------------------------------------------------
    @property
    def closed(self):
        """True once this worker has told the server it is done (always False on the server)."""
        return self._done is not None and not self._done.alive

    def pull(self):
        """(a copy of the latest model, its version)."""
        self._require_worker("pull")
        self.comm.Send([NO_BYTES, MPI.BYTE], self.server, TAG_PULL)
        self.comm.Recv([self._message, MPI.BYTE], self.server, TAG_MODEL)
        return self._message[HEADER:].view(self.dtype).copy(), int(self._message[:HEADER].view(np.int64)[0])

    def push(self, update, version=-1):
        """Send an update computed from model ``version`` (-1: unknown; a numpy or CuPy array, which is
        copied to the host); returns at once after the send."""
        self._require_worker("push")
        update = np.asarray(to_host(update))  # a CuPy update is staged through the host
        if update.size != self.size:
            raise ValueError(f"rank {self.rank}: update has {update.size} elements, the model has {self.size}")
        self.comm.Send(self._pack(version, update.reshape(-1)), self.server, TAG_PUSH)

    def close(self):
        """Tell the server this worker is done (idempotent; nothing to do on the server)."""
        if self._done is not None:
            self._done()

    def _require_worker(self, what):
        if self.is_server:
            raise RuntimeError(f"rank {self.rank} is the server; only workers {what}")
        if self.closed:
            raise RuntimeError(f"rank {self.rank}: this worker has closed the parameter server")

    # -- server side ---------------------------------------------------------
    def serve(self, model, apply=add_update, idle_timeout=None):
        """Serve ``model`` (updated in place by ``apply(model, update, worker, staleness)``)
        until every worker has closed; returns statistics.

        With ``idle_timeout`` (seconds), raise :class:`ParameterServerTimeout`
        when no message arrives for that long."""
        if not self.is_server:
            raise RuntimeError(f"rank {self.rank} is a worker; the server is rank {self.server}")
        model = np.asarray(model).reshape(-1)
        if model.size != self.size or model.dtype != self.dtype:
            raise ValueError(f"model must be {self.size} elements of {self.dtype}")
        if idle_timeout is not None and not (isinstance(idle_timeout, numbers.Real)
                                             and not isinstance(idle_timeout, bool)
                                             and 0 < idle_timeout < math.inf):
            raise ValueError(f"rank {self.rank}: idle_timeout must be None or a positive, finite number "
                             f"of seconds, got {idle_timeout!r}")
        pushes = {worker: 0 for worker in self.workers}
        pulls = {worker: 0 for worker in self.workers}
        staleness = []
        version = 0

        def statistics():
            known = [s for s in staleness if s >= 0]
            return {"version": version, "pushes": pushes, "pulls": pulls,
                    "max_staleness": max(known, default=0),
                    "mean_staleness": float(np.mean(known)) if known else 0.0}

        open_workers = set(self.workers)
        status = MPI.Status()
        update = self._message[HEADER:].view(self.dtype)
        longest_wait = math.inf if idle_timeout is None else idle_timeout
        while open_workers:
            message = self._next_message(status, longest_wait)
            if message is None:
                raise ParameterServerTimeout(self.rank, idle_timeout, sorted(open_workers), statistics())
            message.Recv([self._message, MPI.BYTE])
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
        return statistics()

    def _next_message(self, status, idle_timeout):
        return next_message(self.comm, status, idle_timeout)

    def free(self):
        """Close a worker (if it has not closed yet), then free the private communicator."""
        self.close()
        self.comm.Free()
