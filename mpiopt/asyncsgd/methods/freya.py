"""Freya PAGE (Tyurin, Gruntkowska and Richtarik, "Freya PAGE: First optimal time complexity for large-scale
nonconvex finite-sum optimization with heterogeneous asynchronous computations", NeurIPS 2024).

For a finite sum f = (1/m) sum_j f_j the server keeps PAGE's estimator g
(Li et al. 2021) and, after every step x_{k+1} = x_k - gamma g_k, renews it by
a coin c_k ~ Bernoulli(p):

* c_k = 1, ComputeGradient(x_{k+1}): every worker is given a j from the
  functions not yet collected, M (uniform over [m] \\ M), computes
  grad f_j(x_{k+1}) and sends it; the server adds it to the sum when j is new
  (a duplicate of a j that two workers held is discarded) and gives the worker
  another j of [m] \\ M, until M = [m]: g_{k+1} = (sum of the m gradients) / m;
* c_k = 0, ComputeBatchDifference(S, x_{k+1}, x_k): every worker is given
  j ~ U([m]) and both points, computes grad f_j(x_{k+1}) - grad f_j(x_k) and
  gets a new j as it sends, until S differences are in:
  g_{k+1} = g_k + (sum of the S differences) / S.

g_0 = ComputeGradient(x_0).  A phase ends with a step and every worker
starts the next phase at once: what a worker was computing for the last one
is cancelled.  No worker waits for a slow one, which is the point: the slow
workers' share of the m functions is taken by the fast ones.

Parameters: S = ceil(sqrt(m)), p = S / (m + S) (PAGE's choice) and
gamma = 1 / (L + L_+- sqrt((1 - p) / (p S))), L_+- the finite sum's constant
((1/m) sum_j ||grad f_j(x) - grad f_j(y)||^2 - ||grad f(x) - grad f(y)||^2 <=
L_+-^2 ||x - y||^2; the problem's ``L_pm``).  PAGE's bound
E||grad f(x_hat)||^2 <= 2 Delta / (gamma K) gives K = 2 Delta / (gamma eps) steps.
With fixed times h_1 <= ... <= h_n (a difference costs two gradients) collecting
s results takes at most t(s, h) = min_j (sum_{i<=j} 1/h_i)^(-1) (s + j), so

    T_Freya = t(m, h) + K (p t(m, h) + (1 - p) t(S, 2h))

which with S = sqrt(m) is the paper's optimal
Theta(t(m) + (L_+- Delta / eps) t(sqrt(m))) in the large-scale regime
(sqrt(m) >= n).  Per phase the server receives about m gradients (c_k = 1) or S
differences, and sends x (with x_k for a difference) to each worker once a job.

Randomness, from one stream ``random_stream(seed, "asyncsgd-freya-page")`` in
this order: each job's j as the runtime starts the worker (every worker in
worker order at a phase's start, then each worker as it sends), the coin when
a phase ends.  Both runtimes start workers in the same order, so they give
the same bits.
"""
import math

import numpy as np

from ...core.options import Option, Options
from ...core.random import random_stream
from ...core.registry import register
from ..base import ALL, Method
from ..jobs import Job
from ..problems import FINITE_SUMS, Problem


def collection_time(count, times):
    """t(s, h) = min_j (sum_{i<=j} 1/h_(i))^(-1) (s + j): the time by which workers of fixed times ``times``
    restarted together have finished ``count`` results (the fastest j each finish floor(t/h_i) >= t/h_i - 1)."""
    h = np.sort(np.asarray(times, dtype=np.float64))
    h = h[np.isfinite(h)]
    j = np.arange(1, h.size + 1)
    return float(np.min((count + j) / np.cumsum(1.0 / h)))


def freya_time(times, m, batch, probability, steps):
    """T_Freya = t(m, h) + K (p t(m, h) + (1 - p) t(S, 2 h)) for ``steps`` K."""
    full = collection_time(m, times)
    return float(full + steps * (probability * full + (1 - probability) * collection_time(batch, 2 * np.asarray(
        times, dtype=np.float64))))


