"""The MPI runtime: rank 0 runs the method, ranks 1..n compute gradients, on nonblocking point-to-point.

The server is the asynchronous parameter server's pattern (mpiopt.collectives.async_server)
turned around so that the server, not the worker, decides what each worker
computes next: the method answers every arriving gradient with the workers to
(re)start, and the server sends each of them a JOB (job number, step, point).
The server is the real-time executor of :func:`.engine.drive`, the loop the
simulator runs too.
No barrier is used while the method runs; a worker waits for messages the way
the parameter server does (``next_message``: probes, then sleeps of up to 1 ms),
so idle ranks do not burn the cores that busy ones need.

Messages (tags ASGD_* in mpiopt.collectives.tags, on a private duplicate of the
communicator): JOB [job, step, the job (Job.as_header), start, x (or [x, y])] server -> worker
(the :class:`.jobs.Job`, the server's clock and the point: a time-varying
power prices the job from its start), which cancels whatever the worker was
computing; GRAD [job, step, gradients finished, what the job sends] worker -> server (a gradient,
a sum of b, or the m K values of its Random-K messages, which the server
decodes with indices of its own: :mod:`.jobs`), ignored when the job has
since been cancelled; STOP server -> worker; DONE worker -> server;
ERROR worker -> server (the failure's text); SIGNAL worker -> server ([usr1, term]: a
signal that reached this worker, so that one rank's signal checkpoints or stops the whole run).  For a method
that declares ``routed`` the JOBs and GRADs travel along the pivot's tree over an MPI distributed-graph topology
of the workers' graph (:mod:`.routes`: the server talks to the pivot only).

A worker with fixed or random compute times prices the job with the timing
model (:mod:`.timing`: its compute times drawn from
``random_stream(seed, "asyncsgd-tau", worker)``, plus its download and upload
times when given), sleeps ``tau * time_unit``
seconds in slices of at most POLL seconds while probing for a newer JOB or a
STOP, then computes the gradient (drawing its noise from
``random_stream(seed, "asyncsgd-gradient", worker)``, as the simulator does)
and sends it with Isend.  With ``tau="real"`` it only computes.  A worker far
slower than the whole run sees the STOP within POLL seconds.

Checkpoints (:class:`.checkpoint.MPICheckpoint`) come between sessions: at
a SIGUSR1, a SIGTERM or ``checkpoint_every`` steps the server ends the
session (the shutdown below), every rank writes its part, and the next
session restarts the busy workers' jobs at their points.

Shutdown: the server sends STOP to every worker and receives until each has
answered DONE, dropping the gradients still in flight, so every send is
matched and no rank is left blocked.  An error on the server (or an ERROR from
a worker, or ``idle_timeout`` seconds without a message) stops the workers the
same way, and then every rank raises the same CollectiveError.
"""
import math
import time as clock

import numpy as np
from mpi4py import MPI

from ..collectives.async_server import next_message
from ..collectives.tags import ASGD_DONE, ASGD_ERROR, ASGD_GRAD, ASGD_JOB, ASGD_SIGNAL, ASGD_STOP
from ..core.comm import check_collectively
from ..core.random import random_stream
from . import jobs as job_results
from . import routes
from .checkpoint import MPICheckpoint
from .engine import TIME_UP, drive, start_plan
from .jobs import PLAIN, Job
from .runner import make_result, prepare
from .settings import inf_as_text

POLL = 5e-4       # seconds a computing worker sleeps between probes for a newer job
HEADER = 2        # job number and step, as float64 (exact below 2**53)
JOB_HEADER = HEADER + Job.HEADER_SIZE + 1  # the job (Job.as_header), its start in compute-time units
GRAD_HEADER = HEADER + 1  # and how many of the job's gradients finished
NOTHING = np.empty(0, dtype=np.uint8)
SIGNAL_POLL = 0.05  # seconds an idle worker with a checkpoint waits between looks at its signal flags


def run_mpi(problem, timing, settings, comm, started, log_stream=None):
    """Run the method of ``settings`` on ``comm`` (rank 0 serves, its log to ``log_stream``); every rank
    returns the same result."""
    comm = comm.Dup()
    try:
        saved = None if settings.checkpoint is None else MPICheckpoint(settings, comm, _fingerprint(
            problem, timing, settings, comm))
        try:
            if comm.rank == 0:
                result, error = _serve(comm, problem, timing, settings, started, log_stream, saved)
            else:
                result, error = None, _worker_sessions(comm, problem, timing, settings, comm.rank - 1, saved)
        finally:
            if saved is not None:
                saved.close()
        check_collectively(comm, error)
        return comm.bcast(result, root=0)
    finally:
        comm.Free()


