"""What both runtimes share: building a method from the settings, and recording a run.

The runtimes differ only in where gradients come from and what time is;
the method is built from its declared options (it knows its theory's
defaults: :meth:`.base.Method.build`), and everything a run reports (the
history, the stopping rule, the per-worker counts, the result) is decided
here, once.
"""
import math
import time as clock

import numpy as np

from ..core.log import IterationLog
from ..core.registry import lookup, names
from . import theory
from .result import HISTORY_COLUMNS, STATUS_OF_STOP, AsyncSGDResult
from .settings import inf_as_text


def build_method(settings, problem, n_workers, epsilon, timing=None):
    """The method of ``settings`` at ``problem.x0()``, built from its declared options and the workers'
    timing model (``Method.build``)."""
    cls = lookup("asyncsgd-method", settings.method)
    return cls.build(problem, n_workers, epsilon, settings.step_size, settings.method_values(), timing,
                     settings.seed)


class Recorder:
    """The history, the stopping rule and the log of one run (on the rank that owns the method)."""

    def __init__(self, problem, method, settings, epsilon, log=True, log_stream=None):
        self.problem, self.method, self.settings, self.epsilon = problem, method, settings, epsilon
        self.history = {column: [] for column in HISTORY_COLUMNS}
        self.time_to_epsilon, self.stopped_by, self.last_k = None, None, -1  # stopped_by: a key of STATUS_OF_STOP
        self.interrupted = False  # a SIGTERM stopped the run (its checkpoint written)
        self.log = IterationLog(log and settings.verbose,
                                [("time", "12.5g"), ("step", "9d"), ("gradients", "10d"), ("loss", "14.7e"),
                                 ("|grad|^2", "11.4e")], stream=log_stream)
        self.rows = 0
        self.trace = [] if settings.trace else None
        self.evaluated = None  # a runtime's hook: called with (x, grad f(x)) after each evaluation

    def arrival(self, time, worker, k_at, accepted):
        """Note one arrival in the trace (when the settings ask for one)."""
        if self.trace is not None:
            self.trace.append([float(time), int(worker), int(k_at), bool(accepted)])

    def deliver(self, worker, grad, k_at, time, gradients, assign, finished=1):
        """Hand one arriving gradient to the method, ``assign`` whom it (re)starts, note the arrival and
        evaluate (``gradients``: the count with this one; ``finished``: how many gradients the arriving job's
        result sums, which the method reads as ``method.finished``)."""
        method = self.method
        method.finished, method.now = finished, float(time)
        if self.trace is None:
            assign(method.arrive(worker, grad, k_at))
        else:
            accepted_before = int(method.accepted[worker])
            assign(method.arrive(worker, grad, k_at))
            self.arrival(time, worker, k_at, int(method.accepted[worker]) > accepted_before)
        self.evaluate(time, gradients)

    def evaluate(self, time, gradients, force=False):
        """Evaluate at the method's point when it has stepped ``eval_every`` times since the last row."""
        k = self.method.k
        if k == self.last_k or not (force or k % self.settings.eval_every == 0):
            return
        x = self.method.x
        both = getattr(self.problem, "loss_and_grad", None)  # a duck-typed problem may lack it
        loss, g = both(x) if both is not None else (self.problem.loss(x), self.problem.grad(x))
        norm2 = float(g @ g)
        if self.evaluated is not None:
            self.evaluated(x, g)
        self.last_k = k
        for column, value in zip(HISTORY_COLUMNS, (time, k, gradients, loss, norm2)):
            self.history[column].append(value)
        if self.time_to_epsilon is None and norm2 <= self.epsilon:
            self.time_to_epsilon = float(time)
        if self.rows % self.settings.log_every == 0:
            self.log.row(time, k, gradients, loss, norm2)
        self.rows += 1

    def stop(self, time, gradients):
        """The rule that stops the run now (and ``stopped_by`` set to it), or None."""
        s, reason = self.settings, None
        if s.stop_at_epsilon and self.time_to_epsilon is not None:
            reason = "epsilon"
        elif s.max_steps is not None and self.method.k >= s.max_steps:
            reason = "max_steps"
        elif s.max_gradients is not None and gradients >= s.max_gradients:
            reason = "max_gradients"
        elif s.max_time is not None and time > s.max_time:  # an event at max_time counts
            reason = "max_time"
        self.stopped_by = reason
        return reason

    def time_ran_out(self):
        """The next event comes after ``max_time``: the run ends there, with nothing after it used."""
        self.stopped_by = "max_time"

    def banner(self, runtime, n_workers, timing, predicted):
        m = self.method
        lines = [f"problem: {self.problem.name}, d = {self.problem.dim}, L = {self.problem.L:.4g}, "
                 f"sigma^2 = {self.problem.sigma2:.4g}, epsilon = {self.epsilon:.4g}",
                 f"method: {m.name} {', '.join(f'{k} = {_fmt(v)}' for k, v in m.parameters().items())}",
                 f"runtime: {runtime}, {n_workers} workers, {timing.describe()}",
                 "predicted (constants dropped): " + ", ".join(
                     f"T_{k} = {_fmt(predicted[k]) if predicted[k] is not None else 'n/a'}"
                     for k in theory.BANNER) +
                 f", m* = {predicted['m_star']}" + "".join(
                     f", T_{k} = {v:.4g}" for k, v in predicted.items() if k == m.name and k not in theory.TABLE)]
        self.log.banner("mpiopt async-sgd", lines)

    def footer(self, result):
        info, workers = result.info, result.info["workers"]
        reached = "not reached" if result.time_to_epsilon is None else f"{result.time_to_epsilon:.6g}"
        predicted = result.predicted.get(info["method"])
        predicted = math.nan if predicted is None else predicted
        self.log.footer([f"status: {result.status} ({info['stop']}); time to epsilon {reached} "
                         f"(predicted for {info['method']}: {predicted:.4g}, constants dropped)",
                         f"steps {result.steps}, gradients {result.gradients} "
                         f"(discarded {sum(workers['discarded'])}, cancelled {sum(workers['cancelled'])})"])


