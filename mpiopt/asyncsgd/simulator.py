"""The discrete-event runtime: a virtual clock and a heap of finishing times, thousands of workers on one core.

Each worker is a finishing time and the point it computes at.  The next event
is the earliest finishing time; the simulator computes that worker's gradient
(at the point it started from, drawing from the worker's own noise stream),
hands it to the method, advances the clock and starts whoever the method
assigns.  Time is virtual, in compute-time units, and communication is free,
as in the time model of the papers.

Events: a heap of (time, worker, job) with lazy cancellation: a worker's job
number grows whenever it is (re)started, so an entry of an older job is
skipped when it comes up.  Ties go to the lower-numbered worker.  When every
worker restarts at once (a synchronous step, Rennala's restart) the simulator
does not push n entries: it keeps the new finishing times as one array
consumed in sorted order (fixed times: the workers' order is fixed, so this
is O(1); random times: a partial sort of the next few, O(n) vectorized).

Random streams: worker w's gradient noise is ``random_stream(seed,
"asyncsgd-gradient", w)``, drawn only when a gradient is completed (a
cancelled one draws nothing), exactly as on MPI; random compute times come
from one stream ``random_stream(seed, "asyncsgd-tau")`` in event order (MPI
workers draw from their own streams, so random times agree in distribution,
fixed ones exactly).
"""
import heapq
import math

import numpy as np

from ..core.random import random_stream
from .base import ALL

ALL_WORKERS = "all workers"  # the bulk's remainder before its first partial sort
CHUNK = 64  # the bulk's next finishing times sorted at a time (random compute times)


class EventQueue:
    """Finishing times of the workers' current jobs: a heap plus one bulk of simultaneous restarts."""

    def __init__(self, n_workers, fixed_order=None):
        self.job = np.zeros(n_workers, dtype=np.int64)
        self.busy = np.zeros(n_workers, dtype=bool)
        self.heap = []
        self.fixed_order = fixed_order      # argsort of fixed compute times, or None
        self.bulk_times = self.bulk_jobs = None
        self.bulk_order, self.bulk_next, self.bulk_rest = None, 0, None

    def start(self, worker, finish):
        """(Re)start one worker; returns True when it was busy (its job is cancelled)."""
        busy = bool(self.busy[worker])
        self.busy[worker] = True
        self.job[worker] += 1
        heapq.heappush(self.heap, (finish, worker, int(self.job[worker])))
        return busy

    def start_all(self, finishes):
        """Restart every worker, finishing at ``finishes``; returns how many were busy."""
        busy = int(np.count_nonzero(self.busy))
        self.busy[:] = True
        self.job += 1
        self.heap = []
        self.bulk_times, self.bulk_jobs = finishes, self.job.copy()
        if self.fixed_order is not None:
            self.bulk_order, self.bulk_rest = self.fixed_order, None
        else:
            self.bulk_order, self.bulk_rest = np.empty(0, dtype=np.int64), ALL_WORKERS
        self.bulk_next = 0
        return busy

    def _refill(self):
        rest = self.bulk_rest
        if rest is ALL_WORKERS:
            rest, times = np.arange(self.bulk_times.size), self.bulk_times
        elif rest is None or rest.size == 0:
            return False
        else:
            times = self.bulk_times[rest]
        if rest.size > CHUNK:
            # every time up to the CHUNK-th smallest, ties included, so that ties still go to the lower worker
            kth = times[np.argpartition(times, CHUNK - 1)[CHUNK - 1]]
            first = times <= kth
            chosen, self.bulk_rest = rest[first], rest[~first]
        else:
            chosen, self.bulk_rest = rest, None
        self.bulk_order = chosen[np.lexsort((chosen, self.bulk_times[chosen]))]
        self.bulk_next = 0
        return True

    def _bulk_head(self):
        """(time, worker) of the bulk's earliest valid entry, or None."""
        while True:
            if self.bulk_times is None:
                return None
            if self.bulk_next >= len(self.bulk_order) and not self._refill():
                self.bulk_times = None
                return None
            worker = int(self.bulk_order[self.bulk_next])
            if self.job[worker] == self.bulk_jobs[worker]:
                return float(self.bulk_times[worker]), worker
            self.bulk_next += 1

    def _heap_head(self):
        heap = self.heap
        while heap and heap[0][2] != self.job[heap[0][1]]:
            heapq.heappop(heap)
        return (heap[0][0], heap[0][1]) if heap else None

    def peek(self):
        """(time, worker) of the next event, or None when no worker is busy."""
        bulk, heap = self._bulk_head(), self._heap_head()
        if bulk is None:
            return heap
        if heap is None:
            return bulk
        return min(bulk, heap)

    def pop(self):
        """Remove and return the next event's (time, worker); the worker is then idle."""
        event = self.peek()
        bulk = self._bulk_head()
        if bulk is not None and bulk == event:
            self.bulk_next += 1
        else:
            heapq.heappop(self.heap)
        self.job[event[1]] += 1  # its finished job is no longer pending anywhere
        self.busy[event[1]] = False
        return event

    def pending(self, worker):
        return bool(self.busy[worker])


def simulate(problem, method, tau_model, settings, recorder):
    """Run ``method`` on ``problem`` with ``method.n_workers`` virtual workers; returns the run's counts.

    Returns (end time, gradients received, computed per worker, cancelled per worker).
    """
    n, seed = method.n_workers, settings.seed
    numbers = np.arange(1, n + 1)
    fixed = tau_model.fixed
    means = tau_model.mean(numbers) if fixed else None
    queue = EventQueue(n, np.argsort(means, kind="stable") if fixed else None)
    tau_rng = None if fixed else random_stream(seed, "asyncsgd-tau")
    draw_all = tau_model.sampler(numbers)
    noise = [random_stream(seed, "asyncsgd-gradient", w) for w in range(n)]
    # The point and step each worker computes at: those of the last restart of all workers, unless the
    # worker was started on its own since (``own``), which keeps a restart of all workers O(1) in Python.
    common = [None, 0]
    own = {}
    computed, cancelled = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    now, gradients = 0.0, 0

    def assign(plan):
        if plan is ALL:
            cancelled[queue.busy] += 1
            queue.start_all(now + draw_all(tau_rng))
            common[0], common[1] = method.x, method.k
            own.clear()
            return
        for worker in plan:
            tau = means[worker] if fixed else float(tau_model.draw(numbers[worker:worker + 1], tau_rng)[0])
            if queue.start(worker, now + tau):
                cancelled[worker] += 1
            own[worker] = (method.x, method.k)

    assign(method.start())
    recorder.evaluate(now, gradients, force=True)
    while not recorder.stop(now, gradients):
        event = queue.peek()
        if event is None:
            raise RuntimeError(f"{method.name}: no worker is computing and the method assigned none")
        if settings.max_time is not None and event[0] > settings.max_time:
            now = float(settings.max_time)
            recorder.status = "max_time"
            break
        now, worker = queue.pop()
        point, k_at = own.pop(worker, None) or common
        grad = problem.stochastic_grad(point, noise[worker])
        computed[worker] += 1
        gradients += 1
        accepted_before = int(method.accepted[worker])
        assign(method.arrive(worker, grad, k_at))
        recorder.arrival(now, worker, k_at, method.accepted[worker] > accepted_before)
        recorder.evaluate(now, gradients)
    recorder.evaluate(now, gradients, force=True)
    return now, gradients, computed, cancelled
