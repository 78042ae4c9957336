"""The timing model: how long a worker's job takes, computing and communicating.

Worker i (numbered from 1) has

* a compute time per stochastic gradient, h_i: a compute-time model of
  :mod:`.taus` (fixed, random per gradient);
* an upload time per coordinate, u_i, and a download time per coordinate,
  v_i (fixed per worker: a fixed model of :mod:`.taus` by name, such as
  ``sqrt``, or explicit times, each times a scale: ``upload="sqrt",
  upload_scale=d**-0.5`` is the Shadowheart paper's tau_i = sqrt(i) / d^beta
  per coordinate).  None: communication is free, the papers' model of
  Minibatch, Asynchronous, Rennala and Ringmaster SGD.

A job (:class:`.jobs.Job`) of b gradients whose result travels as m
messages of K coordinates (or densely: one message of d) takes

    d v_i  +  (h_i1 + ... + h_ib)  +  m K u_i

downloading the point, computing, then uploading, in that order (the
Shadowheart paper's worker: "computing, then sending").  With a time budget
per attempt (MindFlayer SGD) a gradient whose attempt would run over the
budget costs the budget and is begun anew with a fresh compute time.

A job's own travel times (``before``/``after``: a graph's tree, for Fragile
and Amelie SGD under the uncongested links) come on top: before + d v_i +
compute + upload + after.  A job with a planned ``duration`` (the paper's
link model, :mod:`.treelinks`) takes exactly that.
A graph (:mod:`.graphs`) is kept as ``graph``; only the graph methods use it.

With a power model (:mod:`.power`, the universal computation model) the
computing part runs at worker i's power p_i(t): it ends when the integral of
p_i from its start reaches the compute time, so a job's length depends on
when it starts (an outage stops it; nothing else changes).

The default job of the four classical methods is one gradient sent densely,
so with communication each of their jobs takes d v_i + h_i + d u_i: the
baselines of the compressed methods pay for their dense vectors.  Without
communication nothing is added and the times are the compute times exactly.
"""
import math

import numpy as np

from .taus import TauModel, get_tau_model


class LinkTimes:
    """Per-coordinate times of one direction of the workers' links: worker i's is ``scale * model(i)``;
    ``setting`` names them in messages (``upload``, ``download``)."""

    def __init__(self, model, scale=1.0, model_options=None, setting="communication"):
        if not isinstance(model, (str, TauModel)):  # explicit times: say which one is wrong, and where
            values = np.asarray(model, dtype=np.float64).reshape(-1)
            bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
            if values.size == 0 or bad.size:
                where = f"{float(values[bad[0]])!r} for worker {bad[0]} (counting from 0)" if bad.size else "no times"
                raise ValueError(f"{setting} times per coordinate must be finite and > 0, got {where}")
        self.model = get_tau_model(model, **(model_options or {}))
        if not self.model.fixed:
            raise ValueError(f"communication times must be fixed per worker; {self.model.describe()} is not")
        if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
            raise ValueError(f"a communication time scale must be a finite number > 0, got {scale!r}")
        self.scale = float(scale)

    def per_coordinate(self, n_workers):
        times = self.model.mean(np.arange(1, n_workers + 1)) * self.scale
        if not np.all(np.isfinite(times)) or np.any(times < 0):
            raise ValueError("communication times must be finite and >= 0")
        return times

    def describe(self):
        return self.model.describe() + ("" if self.scale == 1 else f" x {self.scale:.4g}")