def _fmt(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def worker_means(tau_model, n_workers):
    return tau_model.mean(np.arange(1, n_workers + 1))


def prepare(problem, timing, settings, log_stream=None):
    """(method, recorder, predicted times) of a run, on the rank that runs the method (its log to
    ``log_stream``, None: stdout): the theory's table, what every registered method adds to it on these
    workers (``Method.predicted_time``, in registration order), then the running method's own
    (``method.predicted``)."""
    epsilon = settings.epsilon or problem.default_epsilon()
    method = build_method(settings, problem, timing.n_workers, epsilon, timing)
    recorder = Recorder(problem, method, settings, epsilon, log_stream=log_stream)
    predicted = theory.run_table(problem, timing, epsilon)
    for name in names("asyncsgd-method"):
        predicted.update(lookup("asyncsgd-method", name).predicted_time(problem, timing, epsilon))
    predicted.update(method.predicted(problem, timing, epsilon))
    return method, recorder, predicted


def make_result(recorder, runtime, timing, settings, predicted, end_time, gradients, computed, cancelled,
                wall_started, extra_info=None):
    method, problem = recorder.method, recorder.problem
    workers = {"computed": np.asarray(computed).tolist(), "accepted": method.accepted.tolist(),
               "discarded": method.discarded.tolist(), "cancelled": np.asarray(cancelled).tolist()}
    stop, n_workers, tau_model = recorder.stopped_by or "max_steps", timing.n_workers, timing.compute
    info = {"stop": stop, "method": method.name, "parameters": inf_as_text(method.parameters()),
            "runtime": runtime, "n_workers": n_workers, "tau": tau_model.describe(),
            "tau_means": worker_means(tau_model, n_workers).tolist(), "timing": timing.describe(),
            **{name: getattr(timing, name).tolist() for name in ("upload", "download")
               if getattr(timing, name) is not None},
            "epsilon": recorder.epsilon,
            "problem": problem.info(), "settings": settings.as_dict(), "workers": workers, **(extra_info or {})}
    if recorder.trace is not None:
        info["trace"] = recorder.trace
    status = "interrupted" if recorder.interrupted else STATUS_OF_STOP[stop]
    return AsyncSGDResult(status=status, history=recorder.history,
                          timings={"total": clock.perf_counter() - wall_started}, info=info, x=method.x,
                          steps=method.k, gradients=int(gradients), time=float(end_time),
                          time_to_epsilon=None if recorder.time_to_epsilon is None else float(recorder.time_to_epsilon),
                          predicted=predicted)
