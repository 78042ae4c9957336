"""Checkpoints of a simulated run: everything the simulator and the method hold, resumed bit for bit.

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
steps write one too, and the end of the run always does.  The MPI runtime
runs in real time and has no checkpoint (its settings refuse one).
"""
import numpy as np

from ..core.checkpoint import Checkpointer
from ..core.signals import SignalFlags
from .simulator import ALL_WORKERS

FORMAT = "mpiopt-asyncsgd-checkpoint-1"
RECORDER = ("history", "time_to_epsilon", "last_k", "rows", "trace")


class Checkpoint:
    """The checkpoints of one simulated run at ``settings.checkpoint`` (on the simulating rank, ``comm``
    a communicator of that rank alone)."""

    def __init__(self, settings, comm, problem, method, tau_model, n_workers, epsilon):
        fingerprint = {"problem": problem.info(), "method": method.name, "parameters": _plain(method.parameters()),
                       "n_workers": n_workers, "tau": tau_model.describe(), "seed": settings.seed,
                       "epsilon": epsilon, "eval_every": settings.eval_every}
        self.checkpointer = Checkpointer(settings.checkpoint, comm, fingerprint, FORMAT, "async-sgd")
        self.every, self.next_due = settings.checkpoint_every, None
        self.signals, self.resumed_at = SignalFlags(True), 0

    def resume(self, simulation, recorder):
        """Load the file into ``simulation`` and ``recorder`` when there is one; returns whether there was."""
        found = self.checkpointer.restore(lambda shared, mine, meta: _load(simulation, recorder, shared, meta))
        self.resumed_at = simulation.method.k if found else 0
        self._schedule(simulation.method.k)
        return found

    def _schedule(self, k):
        self.next_due = k - k % self.every + self.every if self.every else None

    def after_event(self, simulation, recorder):
        """Write a checkpoint when one is due or asked for; returns True when a SIGTERM stops the run."""
        usr1, term = self.signals.take()
        k = simulation.method.k
        if term:
            recorder.stopped_by, recorder.interrupted = "signal", True
            return True
        if usr1 or (self.next_due is not None and k >= self.next_due):
            self.write(simulation, recorder)
            self._schedule(k)
        return False

    def write(self, simulation, recorder):
        shared, meta = _state(simulation, recorder)
        self.checkpointer.write(shared, {}, meta)

    def close(self):
        self.signals.restore()


def _plain(value):
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return "inf" if isinstance(value, float) and value == float("inf") else value


def _state(simulation, recorder):
    """(arrays, JSON meta) of the whole run."""
    method, queue = simulation.method, simulation.queue
    arrays, meta = {}, {}
    method_arrays, meta["method"] = method.state()
    arrays.update({f"method__{key}": value for key, value in method_arrays.items()})
    queue_arrays, meta["queue"] = _queue_state(queue)
    arrays.update({f"queue__{key}": value for key, value in queue_arrays.items()})
    points = {simulation.common[1]: simulation.common[0]}
    points.update({k: x for x, k in simulation.own.values()})
    arrays.update({f"point__{k}": x for k, x in points.items() if x is not None})
    arrays["own_workers"] = np.array(sorted(simulation.own), dtype=np.int64)
    arrays["own_steps"] = np.array([simulation.own[w][1] for w in sorted(simulation.own)], dtype=np.int64)
    arrays["computed"], arrays["cancelled"] = simulation.computed, simulation.cancelled
    meta.update(now=list(simulation.now), gradients=simulation.gradients, common_step=simulation.common[1],
                common_none=simulation.common[0] is None,
                noise=[stream.bit_generator.state for stream in simulation.noise],
                tau_stream=None if simulation.tau_rng is None else simulation.tau_rng.bit_generator.state,
                recorder={name: getattr(recorder, name) for name in RECORDER}, steps=method.k)
    return arrays, meta


def _load(simulation, recorder, arrays, meta):
    method, n = simulation.method, simulation.method.n_workers
    if len(meta["noise"]) != n:
        raise ValueError(f"it holds {len(meta['noise'])} workers' noise streams, this run has {n} workers")
    method.load_state({key[8:]: value for key, value in arrays.items() if key.startswith("method__")},
                      meta["method"])
    _queue_load(simulation.queue, {key[7:]: value for key, value in arrays.items() if key.startswith("queue__")},
                meta["queue"])
    points = {int(key[7:]): np.array(value) for key, value in arrays.items() if key.startswith("point__")}
    # in place: the simulation's assign() holds these objects
    simulation.common[:] = [None if meta["common_none"] else points[meta["common_step"]], meta["common_step"]]
    simulation.own.clear()
    simulation.own.update({int(w): (points[int(k)], int(k)) for w, k in zip(arrays["own_workers"],
                                                                          arrays["own_steps"])})
    for name in ("computed", "cancelled"):
        if arrays[name].shape != (n,):
            raise ValueError(f"it counts {arrays[name].size} workers, this run has {n}")
        getattr(simulation, name)[:] = arrays[name]
    simulation.now, simulation.gradients = tuple(float(t) for t in meta["now"]), int(meta["gradients"])
    for stream, state in zip(simulation.noise, meta["noise"]):
        stream.bit_generator.state = state
    if simulation.tau_rng is not None:
        simulation.tau_rng.bit_generator.state = meta["tau_stream"]
    for name in RECORDER:
        setattr(recorder, name, meta["recorder"][name])


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
        arrays.update(bulk_jobs=queue.bulk_jobs, bulk_order=queue.bulk_order, bulk_hi=queue.bulk_hi)
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
    if not meta["bulk"]:
        queue.bulk_start = None
        return
    queue.bulk_start, queue.bulk_fixed = tuple(float(t) for t in meta["start"]), bool(meta["fixed"])
    queue.bulk_jobs, queue.bulk_next = np.array(arrays["bulk_jobs"]), int(meta["next"])
    queue.bulk_order, queue.bulk_hi = np.array(arrays["bulk_order"]), np.array(arrays["bulk_hi"])
    if queue.bulk_fixed:
        queue.bulk_taus, queue.bulk_times = queue.fixed_taus, None
    else:
        queue.bulk_taus, queue.bulk_times = np.array(arrays["bulk_taus"]), np.array(arrays["bulk_times"])
    queue.bulk_rest = {"none": None, "all": ALL_WORKERS, "int": meta["rest_int"]}.get(meta["rest"]) \
        if meta["rest"] != "array" else np.array(arrays["bulk_rest"])