def _start(comm, timing, outcome=None):
    """After the server's set-up, on every rank: (whether it succeeded, the pivot's tree or None, the
    distributed-graph topology the vectors travel on or None); the server passes (ok, tree)."""
    ok, tree = comm.bcast(outcome, root=0)
    return ok, tree, (routes.topology(comm, timing.graph) if ok and tree else None)


def _fingerprint(problem, timing, settings, comm):
    """What a checkpoint of this run must match: the server's problem and method, a worker's number."""
    if comm.rank:
        return {"worker": comm.rank - 1}
    fingerprint = {"problem": problem.info(), "method": settings.method,
                   "method_options": inf_as_text(settings.method_values()), "step_size": settings.step_size,
                   "epsilon": settings.epsilon, "n_workers": comm.size - 1, "tau": timing.compute.describe(),
                   "seed": settings.seed, "eval_every": settings.eval_every, "time_unit": settings.time_unit}
    if timing.beyond_compute:
        fingerprint["timing"] = timing.describe()
    return fingerprint


def _pack(job, step, vector, header=()):
    start = HEADER + len(header)
    buffer = np.empty(start + vector.size)
    buffer[0], buffer[1], buffer[HEADER:start], buffer[start:] = job, step, header, vector
    return buffer


class _Sends:
    """Isends in flight, each with the buffer it must keep alive until it completes."""

    def __init__(self):
        self.pending = []

    def send(self, comm, buffer, dest, tag):
        self.pending.append((comm.Isend(buffer, dest, tag), buffer))
        if len(self.pending) > 256:
            self.pending = [(r, b) for r, b in self.pending if not r.Test()]

    def wait(self):
        MPI.Request.Waitall([r for r, _ in self.pending])
        self.pending = []


def _serve(comm, problem, timing, settings, started, log_stream=None, saved=None):
    """The server's run: (the result, None), or (None, the error that every rank raises)."""
    n, sends = comm.size - 1, _Sends()
    try:
        method, recorder, predicted = prepare(problem, timing, settings, log_stream)
        recorder.banner("mpi", n, timing, predicted)
        tree = routes.tree_of(method, timing)
    except Exception as failure:  # noqa: BLE001 - every rank must hear of it, not only the server
        _start(comm, timing, (False, None))  # the workers return at once
        return None, f"the server failed: {type(failure).__name__}: {failure}"
    _, tree, topo = _start(comm, timing, (True, tree))
    try:
        return _serve_sessions(comm, n, sends, method, recorder, timing, settings, predicted, started, saved,
                               tree, topo)
    finally:
        if topo is not None:
            topo.Free()


def _serve_sessions(comm, n, sends, method, recorder, timing, settings, predicted, started, saved, tree, topo):
    server = _Server(comm, method, recorder, settings, sends, recorder.problem.dim, tree)
    if saved is not None:
        saved.resume_server(server)
    while True:
        error = server.run(saved)
        end = server.end_time()  # for a checkpoint, the clock stops here until the next session
        stuck = _shutdown(comm, n, sends, settings.idle_timeout, server.routed,  # always: workers await STOP
                          server.signalled)
        error = error or stuck
        decision = "error" if error else server.paused or "end"
        comm.bcast(decision, root=0)
        if decision == "error":
            return None, error
        if decision == "end":
            recorder.evaluate(end, server.gradients, force=True)
            if recorder.stopped_by is None:
                recorder.stop(end, server.gradients)
        if saved is not None:
            saved.write_server(server, end)
        if decision != "checkpoint":
            break
        server.resume_clock(end)
    unit = settings.time_unit
    extra = {"wall_seconds": end * unit, "time_unit": unit}
    if saved is not None:
        extra["resumed_at"] = saved.resumed_at
    if tree:
        extra["routes"] = routes.describe(tree, server.routed)
    result = make_result(recorder, "mpi", timing, settings, predicted, end, server.gradients,
                         server.computed, server.cancelled, started, extra)
    recorder.footer(result)
    return result, None


class _RunFailed(Exception):
    """A worker's ERROR, or no message for ``idle_timeout`` seconds: the run ends with this text."""