@register("asyncsgd-method", "freya-page")
class FreyaPAGE(Method):
    name = "freya-page"
    uses_jobs = True
    seeded = True
    options = Options(
        Option("batch", int, None, "S: differences per estimator update (None: ceil(sqrt(m)))", low=1),
        Option("probability", float, None, "p: the chance of a full gradient after a step (None: S/(m+S))",
               low=0, low_open=True, high=1))

    @classmethod
    def unavailable(cls, settings, problem=None):
        finite = problem.n_samples is not None if isinstance(problem, Problem) else problem in FINITE_SUMS
        return None if problem is None or finite else "it needs a finite sum (least-squares, logistic)"

    @classmethod
    def theory_options(cls, values, problem, epsilon):
        m = problem.n_samples
        if m is None or problem.L_pm is None:
            raise ValueError(f"{cls.owner()} needs a finite-sum problem with its L_+- (least-squares, logistic), "
                             f"got {problem.name!r}")
        batch = values["batch"] or math.ceil(math.sqrt(m))
        probability = values["probability"] or batch / (m + batch)
        return {**values, "batch": batch, "probability": probability, "samples": int(m),
                "L_pm": float(problem.L_pm)}

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        p, S = values["probability"], values["batch"]
        return 1 / (problem.L + values["L_pm"] * math.sqrt((1 - p) / (p * S)))

    def __init__(self, x0, n_workers, step_size, batch, probability, samples, L_pm, seed=0):
        super().__init__(x0, n_workers, step_size)
        self.batch_size, self.probability, self.samples, self.L_pm = int(batch), float(probability), \
            int(samples), float(L_pm)
        self.rng = random_stream(seed, "asyncsgd-freya-page")
        self.estimate = np.zeros(self.x.size)   # g_k, PAGE's estimator
        self.total = np.zeros(self.x.size)      # the phase's sum of gradients or differences
        self.count = 0                          # the differences in ``total``
        self.assigned = np.full(self.n_workers, -1, dtype=np.int64)  # the j each worker computes
        self.pair = np.concatenate([self.x, self.x])  # a difference phase's two points [x_{k+1}, x_k]
        self.full = True                        # the phase: ComputeGradient (True) or ComputeBatchDifference
        self._begin_full()

    def _begin_full(self):
        self.left = self.samples                # [m] \ M is remaining[:left]
        self.remaining = np.arange(self.samples, dtype=np.int64)
        self.position = np.arange(self.samples, dtype=np.int64)  # where each j is in remaining

    def parameters(self):
        return {"step_size": self.step_size, "batch": self.batch_size, "probability": self.probability,
                "samples": self.samples, "L_pm": self.L_pm}

    def predicted(self, problem, timing, epsilon):
        times = timing.plain_model().mean(np.arange(1, self.n_workers + 1))
        steps = math.ceil(2 * problem.Delta / (self.step_size * epsilon))
        return {"freya-page": freya_time(times, self.samples, self.batch_size, self.probability, steps)}

    def point(self):
        return self.x if self.full else self.pair

    def job(self, worker):
        if self.full:
            j = int(self.remaining[self.rng.integers(self.left)])
            self.assigned[worker] = j
            return Job(sample=j)
        j = int(self.rng.integers(self.samples))
        self.assigned[worker] = j
        return Job(gradients=2, sample=j, difference=True)

    def _collect(self, j):
        """Move j out of [m] \\ M (swap with the last of remaining[:left])."""
        at, last = self.position[j], self.remaining[self.left - 1]
        self.remaining[at], self.position[last] = last, at
        self.remaining[self.left - 1], self.position[j] = j, self.left - 1
        self.left -= 1

    def arrive(self, worker, grad, k_at):
        j = int(self.assigned[worker])
        if k_at != self.k:  # a result of an older phase (the runtime had not cancelled it yet)
            self.discarded[worker] += 1
            return [worker]
        if self.full:
            if self.position[j] >= self.left:  # j is in M already: another worker sent it first
                self.discarded[worker] += 1
                return [worker]
            self.total += grad
            self._collect(j)
            self.accepted[worker] += 1
            if self.left:
                return [worker]
            self.estimate = self.total / self.samples
        else:
            self.total += grad
            self.count += 1
            self.accepted[worker] += 1
            if self.count < self.batch_size:
                return [worker]
            self.estimate = self.estimate + self.total / self.batch_size
        return self._end_phase()

    def _end_phase(self):
        """Step with the estimator, toss the coin and begin the next phase: every worker restarts."""
        previous = self.x
        self._step(self.estimate, self.step_size)
        self.total, self.count = np.zeros(self.x.size), 0
        self.full = bool(self.rng.random() < self.probability)
        if self.full:
            self._begin_full()
        else:
            self.pair = np.concatenate([self.x, previous])
            self._begin_difference()
        return ALL

    def _begin_difference(self):
        """A difference phase begins: nothing to draw yet (each job draws its j as its worker starts)."""
