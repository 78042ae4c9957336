"""Checkpoints of a heterogeneous-worker SGD run: a simulated one resumed bit for bit, an MPI one between sessions.

A simulated run is one process's state (rank 0 simulates), so its checkpoint
is written through :class:`mpiopt.core.checkpoint.Checkpointer` on that rank
alone: the method (its point, step, counts and own state, ``Method.state``),
the event queue (the heap and the bulk of simultaneous restarts), the clock
as its exact (hi, lo) pair, the points the busy workers compute at (one
array per step still in use), every worker's noise stream and the stream of
random compute times (their bit generators' states), the per-worker counts
and the recorder (history, time to epsilon, trace).  Resuming continues the
same events in the same order with the same draws, so a run interrupted and
resumed any number of times ends with bitwise the result of one run without
interruption; that holds for any ``max_steps``/``max_gradients``/``max_time``
given on the resumed run (counted from the first run), while the problem,
the method and its options, the workers, their compute times, the seed,
epsilon, the step size and ``eval_every`` must be those of the file.

SIGUSR1 writes a checkpoint after the event it comes in and goes on; SIGTERM
writes one and stops the run (status ``interrupted``); ``checkpoint_every``
steps write one too, and the end of the run always does.

The MPI runtime (:class:`MPICheckpoint`) runs in real time, so its resumed
run continues the run rather than repeating it event for event: a checkpoint
ends a *session* (as FedBuff's do): the server stops every worker (the
gradients in flight are dropped), every rank writes its part collectively
(the server: the method, the recorder, the counts, the compute-time clock,
each busy worker's job step and point; each worker: its noise and compute-time
streams), and a new session restarts the busy workers' jobs at their points,
with the clock paused meanwhile.  A resumed run does the same from the file.
"""
import numpy as np

from ..core.checkpoint import Checkpointer
from ..core.random import restore_stream, stream_words
from ..core.signals import SignalFlags
from .jobs import Job
from .settings import inf_as_text
from .simulator import ALL_WORKERS

FORMAT = "mpiopt-asyncsgd-checkpoint-1"
MPI_FORMAT = "mpiopt-asyncsgd-mpi-checkpoint-1"
RECORDER = ("history", "time_to_epsilon", "last_k", "rows", "trace")


class _Requests:
    """What both runtimes' checkpoints share: the signals, ``checkpoint_every`` and the step resumed at.
    A subclass makes its Checkpointer first and then calls ``__init__``, which installs the handlers."""

    def __init__(self, settings):
        self.every, self.next_due, self.resumed_at = settings.checkpoint_every, None, 0
        self.signals = SignalFlags(True)

    def _schedule(self, k):
        self.next_due = k - k % self.every + self.every if self.every else None

    def _resumed(self, k):
        self.resumed_at = k
        self._schedule(k)

    def requested(self, method, recorder, forwarded=(0.0, 0.0)):
        """"stop" (a SIGTERM: the recorder is told), "checkpoint" (a SIGUSR1, or ``checkpoint_every`` steps
        since the last) or None; ``forwarded``: the (usr1, term) that other ranks reported."""
        usr1, term = np.maximum(self.signals.take(), forwarded)
        if term:
            recorder.stopped_by, recorder.interrupted = "signal", True
            return "stop"
        if usr1 or (self.next_due is not None and method.k >= self.next_due):
            self._schedule(method.k)
            return "checkpoint"
        return None

    def close(self):
        self.signals.restore()


class Checkpoint(_Requests):
    """The checkpoints of one simulated run at ``settings.checkpoint`` (on the simulating rank, ``comm``
    a communicator of that rank alone)."""

    def __init__(self, settings, comm, problem, method, timing, n_workers, epsilon):
        fingerprint = {"problem": problem.info(), "method": method.name,
                       "parameters": inf_as_text(method.parameters()), "n_workers": n_workers,
                       "tau": timing.compute.describe(), "seed": settings.seed, "epsilon": epsilon,
                       "eval_every": settings.eval_every}
        if timing.beyond_compute:  # the compute model alone: the files keep their fingerprint
            fingerprint["timing"] = timing.describe()
        self.checkpointer = Checkpointer(settings.checkpoint, comm, fingerprint, FORMAT, "async-sgd")
        super().__init__(settings)  # the handlers last: a file that cannot be written leaves none installed

    def resume(self, simulation, recorder):
        """Load the file into ``simulation`` and ``recorder`` when there is one; returns whether there was."""
        found = self.checkpointer.restore(lambda shared, mine, meta: _load(simulation, recorder, shared, meta))
        self._resumed(simulation.method.k if found else 0)
        return found

    def after_event(self, simulation, recorder):
        """Write a checkpoint when one is due or asked for; returns True when a SIGTERM stops the run."""
        request = self.requested(simulation.method, recorder)
        if request == "checkpoint":
            self.write(simulation, recorder)
        return request == "stop"

    def write(self, simulation, recorder):
        shared, meta = _state(simulation, recorder)
        self.checkpointer.write(shared, {}, meta)