class Timing:
    """Compute times (a :class:`.taus.TauModel`) and, when given, per-coordinate upload and download times
    of ``n_workers`` workers on a problem of ``dim`` coordinates."""

    def __init__(self, compute, n_workers, dim, upload=None, download=None, power=None, graph=None):
        self.compute, self.n_workers, self.dim = compute, int(n_workers), int(dim)
        self.graph = graph
        self.power = power
        self.traces = None if power is None else power.traces(self.n_workers)
        self.time_varying = self.traces is not None and not all(
            t.times.size == 1 and t.values[0] == 1 for t in self.traces)
        self.upload = None if upload is None else upload.per_coordinate(self.n_workers)
        self.download = None if download is None else download.per_coordinate(self.n_workers)
        self.links = {"upload": upload, "download": download}
        self.communicates = bool((self.upload is not None and np.any(self.upload)) or
                                 (self.download is not None and np.any(self.download)))

    @property
    def beyond_compute(self):
        """True when the run's times hold more than the compute model (links, power or a graph): a checkpoint's
        fingerprint then holds :meth:`describe` too."""
        return self.communicates or self.time_varying or self.graph is not None

    def compute_means(self):
        """h_i, every worker's mean compute time per gradient."""
        return self.compute.mean(np.arange(1, self.n_workers + 1))

    def upload_per_coordinate(self):
        return np.zeros(self.n_workers) if self.upload is None else self.upload

    def download_per_coordinate(self):
        return np.zeros(self.n_workers) if self.download is None else self.download

    def dense_round_trip(self):
        """Per worker: the time to download the point and upload one dense vector, d (v_i + u_i)."""
        return self.dim * self.download_per_coordinate() + self.dim * self.upload_per_coordinate()

    def plain_model(self):
        """The compute-time model of the default job (one gradient, sent densely): the compute model itself
        without communication, else the compute model shifted by each worker's dense round trip."""
        if not self.communicates:
            return self.compute
        return Shifted(self.compute, self.dense_round_trip())

    def job_time(self, number, job, rng, dim=None, start=0.0):
        """The duration of ``job`` (a :class:`.jobs.Job`) on worker ``number`` (1-based) started at ``start``,
        drawing its random compute times from ``rng``; inf when it can never finish (every attempt over its
        budget, or no power left)."""
        return self.price(number, job, rng, dim, start)[0]

    def price(self, number, job, rng, dim=None, start=0.0):
        """(duration, gradients finished) of ``job``: :meth:`job_time`, and how many of its gradients end
        (all of them, but for a job of trials: those within the budget)."""
        if job.duration is not None:  # a graph's link model planned the whole job (:mod:`.treelinks`)
            return job.duration, job.gradients
        index, dim = number - 1, self.dim if dim is None else dim
        compute, done = (0.0, job.gradients) if self.compute.real else _compute_time(self.compute, number, job, rng)
        down = up = 0.0
        if self.communicates:
            down = self.download_per_coordinate()[index] * dim
            up = self.upload_per_coordinate()[index] * job.uploaded(dim)
        if self.time_varying and compute < math.inf:  # compute at the worker's power, after the download
            began = start + job.before + down
            compute = self.traces[index].finish(began, compute) - began
        travel = job.before + job.after  # 0.0 but for a graph's jobs: adding it changes no bit
        if not self.communicates:
            return compute + travel, done
        return float(compute + (down + up) + travel), done  # the same sum as the default job's Shifted model

    def describe(self):
        parts = [f"compute {self.compute.describe()}"]
        parts += [f"{name} {link.describe()} per coordinate" for name, link in self.links.items() if link]
        if self.time_varying:
            parts.append(f"power {self.power.describe()}")
        if self.graph is not None:
            parts.append(self.graph.describe())
        return ", ".join(parts)


def _compute_time(model, number, job, rng):
    """(compute time, gradients finished) of ``job`` on worker ``number``."""
    workers = np.array([number])
    if job.budget is None:
        if model.fixed:
            return float(model.mean(workers)[0]) * job.gradients, job.gradients
        total = 0.0
        for _ in range(job.gradients):
            total += float(model.draw(workers, rng)[0])
        return total, job.gradients
    if job.trials:  # b attempts, one draw each: those over the budget cost it and are given up
        total, done = 0.0, 0
        for _ in range(job.gradients):
            tau = float(model.draw(workers, rng)[0])
            if tau <= job.budget:
                total, done = total + tau, done + 1
            else:
                total += job.budget
        return total, done
    if model.fixed and float(model.mean(workers)[0]) > job.budget:
        return math.inf, job.gradients  # every attempt runs over: the job never ends
    total = 0.0
    for _ in range(job.gradients):
        while True:
            tau = float(model.draw(workers, rng)[0])
            if tau <= job.budget:
                total += tau
                break
            total += job.budget
    return total, job.gradients


class Shifted(TauModel):
    """A compute-time model plus a fixed time per worker (``offsets[i - 1]``): the default job's time with
    communication."""

    def __init__(self, base, offsets):
        self.base, self.offsets = base, np.asarray(offsets, dtype=np.float64)
        self.variate, self.name, self.real = base.variate, base.name, base.real

    def mean(self, workers):
        workers = np.asarray(workers)
        return self.base.mean(workers) + self.offsets[workers - 1]

    def times(self, workers, standard):
        workers = np.asarray(workers)
        return self.base.times(workers, standard) + self.offsets[workers - 1]

    def draw(self, workers, rng):
        workers = np.asarray(workers)
        return self.base.draw(workers, rng) + self.offsets[workers - 1]

    def sampler(self, workers):
        workers = np.asarray(workers)
        base, offsets = self.base.sampler(workers), self.offsets[workers - 1]
        return lambda rng: base(rng) + offsets

    def describe(self):
        return self.base.describe()
