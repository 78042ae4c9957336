"""Computation power that changes in time: the universal computation model (Tyurin, "Tight time complexities
in parallel stochastic optimization with arbitrary computation dynamics", ICLR 2025).

Worker i computes at a power p_i(t) >= 0 relative to its nominal speed: a
gradient that needs h (its compute time, fixed or drawn) of work started at
t ends at the first t' with

    integral_t^t' p_i(s) ds = h,

so p = 1 is the fixed model, p = 0 an outage (nothing progresses) and p = 2
twice the speed.  In the paper's terms worker i's power is v_i(t) = p_i(t) /
h_i and it finishes floor(integral v_i) gradients in an interval; a method
that restarts its workers at every new point (Rennala, Malenia) drops their
unfinished work there, as the paper's workers do.

A power model is piecewise constant per worker (:class:`PowerTrace`: values
on [t_j, t_j+1), the last value for ever or the whole trace repeating with a
period), registered as kind ``power-model``:

============  ==================================================================================
``constant``  p = 1 (the fixed model)
``outages``   worker i is off (p = 0) for ``fraction`` of every ``period``, from (i - 1) period / n on
              (staggered: a few workers are off at any time); workers whose number is above
              ``workers`` * n never go off
``trend``     p_i(t) = 1 + slope t, piecewise constant on steps of ``step`` (a machine that speeds up,
              slope > 0, or slows down to ``floor``)
``trace``     a recorded trace: a CSV file of rows ``time, p_1, ..., p_n`` (a header line allowed),
              its first time 0, optionally repeating with ``period``
============  ==================================================================================
"""
import math

import numpy as np

from ..core.options import Option, Options
from ..core.registry import lookup, names, options, register


class PowerTrace:
    """One worker's piecewise-constant power: ``values[j]`` on [``times[j]``, ``times[j + 1]``), times[0] = 0,
    the last value for ever (``period`` None) or the trace repeating every ``period``."""

    def __init__(self, times, values, period=None):
        self.times, self.values = np.asarray(times, dtype=np.float64), np.asarray(values, dtype=np.float64)
        if self.times.ndim != 1 or self.times.size == 0 or self.times.shape != self.values.shape:
            raise ValueError("a power trace needs as many times as values, one or more")
        if self.times[0] != 0 or np.any(np.diff(self.times) <= 0) or not np.all(np.isfinite(self.times)):
            raise ValueError("a power trace's times must start at 0 and increase")
        if not np.all(np.isfinite(self.values)) or np.any(self.values < 0):
            raise ValueError("power must be finite and >= 0")
        self.period = None if period is None else float(period)
        if self.period is not None and not (self.period > self.times[-1]):
            raise ValueError(f"the period {period!r} must be longer than the trace's last time {self.times[-1]:g}")
        ends = np.append(self.times[1:], self.period if self.period is not None else np.inf)
        with np.errstate(invalid="ignore"):
            widths = ends - self.times
        self.cumulative = np.concatenate([[0.0], np.cumsum(self.values[:-1] * widths[:-1])])
        self.per_period = None if self.period is None else float(self.cumulative[-1] + self.values[-1] *
                                                                 (self.period - self.times[-1]))

    def _work_within(self, t):
        j = int(np.searchsorted(self.times, t, side="right")) - 1
        return float(self.cumulative[j] + self.values[j] * (t - self.times[j]))

    def work(self, t):
        """integral_0^t p."""
        if self.period is None:
            return self._work_within(t)
        turns, within = divmod(t, self.period)
        return turns * self.per_period + self._work_within(within)

    def _reach_within(self, amount):
        """The first r in the trace (one period) with work r >= amount (amount > 0, reachable)."""
        j = int(np.searchsorted(self.cumulative, amount, side="left")) - 1
        return float(self.times[j] + (amount - self.cumulative[j]) / self.values[j])

    def finish(self, start, amount):
        """The first t >= start with integral_start^t p >= amount; inf when never."""
        if amount <= 0:
            return float(start)
        target = self.work(start) + amount
        if self.period is None:
            total = float(self.cumulative[-1])
            if target <= total:
                return max(float(start), self._reach_within(target))
            if self.values[-1] == 0:
                return math.inf
            return float(self.times[-1] + (target - total) / self.values[-1])
        if self.per_period == 0:
            return math.inf
        turns = math.floor(target / self.per_period)
        rest = target - turns * self.per_period
        if rest <= 0:  # reached at the end of a period's work: the last point of the previous one with work
            turns, rest = turns - 1, self.per_period
        if rest > self.cumulative[-1]:  # in the last piece of the period
            return turns * self.period + float(self.times[-1] + (rest - self.cumulative[-1]) / self.values[-1])
        return max(float(start), turns * self.period + self._reach_within(rest))

    def describe(self):
        return f"{self.times.size} pieces" + ("" if self.period is None else f", period {self.period:g}")


class PowerModel:
    """Every worker's :class:`PowerTrace` (``traces(n)``), by registered name; ``n_workers``: how many
    workers the model has traces for (None: any number)."""

    name = "power"
    n_workers = None

    def traces(self, n_workers):
        raise NotImplementedError

    def describe(self):
        return self.name