def _method_and_recorder(method, recorder, points):
    """(arrays, meta) of the method, the recorder and ``points`` (step -> the point of that step)."""
    method_arrays, method_meta = method.state()
    arrays = {f"method__{key}": value for key, value in method_arrays.items()}
    arrays.update({f"point__{k}": x for k, x in points.items() if x is not None})
    return arrays, {"method": method_meta, "steps": method.k,
                    "recorder": {name: getattr(recorder, name) for name in RECORDER}}


def _load_method_and_recorder(method, recorder, arrays, meta):
    """Put back :func:`_method_and_recorder`'s part; returns its points (step -> point)."""
    method.load_state({key[8:]: value for key, value in arrays.items() if key.startswith("method__")},
                      meta["method"])
    for name in RECORDER:
        setattr(recorder, name, meta["recorder"][name])
    return {int(key[7:]): np.array(value) for key, value in arrays.items() if key.startswith("point__")}


def _load_counts(target, arrays, names, n):
    """Copy the per-worker arrays ``names`` into ``target``'s, in place, after checking their length."""
    for name in names:
        if arrays[name].shape != (n,):
            raise ValueError(f"it holds {arrays[name].size} workers' {name}, this run has {n} workers")
        getattr(target, name)[:] = arrays[name]


def _state(simulation, recorder):
    """(arrays, JSON meta) of the whole run."""
    simulation.queue.fold(simulation.cancelled)
    points = {simulation.common[1]: simulation.common[0]}
    points.update({k: x for x, k in simulation.own.values()})
    arrays, meta = _method_and_recorder(simulation.method, recorder, points)
    queue_arrays, meta["queue"] = _queue_state(simulation.queue)
    arrays.update({f"queue__{key}": value for key, value in queue_arrays.items()})
    own = sorted(simulation.own)
    arrays.update(own_workers=np.array(own, dtype=np.int64),
                  own_steps=np.array([simulation.own[w][1] for w in own], dtype=np.int64),
                  computed=simulation.computed, cancelled=simulation.cancelled,
                  noise=np.stack([stream_words(stream) for stream in simulation.noise]))
    if simulation.tau_rng is not None:
        arrays["tau_stream"] = stream_words(simulation.tau_rng)
    if simulation.method.uses_jobs or simulation.timing.time_varying:  # each busy worker's job (b, m, K, budget or NaN)
        busy = sorted(simulation.jobs)
        arrays["job_workers"] = np.array(busy, dtype=np.int64)
        arrays["job_values"] = np.array([simulation.jobs[w].as_header() + [simulation.done[w]] for w in busy],
                                        dtype=np.float64).reshape(len(busy), Job.HEADER_SIZE + 1)
    meta.update(now=list(simulation.now), gradients=simulation.gradients, common_step=simulation.common[1],
                common_none=simulation.common[0] is None)
    return arrays, meta


def _load(simulation, recorder, arrays, meta):
    n = simulation.method.n_workers
    _load_counts(simulation, arrays, ("computed", "cancelled"), n)
    points = _load_method_and_recorder(simulation.method, recorder, arrays, meta)
    _queue_load(simulation.queue, {key[7:]: value for key, value in arrays.items() if key.startswith("queue__")},
                meta["queue"])
    # in place: the simulation's assign() holds these objects
    simulation.common[:] = [None if meta["common_none"] else points[meta["common_step"]], meta["common_step"]]
    simulation.own.clear()
    simulation.own.update({int(w): (points[int(k)], int(k)) for w, k in zip(arrays["own_workers"],
                                                                          arrays["own_steps"])})
    simulation.now, simulation.gradients = tuple(float(t) for t in meta["now"]), int(meta["gradients"])
    for stream, words in zip(simulation.noise, arrays["noise"]):
        restore_stream(stream, words)
    if simulation.tau_rng is not None:
        restore_stream(simulation.tau_rng, arrays["tau_stream"])
    if simulation.method.uses_jobs or simulation.timing.time_varying:
        simulation.jobs.clear()
        simulation.done.clear()
        for w, values in zip(arrays["job_workers"], arrays["job_values"]):
            simulation.jobs[int(w)], simulation.done[int(w)] = Job.from_header(values[:Job.HEADER_SIZE]), \
                int(values[Job.HEADER_SIZE])
