"""The discrete-event runtime: a virtual clock and a heap of finishing times, thousands of workers on one core.

Each worker is a finishing time and the point it computes at.  The next event
is the earliest finishing time; the simulator computes that worker's gradient
(at the point it started from, drawing from the worker's own noise stream),
hands it to the method, advances the clock and starts whoever the method
assigns (the loop is :func:`.engine.drive`, shared with the MPI runtime; this
module is its virtual-time executor).  Time is virtual, in compute-time units; how long a job takes is the
timing model's (:mod:`.timing`: compute times and, when given, the upload and
download time of each coordinate).  A method with jobs of its own
(``Method.uses_jobs``) has each started worker's job priced on its own and
pushed on the heap; the result (b gradients summed, then compressed) is
computed when the job ends, by :mod:`.jobs`, as an MPI worker computes it.

Time: a worker's finishing time is the exact sum of the compute times that led
to it (its start, itself exact, plus its own time), kept as a pair of floats
(hi, lo) with hi the float nearest the exact sum (double-double addition,
exact while a time spans fewer than about 100 bits from the finest bit of the
times added, so in practice always).  Events are served in the order of
(hi, worker): equal times go to the lower-numbered worker, also when they
became equal only by rounding (8 + 3.0000000000000004 and 8 + 3.0 are both
11.0), and exactly equal sums are equal however they were reached (ten
gradients of 0.1 end when five of 0.2 do).  An event whose time hi is at most
``max_time`` counts, for every worker alike; the first one after it ends the
run at ``max_time``.

Events: a heap of (hi, worker, job) with lazy cancellation: a worker's job
number grows whenever it is (re)started, so an entry of an older job is
skipped when it comes up.  When every worker restarts at once (a synchronous
step, a restart after every step) the simulator does not push n entries: it keeps the
start and the workers' times as one bulk consumed in order, a chunk at a time
(fixed times: the workers sorted by time once, each chunk's finishing times
computed when it is reached, so a restart costs O(chunk); random times: a
partial sort of the next few, O(n) vectorized); a chunk always holds every
worker tied with its last one, sorted by (hi, worker).

Gradients: where a worker's gradient is grad f(x) plus noise (the problem's
``gradient_noise``: the Gaussian-noise problems), grad f(x) is computed once per
point (:class:`GradientMemo`): the evaluation's after a step is the one the
workers started there use, and a point that many workers share (a synchronous
step's) has it computed once; the bits are those of ``worker_grad``.

Random streams: worker w's gradient noise is ``random_stream(seed,
"asyncsgd-gradient", w)``, drawn only when a gradient is completed (a
cancelled one draws nothing), exactly as on MPI; random compute times come
from one stream ``random_stream(seed, "asyncsgd-tau")`` in event order (MPI
workers draw from their own streams, so random times agree in distribution,
fixed ones exactly).
"""
import heapq

import numpy as np

from ..core.random import random_stream
from . import jobs as job_results
from .base import ALL
from .engine import TIME_UP, drive, start_plan
from .timing import Timing

ALL_WORKERS = "all workers"  # the bulk's remainder before its first partial sort
CHUNK = 64  # the bulk's next finishing times sorted at a time
FIRST_CHUNK = 2  # fixed times: a bulk's first chunk, doubling up to CHUNK (a restart after each event is cheap)
ZERO = (0.0, 0.0)
SCALAR_CHUNK = 8  # fixed times: a bulk's chunk of at most this many is computed in Python numbers
NO_WORKERS, NO_TIMES = np.empty(0, dtype=np.int64), np.empty(0)  # an empty chunk (never written to)
MEMO_FLOATS = 2 ** 21  # the gradient memo's size bound, in floats (16 MB)


def add_time(start, tau):
    """The exact ``start + tau`` as (hi, lo): ``start`` a pair (hi, lo), ``tau`` a float or an array of them.

    Knuth's TwoSum of hi + tau (its rounding error is exact), then lo added to that error (exact while the
    sum's bits span under about 106), renormalized so that hi is the float nearest the sum."""
    hi, lo = start
    total = hi + tau
    back = total - hi
    error = (hi - (total - back)) + (tau - back) + lo
    rounded = total + error
    return rounded, error - (rounded - total)