class _Server:
    """Rank 0 while the method runs: each worker's job, what it computed and what was cancelled, the clock."""

    def __init__(self, comm, method, recorder, settings, sends, dim, tree=None):
        n = comm.size - 1
        self.tree = tree or None  # the pivot's tree when the vectors travel on the graph (:mod:`.routes`)
        self.routed = np.zeros((n, n)) if self.tree else None  # messages sent from worker i to worker j
        self.comm, self.method, self.recorder, self.settings, self.sends = comm, method, recorder, settings, sends
        self.jobs = np.zeros(n, dtype=np.int64)
        self.busy = np.zeros(n, dtype=bool)
        self.computed, self.cancelled = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.gradients, self.status = 0, MPI.Status()
        self.incoming = np.empty(GRAD_HEADER + dim + bool(self.tree))  # a GRAD ([origin] on a tree, then job,
        self.received = self.incoming   # step, gradients finished, what the job sends); received: from job on
        self.dim, self.seed = dim, settings.seed
        self.origin = MPI.Wtime()
        self.points = {}        # worker -> (step, point) of its current job (a checkpoint restarts them)
        self.job_of = {}        # worker -> its current Job (a method's own jobs)
        self.paused = None      # "checkpoint" or "stop": the session ends for a checkpoint
        self.started = False    # the method's first assignment is made
        self.saved = None       # the run's MPICheckpoint, if any
        self.forwarded = np.zeros(2)  # (usr1, term) that workers reported since the last pause()

    def now(self):
        """The wall time since the start, in compute-time units."""
        return (MPI.Wtime() - self.origin) / self.settings.time_unit

    def end_time(self):
        """The run's end: now, or ``max_time`` when the time ran out."""
        now = self.now()
        return min(now, self.settings.max_time) if self.recorder.stopped_by == "max_time" else now

    def assign(self, plan):
        """Send a JOB at the method's point to each worker of ``plan`` (``ALL``: every one), cancelling its job."""
        start_plan(self.method, self.start, plan)

    def start(self, worker, job):
        """Start ``worker`` on ``job`` at the method's point (None: idle; a newer job number makes whatever it
        sends stale), cancelling its job."""
        if self.busy[worker]:
            self.cancelled[worker] += 1
        if job is None:
            self.jobs[worker] += 1
            self.busy[worker] = False
            self.points.pop(worker, None)
            return
        self.send_job(worker, self.method.k, self.method.point(), job)

    def send_job(self, worker, k, x, job=PLAIN):
        """A new ``job`` for ``worker`` at ``x`` (step ``k``); whatever it computed is cancelled."""
        self.jobs[worker] += 1
        self.busy[worker] = True
        self.points[worker] = (k, x)
        self.job_of[worker] = job
        header = job.as_header() + [self.now()]
        if self.tree:  # to the pivot, which sends it down the tree
            self.sends.send(self.comm, np.concatenate(([worker], _pack(self.jobs[worker], k, x, header))),
                            self.tree["pivot"] + 1, ASGD_JOB)
        else:
            self.sends.send(self.comm, _pack(self.jobs[worker], k, x, header), worker + 1, ASGD_JOB)

    def restart_jobs(self):
        """A new session: every worker that was computing starts its job again, at the job's point."""
        for worker in np.flatnonzero(self.busy):
            self.send_job(worker, *self.points[worker], self.job_of.get(worker, PLAIN))

    def resume_clock(self, at):
        """Start the clock again at ``at`` compute-time units (a checkpoint's time is not the run's)."""
        self.origin = MPI.Wtime() - at * self.settings.time_unit

    clock = now  # the executor's clock (engine.drive): wall time in compute-time units

    def pause(self):
        """The checkpoint's request ("checkpoint", "stop") to end this session now, or None."""
        if self.saved is not None:
            self.paused = self.saved.requested(self.method, self.recorder, self.forwarded)
            self.forwarded[0] = 0.0  # a SIGUSR1 asks for one checkpoint; a SIGTERM stays until the stop
        return self.paused

    def signalled(self, flags):
        """A worker's SIGNAL message: its (usr1, term), acted on at the next pause()."""
        np.maximum(self.forwarded, flags, out=self.forwarded)

    def next_arrival(self):
        """The next gradient of a current job (:mod:`.engine`), None, or TIME_UP after ``max_time``."""
        arrival = self.receive()
        if arrival is None:
            return None
        worker, k_at = arrival
        time = self.now()
        if self.settings.max_time is not None and time > self.settings.max_time:
            return TIME_UP  # as in the simulator, nothing arriving after max_time is used
        self.busy[worker] = False
        job, done = self.job_of.get(worker, PLAIN), int(self.received[HEADER])
        received = job_results.receive(job, self.received[GRAD_HEADER:], self.dim, worker, k_at, self.seed)
        return worker, time, k_at, received, done

    def run(self, saved=None):
        """Serve gradients (:func:`.engine.drive`) until the stopping rule ends the run or ``saved`` (an
        :class:`MPICheckpoint`) asks for a checkpoint (``paused``); returns None, or the error that ended it."""
        self.paused, self.saved = None, saved
        try:
            if not self.started:
                self.started = True
                self.assign(self.method.start())
                self.recorder.evaluate(0.0, 0, force=True)
            else:
                self.restart_jobs()
            drive(self, self.recorder)
        except _RunFailed as failure:
            return str(failure)
        except Exception as failure:  # noqa: BLE001 - every rank must hear of it, not only the server
            return f"the server failed: {type(failure).__name__}: {failure}"
        return None

    def receive(self):
        """(worker, step) of a gradient of a current job, now in ``received``; None when there is nothing to
        use (a cancelled job's gradient, or the wait reached ``max_time``); _RunFailed on a worker's ERROR or
        after ``idle_timeout`` seconds without a message."""
        settings, status = self.settings, self.status
        wait = settings.idle_timeout
        if settings.max_time is not None:
            wait = min(wait, max((settings.max_time - self.now()) * settings.time_unit, 0.0) + 1e-3)
        message = next_message(self.comm, status, wait)
        if message is None:
            if settings.max_time is not None and self.now() >= settings.max_time:
                return None  # the stopping rule ends the run
            computing = ", ".join(str(w) for w in np.flatnonzero(self.busy)) or "none"
            raise _RunFailed(f"no message from any worker for {settings.idle_timeout:g} s "
                             f"(workers computing: {computing})")
        source = status.Get_source()
        if status.Get_tag() == ASGD_SIGNAL:
            flags = np.empty(2)
            message.Recv(flags)
            self.signalled(flags)
            return None
        if status.Get_tag() == ASGD_ERROR:
            text = bytearray(status.Get_count(MPI.BYTE))
            message.Recv([text, MPI.BYTE])
            raise _RunFailed(f"worker {source - 1} (rank {source}) failed: {text.decode('utf-8', 'replace')}")
        count = status.Get_count(MPI.DOUBLE)
        if count != self.incoming.size:  # a job's compressed messages: m K values
            self.incoming = np.empty(count)
        message.Recv(self.incoming)
        if self.tree:  # from the pivot: [origin, GRAD]
            worker, self.received = int(self.incoming[0]), self.incoming[1:]
        else:
            worker, self.received = source - 1, self.incoming
        job, k_at = int(self.received[0]), int(self.received[1])
        if job != self.jobs[worker]:
            return None  # a gradient of a job cancelled since (counted when it was cancelled)
        return worker, k_at


