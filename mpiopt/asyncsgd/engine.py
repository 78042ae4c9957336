"""One loop, two executors: the event loop that runs a method over the simulator or over MPI ranks.

The method decides (:mod:`.base`: ``start``, ``arrive``, ``job``), the recorder keeps the history and the
stopping rule (:mod:`.runner`), and an executor runs the jobs:

* the simulator (:class:`.simulator.Simulation`): virtual time, a heap of finishing times;
* MPI (:class:`.mpi._Server`, rank 0): real time, each worker a rank that sleeps the job's time.

An executor offers

* ``start(worker, job)``: (re)start ``worker`` on ``job`` (a :class:`.jobs.Job`, or None: idle) at the
  method's current point, cancelling whatever it was computing;
* ``assign(plan)``: start the workers of a method's plan (:data:`.base.ALL` or a list of workers), each on
  ``method.job(worker)``; an executor may do a plan of plain jobs faster than one ``start`` a worker
  (the simulator restarts every worker as one bulk of the event queue);
* ``next_arrival()``: the next finished job, as ``(worker, time, step it started at, what it sent
  decoded, gradients it finished)``; None when nothing usable arrived (a result of a job cancelled since)
  and :data:`TIME_UP` when the next event comes after ``max_time``;
* ``clock()``: the time now, in compute-time units; ``pause()``: a checkpoint's request to end the session
  now (a truthy value), or None; ``gradients`` (received so far) and ``computed`` (per worker).

:func:`drive` is the loop; everything that differs between virtual and real time is behind those names.
"""
from .base import ALL
from .jobs import PLAIN

TIME_UP = "time up"  # next_arrival(): the next event comes after max_time


def start_plan(method, start, plan):
    """Start each worker of ``plan`` (``ALL``: every one) on its job: the loop every executor shares."""
    jobs = method.uses_jobs
    for worker in (range(method.n_workers) if plan is ALL else plan):
        start(worker, method.job(worker) if jobs else PLAIN)


def drive(executor, recorder):
    """Hand the executor's arrivals to the method until the recorder's stopping rule holds, the time runs out
    or ``executor.pause()`` asks for an end; returns what ``pause()`` returned (None: the run ended)."""
    stop, deliver, assign = recorder.stop, recorder.deliver, executor.assign
    next_arrival, clock, pause, computed = executor.next_arrival, executor.clock, executor.pause, \
        executor.computed
    while not stop(clock(), executor.gradients):
        request = pause()
        if request:
            return request
        arrival = next_arrival()
        if arrival is None:
            continue
        if arrival is TIME_UP:
            recorder.time_ran_out()
            break
        worker, time, k_at, result, count = arrival
        computed[worker] += count
        executor.gradients += count
        deliver(worker, result, k_at, time, executor.gradients, assign, count)
    return None