def time_of(start, tau):
    """The float nearest the exact ``start + tau`` (the hi of :func:`add_time`); vectorized over ``tau``."""
    hi, lo = start
    if lo == 0:
        return hi + tau  # one rounding of the exact sum
    if np.ndim(tau) == 0:
        return add_time(start, tau)[0]
    total = hi + tau                      # add_time's steps, in place on two arrays
    back = total - hi
    error = np.subtract(hi, total - back)
    error += np.subtract(tau, back, out=back)
    error += lo
    total += error
    return total


class EventQueue:
    """Finishing times of the workers' current jobs: a heap plus one bulk of simultaneous restarts.

    ``fixed_taus``: every worker's fixed compute time (the bulk then uses them, sorted once), or None."""

    def __init__(self, n_workers, fixed_taus=None):
        self.job = np.zeros(n_workers, dtype=np.int64)
        self.busy = np.zeros(n_workers, dtype=bool)
        self.low = np.zeros(n_workers)          # lo of each worker's finishing time on the heap
        self.heap = []
        self.fixed_taus = None if fixed_taus is None else np.asarray(fixed_taus, dtype=np.float64)
        if self.fixed_taus is not None:
            self.by_time = np.lexsort((np.arange(n_workers), self.fixed_taus))   # (time, worker) order
            sorted_taus = self.fixed_taus[self.by_time]
            ends = np.append(np.flatnonzero(np.diff(sorted_taus)) + 1, n_workers)
            self.sorted_taus = sorted_taus
            self.run_end = ends[np.searchsorted(ends, np.arange(n_workers), side="right")]  # end of equal times
            # the same as Python numbers, for the small first chunks of a bulk (numpy costs more on a few)
            self.by_time_list, self.sorted_list = self.by_time.tolist(), sorted_taus.tolist()
            self.run_end_list = self.run_end.tolist()
        self.bulk_start, self.bulk_fixed, self.bulk_chunk = None, False, FIRST_CHUNK
        self.bulk_taus = self.bulk_times = None
        # Workers started, finished or cancelled one by one since the last restart of all: the others are
        # still in the bulk, busy.  A restart then counts its cancellations lazily, O(touched) not O(n):
        # worker w was busy at ``restarts - spared[w]`` of the restarts since the last ``fold``.
        self.touched, self.all_started = set(), False
        self.restarts, self.spared = 0, np.zeros(n_workers, dtype=np.int64)
        self.bulk_order, self.bulk_hi, self.bulk_next, self.bulk_rest = None, None, 0, None

    def start(self, worker, at, tau):
        """(Re)start one worker at time ``at`` (hi, lo) for ``tau``; returns True when it was busy (its job
        is cancelled)."""
        busy = bool(self.busy[worker])
        self.busy[worker] = True
        self.job[worker] += 1
        self.touched.add(worker)
        hi, self.low[worker] = add_time(at, tau)
        heapq.heappush(self.heap, (hi, worker, int(self.job[worker])))
        return busy

    def start_all(self, at, taus=None, cancelled=None):
        """Restart every worker at time ``at`` (hi, lo), for ``taus`` (None: the fixed times); returns how
        many were busy, and counts each busy one's cancellation in ``cancelled`` (lazily: see :meth:`fold`)."""
        n = self.busy.size
        if not self.all_started or 8 * len(self.touched) > n:  # a vectorized count is as cheap
            busy = int(np.count_nonzero(self.busy))
            if cancelled is not None:
                cancelled += self.busy
            self.busy.fill(True)
        else:  # the workers not touched since the last restart are busy in its bulk
            idle = [w for w in self.touched if not self.busy[w]]
            busy = n - len(idle)
            if cancelled is not None:
                self.restarts += 1
                for worker in idle:
                    self.spared[worker] += 1
            for worker in idle:
                self.busy[worker] = True
        self.all_started, self.touched = True, set()
        self.heap = []
        self.bulk_start = at
        self.bulk_fixed = taus is None
        self.bulk_taus = self.fixed_taus if taus is None else np.asarray(taus, dtype=np.float64)
        self.bulk_order, self.bulk_hi, self.bulk_next = NO_WORKERS, NO_TIMES, 0
        if taus is None:
            self.bulk_rest = 0  # the next position in the workers sorted by time
            self.bulk_chunk = FIRST_CHUNK
        else:
            self.bulk_times, self.bulk_rest = time_of(at, self.bulk_taus), ALL_WORKERS
        return busy

    def _refill(self):
        """The next chunk of the bulk in (time, worker) order; False when the bulk is used up."""
        chosen = self._next_fixed() if self.bulk_fixed else self._next_random()
        if chosen is None:
            return False
        self.bulk_order, self.bulk_hi = chosen
        self.bulk_next = 0
        return True

    def _next_fixed(self):
        # the sorted times give non-decreasing finishing times; a chunk takes every worker tied with its last
        first, n = self.bulk_rest, self.sorted_taus.size
        if first >= n:
            return None
        end = self.run_end_list[min(first + self.bulk_chunk, n) - 1]
        self.bulk_chunk = min(2 * self.bulk_chunk, CHUNK)  # a restart's first events come cheap
        if end - first <= SCALAR_CHUNK:
            chosen = self._next_fixed_scalar(first, end)
            if chosen is not None:
                return chosen
        return self._next_fixed_array(first, end)

    def _next_fixed_scalar(self, first, end):
        """:meth:`_next_fixed_array`'s chunk as lists of Python numbers (the same float operations), or None
        when its ties make it longer than SCALAR_CHUNK."""
        start, taus, run_end, n = self.bulk_start, self.sorted_list, self.run_end_list, len(self.sorted_list)
        hi, lo = start
        times = [hi + tau for tau in taus[first:end]] if lo == 0 else [add_time(start, tau)[0]
                                                                        for tau in taus[first:end]]
        while end < n and time_of(start, taus[end]) == times[-1]:
            more = run_end[end]
            if more - first > SCALAR_CHUNK:
                return None
            times += [time_of(start, tau) for tau in taus[end:more]]
            end = more
        self.bulk_rest = end
        workers = self.by_time_list[first:end]
        if run_end[first] == end or all(workers[i] < workers[i + 1] or times[i] != times[i + 1]
                                        for i in range(len(workers) - 1)):
            return workers, times
        pairs = sorted(zip(times, workers))
        return [w for _, w in pairs], [t for t, _ in pairs]

    def _next_fixed_array(self, first, end):
        n = self.sorted_taus.size
        times = time_of(self.bulk_start, self.sorted_taus[first:end])
        while end < n and time_of(self.bulk_start, float(self.sorted_taus[end])) == times[-1]:
            more = int(self.run_end[end])
            times = np.concatenate([times, time_of(self.bulk_start, self.sorted_taus[end:more])])
            end = more
        self.bulk_rest = end
        workers = self.by_time[first:end]
        if self.run_end[first] == end:
            return workers, times  # one run of equal times: already in worker order
        tied = times[1:] == times[:-1]  # the times are sorted; only ties can be out of worker order
        if not tied.any() or np.all(workers[1:][tied] > workers[:-1][tied]):
            return workers, times
        order = np.lexsort((workers, times))
        return workers[order], times[order]

    def _next_random(self):
        rest = self.bulk_rest
        if rest is ALL_WORKERS:
            rest, times = np.arange(self.bulk_times.size), self.bulk_times
        elif rest is None or rest.size == 0:
            return None
        else:
            times = self.bulk_times[rest]
        if rest.size > CHUNK:
            # every time up to the CHUNK-th smallest, ties included, so that ties still go to the lower worker
            kth = times[np.argpartition(times, CHUNK - 1)[CHUNK - 1]]
            first = times <= kth
            chosen, self.bulk_rest = rest[first], rest[~first]
        else:
            chosen, self.bulk_rest = rest, None
        chosen = chosen[np.lexsort((chosen, self.bulk_times[chosen]))]
        return chosen, self.bulk_times[chosen]

    def _bulk_head(self):
        """(hi, worker) of the bulk's earliest valid entry, or None."""
        while True:
            if self.bulk_start is None:
                return None
            if self.bulk_next >= len(self.bulk_order) and not self._refill():
                self.bulk_start = None
                return None
            worker = int(self.bulk_order[self.bulk_next])
            if worker not in self.touched:
                return float(self.bulk_hi[self.bulk_next]), worker
            self.bulk_next += 1

    def _heap_head(self):
        heap = self.heap
        while heap and heap[0][2] != self.job[heap[0][1]]:
            heapq.heappop(heap)
        return (heap[0][0], heap[0][1]) if heap else None

    def peek(self):
        """(hi, worker) of the next event, or None when no worker is busy."""
        bulk, heap = self._bulk_head(), self._heap_head()
        if bulk is None:
            return heap
        if heap is None:
            return bulk
        return min(bulk, heap)

    def pop(self, until=None):
        """Remove the next event; returns its exact time (hi, lo) and its worker, who is then idle.  With
        ``until``, an event after it is left in place and TIME_UP returned; None when no worker is busy."""
        bulk, heap = self._bulk_head(), self._heap_head()  # the heads once: pop runs at every event
        if bulk is None and heap is None:
            return None
        from_bulk = heap is None or (bulk is not None and bulk <= heap)
        hi, worker = bulk if from_bulk else heap
        if until is not None and hi > until:
            return TIME_UP
        if from_bulk:
            self.bulk_next += 1
            at = add_time(self.bulk_start, float(self.bulk_taus[worker]))
        else:
            heapq.heappop(self.heap)
            at = (hi, float(self.low[worker]))
        self.job[worker] += 1  # its finished job is no longer pending anywhere
        self.busy[worker] = False
        self.touched.add(worker)
        return at, worker

    def pending(self, worker):
        return bool(self.busy[worker])

    def cancel(self, worker):
        """Cancel ``worker``'s job, if any, leaving it idle; returns True when it was busy."""
        busy = bool(self.busy[worker])
        self.busy[worker] = False
        self.job[worker] += 1
        self.touched.add(worker)
        return busy

    def fold(self, cancelled):
        """Add the restarts' lazily counted cancellations into ``cancelled`` (before it is read or saved)."""
        if self.restarts:
            cancelled += self.restarts - self.spared
            self.restarts = 0
            self.spared[:] = 0

    def bulk_jobs(self):
        """The job numbers the bulk's entries carry (a checkpoint's form): a touched worker's differs."""
        jobs = self.job.copy()
        jobs[list(self.touched)] -= 1
        return jobs

    def load_bulk_jobs(self, jobs):
        self.touched = {int(w) for w in np.flatnonzero(np.asarray(jobs) != self.job)}
        self.all_started = True