def _shutdown(comm, n, sends, idle_timeout, routed=None, signalled=None):
    """STOP every worker, then receive until each has said DONE (gradients still in flight are dropped; a
    worker's SIGNAL goes to ``signalled``, for the next session); on a
    tree (``routed``: the run's messages per directed edge, added to here) each DONE carries the worker's
    counts, and every worker is told how many to drain (:func:`.routes.flush`).

    Returns None, or a message when some workers did not stop within ``idle_timeout`` seconds (returned,
    not raised: the server must still reach the collective check that every rank makes after the run)."""
    for worker in range(n):
        sends.send(comm, NOTHING, worker + 1, ASGD_STOP)
    open_workers, status = set(range(1, n + 1)), MPI.Status()
    counts = None if routed is None else np.zeros((n, n))
    while open_workers:
        message = next_message(comm, status, idle_timeout)
        if message is None:
            return (f"async-sgd server: workers {sorted(w - 1 for w in open_workers)} did not stop "
                    f"within {idle_timeout:g} s")
        payload = bytearray(status.Get_count(MPI.BYTE))
        message.Recv([payload, MPI.BYTE])
        if status.Get_tag() == ASGD_SIGNAL and signalled is not None:
            signalled(np.frombuffer(payload, dtype=np.float64))
        if status.Get_tag() == ASGD_DONE:
            open_workers.discard(status.Get_source())
            if counts is not None:
                counts[status.Get_source() - 1] = np.frombuffer(payload, dtype=np.float64)
    if counts is not None:
        routes.flush(comm, sends, counts)
        routed += counts
    sends.wait()
    return None


STOP = "stop"  # what _next_order returns for the server's STOP