class Outages(PowerModel):
    name = "outages"

    def __init__(self, period=100.0, fraction=0.3, workers=1.0):
        self.period, self.fraction, self.share = float(period), float(fraction), float(workers)
        if not (0 <= self.fraction < 1):
            raise ValueError(f"outages: fraction must be in [0, 1), got {fraction!r}")

    def traces(self, n):
        traces = []
        for i in range(1, n + 1):
            start, length = (i - 1) * self.period / n, self.fraction * self.period
            if i > self.share * n or length == 0:
                traces.append(PowerTrace([0.0], [1.0]))
                continue
            end = start + length
            if end <= self.period:
                points = [(0.0, 1.0), (start, 0.0), (end, 1.0)] if start > 0 else [(0.0, 0.0), (end, 1.0)]
            else:  # the outage wraps around the period's end
                points = [(0.0, 0.0), (end - self.period, 1.0), (start, 0.0)]
            points = [p for k, p in enumerate(points) if k == 0 or p[0] < self.period]
            traces.append(PowerTrace([t for t, _ in points], [v for _, v in points], self.period))
        return traces

    def describe(self):
        return f"outages(period={self.period:g}, fraction={self.fraction:g}" + \
            ("" if self.share == 1 else f", workers={self.share:g}") + ")"


class Trend(PowerModel):
    name = "trend"

    def __init__(self, slope=0.01, step=1.0, floor=0.1):
        self.slope, self.step, self.floor = float(slope), float(step), float(floor)

    def traces(self, n, pieces=4096):
        times = np.arange(pieces) * self.step
        values = np.maximum(1 + self.slope * times, self.floor)
        return [PowerTrace(times, values) for _ in range(n)]

    def describe(self):
        return f"trend(slope={self.slope:g}, step={self.step:g})"


class RecordedTrace(PowerModel):
    name = "trace"

    def __init__(self, path, period=None):
        self.path, self.period = str(path), period
        rows = []
        with open(self.path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                cells = [cell.strip() for cell in line.split(",")]
                if not line.strip():
                    continue
                try:
                    rows.append([float(cell) for cell in cells])
                except ValueError:
                    if rows or number > 1:
                        raise ValueError(f"{self.path}:{number}: expected numbers, got {line.strip()!r}") from None
        if not rows or len({len(row) for row in rows}) != 1 or len(rows[0]) < 2:
            raise ValueError(f"{self.path}: expected rows of 'time, p_1, ..., p_n' with the same length")
        self.table = np.array(rows)
        self.n_workers = self.table.shape[1] - 1

    def traces(self, n):
        columns = self.table.shape[1] - 1
        if columns != n:
            raise ValueError(f"{self.path} has the power of {columns} workers, the run has {n}")
        return [PowerTrace(self.table[:, 0], self.table[:, i + 1], self.period) for i in range(n)]

    def describe(self):
        return f"trace({self.path})"


class Constant(PowerModel):
    name = "constant"

    def traces(self, n):
        return [PowerTrace([0.0], [1.0]) for _ in range(n)]


register("power-model", "constant", Constant)
register("power-model", "outages", Outages, options=Options(
    Option("period", float, 100.0, "the outages repeat every this many time units", low=0, low_open=True),
    Option("fraction", float, 0.3, "the share of every period a worker is off", low=0),
    Option("workers", float, 1.0, "the share of the workers that go off (the first ones)", low=0)))
register("power-model", "trend", Trend, options=Options(
    Option("slope", float, 0.01, "p(t) = 1 + slope t (negative: slowing down)"),
    Option("step", float, 1.0, "p is constant on steps of this length", low=0, low_open=True),
    Option("floor", float, 0.1, "p never falls below this", low=0, low_open=True)))
register("power-model", "trace", RecordedTrace, options=Options(
    Option("path", str, None, "a CSV file of rows time, p_1, ..., p_n (first time 0)"),
    Option("period", float, None, "the trace repeats with this period (None: its last row holds for ever)",
           low=0, low_open=True)))
POWER_MODELS = names("power-model")


def get_power_model(model, **values):
    """A PowerModel by registered name (its declared options ``values``), or one given as it is."""
    if isinstance(model, PowerModel):
        return model
    factory = lookup("power-model", model)
    return factory(**options("power-model", model).resolve(values, f"power-model {model!r}"))


def universal_time(traces, h, batch, steps, rule="rennala"):
    """The universal model's recursion: t_k is the first time after t_{k-1} at which the workers, restarted
    at t_{k-1} and computing gradients of work h_i one after another at their power, have finished enough
    of them; returns t_steps (inf when they never do).

    ``rule`` "rennala": sum_i B_i >= batch (Tyurin 2025: Rennala's time under arbitrary dynamics);
    "malenia": every B_i >= 1 and (1/n sum_i 1/B_i)^(-1) >= batch / n; "minibatch": every B_i >= 1 (one
    gradient from every worker, ``batch`` unused)."""
    if rule not in ("rennala", "malenia", "minibatch"):
        raise ValueError(f"rule must be rennala, malenia or minibatch, got {rule!r}")
    import heapq
    n, t = len(traces), 0.0
    h = np.asarray(h, dtype=np.float64)
    for _ in range(int(steps)):
        counts = np.zeros(n, dtype=np.int64)
        heap = [(traces[i].finish(t, h[i]), i) for i in range(n)]
        heapq.heapify(heap)
        while True:
            when, i = heapq.heappop(heap)
            if when == math.inf:
                return math.inf
            counts[i] += 1
            if rule == "rennala":
                done = counts.sum() >= batch
            elif rule == "minibatch":
                done = bool(np.all(counts > 0))
            else:
                done = bool(np.all(counts > 0)) and n / np.sum(1.0 / np.maximum(counts, 1)) >= batch / n
            if done:
                t = when
                break
            heapq.heappush(heap, (traces[i].finish(when, h[i]), i))
    return t