class WorkerStreams:
    """Worker w's gradient noise stream ``random_stream(seed, "asyncsgd-gradient", w)``, made when first
    used (making 10,000 takes 0.4 s, and a method may use a few workers only); iterating makes them all."""

    def __init__(self, seed, n_workers):
        self.seed, self.streams = seed, [None] * n_workers

    def __getitem__(self, worker):
        stream = self.streams[worker]
        if stream is None:
            stream = self.streams[worker] = random_stream(self.seed, "asyncsgd-gradient", worker)
        return stream

    def __len__(self):
        return len(self.streams)

    def __iter__(self):
        return (self[worker] for worker in range(len(self.streams)))


class GradientMemo:
    """Worker gradients ``add_noise(grad f(x), rng)`` (a problem's ``gradient_noise``) with grad f(x) computed
    once per point: the evaluation's after each step (``keep``, the recorder's hook) or the first worker's
    at a point that many share; the same bits as ``worker_grad``, since grad f(x) is the same whoever
    computes it.  An entry holds its point, so that an id is never taken for another point's."""

    def __init__(self, problem, add_noise):
        self.grad, self.add_noise, self.kept = problem.grad, add_noise, {}
        self.limit = max(16, MEMO_FLOATS // max(problem.dim, 1))
        # id(x) -> the workers started on their own at x whose gradient has not come: the last one's
        # gradient takes the kept one in place (a cancelled worker's count stays: its point is then kept
        # until the bound clears the memo, which costs a recomputation, never a wrong bit)
        self.users = {}

    def started(self, x):
        """A worker was started on its own at ``x``."""
        users = self.users
        users[id(x)] = users.get(id(x), 0) + 1

    def keep(self, x, g):
        if len(self.kept) >= self.limit:  # points nobody computes at any more (cancelled workers')
            self.kept.clear()
            self.users.clear()
        self.kept[id(x)] = (x, g)

    def drop(self, x):
        self.kept.pop(id(x), None)

    def gradient(self, x, rng, shared):
        """The gradient at ``x`` with ``rng``'s noise; ``shared``: other workers compute at ``x`` too."""
        if not shared:
            key = id(x)
            others = self.users.pop(key, 1) - 1
            if others > 0:
                self.users[key] = others
                shared = True
        entry = self.kept.get(id(x)) if shared else self.kept.pop(id(x), None)
        if entry is None or entry[0] is not x:
            g = self.grad(x)
            if not shared:
                return self.add_noise(g, rng)
            self.keep(x, g)
        else:
            g = entry[1]
            if not shared:
                return self.add_noise(g, rng)  # its last use: the noise goes into it
        return self.add_noise(g.copy(), rng)


class Simulation:
    """The state of one simulated run besides the method's: the event queue, the clock, the workers' points,
    noise streams and counts (what a checkpoint holds, :mod:`.checkpoint`)."""

    def __init__(self, problem, method, timing, settings):
        n, seed = method.n_workers, settings.seed
        tau_model = timing.plain_model()
        self.problem, self.method, self.tau_model, self.settings = problem, method, tau_model, settings
        self.timing, self.jobs = timing, {}  # with a method's own jobs: worker -> its current Job
        self.done = {}  # worker -> how many of its job's gradients will finish (a job of trials: not all)
        self.numbers = np.arange(1, n + 1)
        self.fixed = tau_model.fixed
        self.means = tau_model.mean(self.numbers) if self.fixed else None
        self.queue = EventQueue(n, self.means)
        self.tau_rng = None if self.fixed else random_stream(seed, "asyncsgd-tau")
        self.draw_all = tau_model.sampler(self.numbers)
        self.noise = WorkerStreams(seed, n)
        # The point and step each worker computes at: those of the last restart of all workers, unless the
        # worker was started on its own since (``own``), which keeps a restart of all workers O(1) in Python.
        self.common = [None, 0]
        self.own = {}
        self.computed, self.cancelled = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        self.now, self.gradients = ZERO, 0
        self.plain = not (method.uses_jobs or timing.time_varying)  # every job one plain gradient
        add_noise = getattr(problem, "gradient_noise", lambda: None)() if self.plain else None
        self.memo = None if add_noise is None else GradientMemo(problem, add_noise)
        self.assign = self._assigner()

    def _assigner(self):
        """``assign(plan)``: start the workers of the method's ``plan`` (:mod:`.base`) at its current point,
        now (a closure over the run's arrays, which a resumed run fills in place: it runs at every event)."""
        queue, method, fixed, means, numbers = self.queue, self.method, self.fixed, self.means, self.numbers
        cancelled, own, common, draw, draw_all = self.cancelled, self.own, self.common, self.tau_model.draw, \
            self.draw_all
        memo = self.memo
        if method.uses_jobs or self.timing.time_varying:  # each job priced when it starts
            start = self.start
            return lambda plan: start_plan(method, start, plan)

        def assign(plan):
            if plan is ALL:
                queue.start_all(self.now, None if fixed else draw_all(self.tau_rng), cancelled)
                if memo is not None:
                    memo.drop(common[0])  # nobody computes at the old point any more
                common[0], common[1] = method.x, method.k
                own.clear()
                return
            for worker in plan:
                tau = means[worker] if fixed else float(draw(numbers[worker:worker + 1], self.tau_rng)[0])
                if queue.start(worker, self.now, float(tau)):
                    cancelled[worker] += 1
                own[worker] = (method.x, method.k)
                if memo is not None:
                    memo.started(method.x)
        return assign

    def start(self, worker, job):
        """Start ``worker`` on ``job`` now (None: leave it idle), priced by the timing model (random compute
        times drawn from the run's stream in start order); a job that can never end keeps the worker busy
        without an event."""
        queue, jobs, own = self.queue, self.jobs, self.own
        if job is None:
            if queue.cancel(worker):
                self.cancelled[worker] += 1
            jobs.pop(worker, None)
            own.pop(worker, None)
            return
        tau, self.done[worker] = self.timing.price(worker + 1, job, self.tau_rng, start=self.now[0])
        if tau == np.inf:
            was_busy = queue.cancel(worker)
            queue.busy[worker] = True  # busy for ever: it never ends
        else:
            was_busy = queue.start(worker, self.now, float(tau))
        if was_busy:
            self.cancelled[worker] += 1
        jobs[worker], own[worker] = job, (self.method.point(), self.method.k)

    def clock(self):
        return self.now[0]

    def pause(self):
        return None  # run() sets a checkpoint's own when it has one

    def next_arrival(self):
        """The next event's (worker, time, step, result, gradients), or TIME_UP after ``max_time``."""
        max_time = self.settings.max_time
        event = self.queue.pop(max_time)
        if event is None:
            raise RuntimeError(f"{self.method.name}: no worker is computing and the method assigned none")
        if event is TIME_UP:
            self.now = (float(max_time), 0.0)
            return TIME_UP
        self.now, worker = event  # assign() starts workers now
        own = self.own.pop(worker, None)
        point, k_at = own or self.common
        if self.memo is not None:
            return worker, self.now[0], k_at, self.memo.gradient(point, self.noise[worker], own is None), 1
        if self.plain:
            return worker, self.now[0], k_at, self.problem.worker_grad(worker, point, self.noise[worker]), 1
        job, count = self.jobs.pop(worker), self.done.pop(worker)
        seed = self.settings.seed
        sent = job_results.compute(self.problem, job, point, self.noise[worker], worker, k_at, seed, count)
        return worker, self.now[0], k_at, job_results.receive(job, sent, self.problem.dim, worker, k_at, seed), count

    def _checkpoint_pauses(self, checkpoint, recorder):
        """``pause()`` with a checkpoint: after each event (not before this session's first, so a signal
        during the set-up is answered at the first step, as every solver's checkpoint is), write one when it
        is due or asked for; True when a SIGTERM stops the run."""
        before_first = True

        def pause():
            nonlocal before_first
            if before_first:  # the top of the loop before this session's first event
                before_first = False
                return None
            return checkpoint.after_event(self, recorder)
        return pause

    def run(self, recorder, checkpoint=None):
        """Events until a stopping rule (or a signal, with ``checkpoint``: a :class:`.checkpoint.Checkpoint`)
        ends the run (:func:`.engine.drive`); returns (end time, gradients received, computed per worker,
        cancelled per worker)."""
        if self.memo is not None:
            recorder.evaluated = self.memo.keep
        if checkpoint is None or not checkpoint.resume(self, recorder):
            self.assign(self.method.start())
            recorder.evaluate(self.now[0], self.gradients, force=True)
        if checkpoint is not None:
            self.pause = self._checkpoint_pauses(checkpoint, recorder)
        drive(self, recorder)
        self.queue.fold(self.cancelled)
        if checkpoint is None or not recorder.interrupted:
            recorder.evaluate(self.now[0], self.gradients, force=True)
        if checkpoint is not None:
            checkpoint.write(self, recorder)
        return self.now[0], self.gradients, self.computed, self.cancelled


def simulate(problem, method, timing, settings, recorder, checkpoint=None):
    """Run ``method`` on ``problem`` with ``method.n_workers`` virtual workers timed by ``timing`` (a
    :class:`.timing.Timing`, or a compute-time model: no communication); returns the run's counts.

    Returns (end time, gradients received, computed per worker, cancelled per worker).  With ``checkpoint``
    (:class:`.checkpoint.Checkpoint`) the run resumes from its file and writes it as its settings say.
    """
    if not isinstance(timing, Timing):
        timing = Timing(timing, method.n_workers, problem.dim)
    return Simulation(problem, method, timing, settings).run(recorder, checkpoint)