def _queue_state(queue):
    """(arrays, meta) of an :class:`~.simulator.EventQueue` (its fixed times are rebuilt from the run)."""
    arrays = {"job": queue.job, "busy": queue.busy, "low": queue.low,
              "heap_hi": np.array([entry[0] for entry in queue.heap], dtype=np.float64),
              "heap_worker": np.array([entry[1] for entry in queue.heap], dtype=np.int64),
              "heap_job": np.array([entry[2] for entry in queue.heap], dtype=np.int64)}
    meta = {"bulk": queue.bulk_start is not None}
    if queue.bulk_start is not None:
        rest = queue.bulk_rest
        kind = "none" if rest is None else "all" if rest is ALL_WORKERS else "int" if np.isscalar(rest) else "array"
        meta.update(start=list(queue.bulk_start), fixed=queue.bulk_fixed, next=int(queue.bulk_next), rest=kind,
                    rest_int=int(rest) if kind == "int" else None)
        arrays.update(bulk_jobs=queue.bulk_jobs(), bulk_order=queue.bulk_order, bulk_hi=queue.bulk_hi)
        if not queue.bulk_fixed:
            arrays.update(bulk_taus=queue.bulk_taus, bulk_times=queue.bulk_times)
        if kind == "array":
            arrays["bulk_rest"] = rest
    return arrays, meta


def _queue_load(queue, arrays, meta):
    n = queue.job.size
    for name, dtype in (("job", np.int64), ("busy", bool), ("low", np.float64)):
        if arrays[name].shape != (n,):
            raise ValueError(f"its event queue has {arrays[name].size} workers, this run has {n}")
        setattr(queue, name, np.array(arrays[name], dtype=dtype))
    queue.heap = [(float(hi), int(worker), int(job)) for hi, worker, job in
                  zip(arrays["heap_hi"], arrays["heap_worker"], arrays["heap_job"])]
    queue.touched, queue.all_started = set(), False
    if not meta["bulk"]:
        queue.bulk_start = None
        return
    queue.bulk_start, queue.bulk_fixed = tuple(float(t) for t in meta["start"]), bool(meta["fixed"])
    queue.load_bulk_jobs(arrays["bulk_jobs"])
    queue.bulk_next = int(meta["next"])
    queue.bulk_order, queue.bulk_hi = np.array(arrays["bulk_order"]), np.array(arrays["bulk_hi"])
    if queue.bulk_fixed:
        queue.bulk_taus, queue.bulk_times = queue.fixed_taus, None
    else:
        queue.bulk_taus, queue.bulk_times = np.array(arrays["bulk_taus"]), np.array(arrays["bulk_times"])
    queue.bulk_rest = {"none": None, "all": ALL_WORKERS, "int": meta["rest_int"]}.get(meta["rest"]) \
        if meta["rest"] != "array" else np.array(arrays["bulk_rest"])


class MPICheckpoint(_Requests):
    """The checkpoints of a run on the mpi runtime at ``settings.checkpoint``, written between sessions;
    every method but :meth:`requested` is collective over ``comm`` (the run's communicator)."""

    def __init__(self, settings, comm, fingerprint):
        self.checkpointer = Checkpointer(settings.checkpoint, comm, fingerprint, MPI_FORMAT, "async-sgd")
        super().__init__(settings)  # the handlers last, as above

    def resume_server(self, server):
        """Load the file into ``server`` (a ``_Server``) when there is one."""
        self.checkpointer.restore(lambda shared, mine, meta: self._load_server(server, shared, meta))
        self._resumed(server.method.k)

    def _load_server(self, server, arrays, meta):
        _load_counts(server, arrays, ("computed", "cancelled", "busy"), server.busy.size)
        points = _load_method_and_recorder(server.method, server.recorder, arrays, meta)
        server.points = {int(w): (int(k), points[int(k)]) for w, k in zip(arrays["busy_workers"],
                                                                        arrays["busy_steps"])}
        server.gradients, server.started = int(meta["gradients"]), True
        server.resume_clock(float(meta["now"]))

    def write_server(self, server, now):
        busy = [int(w) for w in np.flatnonzero(server.busy)]
        arrays, meta = _method_and_recorder(server.method, server.recorder, dict(server.points[w] for w in busy))
        arrays.update(computed=server.computed, cancelled=server.cancelled, busy=server.busy,
                      busy_workers=np.array(busy, dtype=np.int64),
                      busy_steps=np.array([server.points[w][0] for w in busy], dtype=np.int64))
        meta.update(gradients=server.gradients, now=float(now))
        self.checkpointer.write(arrays, {}, meta)

    def resume_worker(self, streams):
        def load(shared, mine, meta):
            for stream, name in zip(streams, ("noise", "tau")):
                restore_stream(stream, mine[name])
        self.checkpointer.restore(load)

    def write_worker(self, streams):
        self.checkpointer.write({}, {"noise": stream_words(streams[0]), "tau": stream_words(streams[1])}, {})