def _next_order(comm, status, deadline, router=None):
    """The server's next order: a JOB's buffer (from the server, or down the tree through ``router``), STOP,
    or None at ``deadline`` (monotonic seconds); a router forwards what passes through meanwhile."""
    if router is None and deadline == math.inf:  # idle, nothing to forward: wait as the parameter server does
        message = next_message(comm, status, math.inf, source=0)
    else:
        message = comm.Improbe(0, MPI.ANY_TAG, status)
    while True:
        if message is not None:
            if status.Get_tag() == ASGD_STOP:
                message.Recv([NOTHING, MPI.BYTE])
                return STOP
            buffer = np.empty(status.Get_count(MPI.DOUBLE))  # [destination on a tree], the job, x (or [x, y])
            message.Recv(buffer)
            order = buffer if router is None else router.route(buffer)
            if order is not None:
                return order
        else:
            order = None if router is None else router.pump()
            if order is not None:
                return order
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                return None
            clock.sleep(min(remaining, POLL))
        message = comm.Improbe(0, MPI.ANY_TAG, status)


def _worker_sessions(comm, problem, timing, settings, worker, saved=None):
    """A worker's run: sessions of :func:`_work` until the server says the run is over; between two, the
    checkpoint the server asked for (the worker's streams are its part).  Returns None."""
    streams = [random_stream(settings.seed, "asyncsgd-gradient", worker),
               random_stream(settings.seed, "asyncsgd-tau", worker)]
    ok, tree, topo = _start(comm, timing)
    if not ok:  # the server could not set the run up
        return None
    try:
        if saved is not None:
            saved.resume_worker(streams)
        while True:
            _work(comm, problem, timing, settings, worker, streams, tree, topo,
                  None if saved is None else saved.signals)
            decision = comm.bcast(None, root=0)
            if decision != "error" and saved is not None:
                saved.write_worker(streams)
            if decision != "checkpoint":
                return None
    finally:
        if topo is not None:
            topo.Free()


def _work(comm, problem, timing, settings, worker, streams, tree=None, topo=None, signals=None):
    """A worker's loop: compute what the server asks until it says STOP. Returns None (errors go to the server).
    With ``signals`` (a run with a checkpoint: the process's :class:`~mpiopt.core.signals.SignalFlags`) a
    SIGUSR1 or SIGTERM that reaches this worker is sent to the server, which acts on it for every rank."""
    noise, tau_rng = streams
    unit, seed = settings.time_unit, settings.seed
    status, sends = MPI.Status(), _Sends()
    router = routes.Router(topo, comm, worker, tree, sends) if topo is not None else None
    job = deadline = task = done = None
    failed, told = False, np.zeros(2)

    def report(failure):  # once: the server then stops every worker and tells every rank
        text = f"{type(failure).__name__}: {failure}".encode("utf-8")
        sends.send(comm, np.frombuffer(text, dtype=np.uint8).copy(), 0, ASGD_ERROR)
        return True

    while True:
        if signals is not None:
            flags = np.array(signals.take())
            if (flags > told).any():  # each SIGUSR1 once; a SIGTERM once
                sends.send(comm, flags, 0, ASGD_SIGNAL)
                told[1] = max(told[1], flags[1])
        idle = math.inf if signals is None else clock.monotonic() + SIGNAL_POLL
        try:
            order = _next_order(comm, status, idle if job is None else deadline, router)
        except Exception as failure:  # noqa: BLE001 - a route that breaks (the server tells every rank)
            failed, order = failed or report(failure), None
            if job is None:
                continue
        if order is None and job is None:  # idle: a look at the signal flags
            continue
        if order is None:  # the job's time is up: compute and send
            try:
                if not failed:
                    sent = job_results.compute(problem, task, job[JOB_HEADER:], noise, worker, int(job[1]), seed, done)
                    result = _pack(job[0], job[1], sent, [done])
                    if router is None:
                        sends.send(comm, result, 0, ASGD_GRAD)
                    else:
                        router.up(result)
            except Exception as failure:  # noqa: BLE001 - the server tells every rank
                failed = report(failure)
            job = None
            continue
        if order is STOP:
            break
        job = order
        task, tau = Job.from_header(job[HEADER:JOB_HEADER - 1]), 0.0
        done = task.gradients
        if not failed:
            try:
                tau, done = timing.price(worker + 1, task, tau_rng, start=float(job[JOB_HEADER - 1]))
            except Exception as failure:  # noqa: BLE001 - a tau model failing on this worker only
                failed = report(failure)
        deadline = clock.monotonic() + (tau * unit if tau < math.inf else 1e12)
    if router is not None:
        router.finish(settings.idle_timeout)  # its DONE carries the counts sent; then drains to the FLUSH
    sends.wait()
    if router is None:
        comm.Send([NOTHING, MPI.BYTE], 0, ASGD_DONE)
    return None
