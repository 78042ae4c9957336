"""Malenia SGD (Tyurin and Richtarik, "Optimal time complexities of parallel stochastic optimization methods
under a fixed computation model", NeurIPS 2023): Rennala's idea for heterogeneous data.

Worker i holds its own f_i and f = (1/n) sum_i f_i, so a fast worker's
gradients cannot stand in for a slow one's: every worker must contribute.
At step k every worker computes stochastic gradients of its f_i at x_k, one
after another; the server keeps a sum g_i and a count B_i per worker and
stops collecting as soon as

    B_i >= 1 for every i  and  (1/n sum_i 1/B_i)^(-1) >= S / n,     S = max(ceil(sigma^2/eps), n)

then steps with the mean of the workers' means and restarts everyone:

    x_{k+1} = x_k - gamma (1/n) sum_i g_i / B_i,     gamma = 1/(2L)

The estimator's variance is (sigma^2/n) (1/n sum_i 1/B_i) <= sigma^2/S <= eps.
With fixed times tau_1 <= ... <= tau_n its time is

    T_Malenia = (L Delta / eps) (tau_n + (1/n sum_i tau_i) S / n)     (constants dropped)

the lower bound for heterogeneous data in that paper: Malenia is optimal.
Per step the server receives sum_i B_i gradients and sends x_{k+1} to n
workers.  The accumulation keeps each worker's sum in arrival order and adds
the workers' means in worker order, so MPI ranks give the simulator's bits.
"""
import math

import numpy as np

from ...core.options import Option, Options
from ...core.registry import register
from .. import theory
from ..base import ALL, Method
from ..power import universal_time


def malenia_batch(sigma2, epsilon, n_workers):
    """S = max(ceil(sigma^2/eps), n)."""
    return max(theory.default_batch(sigma2, epsilon), int(n_workers))


def malenia_time(taus, sigma2, epsilon, L, Delta, batch=None):
    """The predicted time (L Delta/eps)(tau_n + (1/n sum tau_i) S/n), constants dropped."""
    taus = np.asarray(taus, dtype=np.float64)
    n = taus.size
    S = batch or malenia_batch(sigma2, epsilon, n)
    return float(L * Delta / epsilon * (taus.max() + taus.mean() * S / n))


@register("asyncsgd-method", "malenia")
class MaleniaSGD(Method):
    name = "malenia"
    options = Options(
        Option("batch", int, None, "S: stop collecting once (1/n sum 1/B_i)^(-1) >= S/n (None: max(ceil("
                                   "sigma^2/eps), n))", low=1))

    @classmethod
    def timing_options(cls, values, problem, epsilon, timing):
        n = timing.n_workers if timing is not None else None
        return {**values, "batch": values["batch"] or malenia_batch(problem.sigma2, epsilon, n or 1)}

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        return 1 / (2 * problem.L)

    def __init__(self, x0, n_workers, step_size, batch):
        super().__init__(x0, n_workers, step_size)
        self.batch_size = int(batch)
        self.sums = np.zeros((self.n_workers, self.x.size))
        self.counts = np.zeros(self.n_workers, dtype=np.int64)

    def parameters(self):
        return {"step_size": self.step_size, "batch": self.batch_size}

    def predicted(self, problem, timing, epsilon):
        means = timing.plain_model().mean(np.arange(1, self.n_workers + 1))
        if timing.time_varying:  # the universal model's recursion (Tyurin 2025)
            return {"malenia": universal_time(timing.traces, means, self.batch_size,
                                              math.ceil(problem.L * problem.Delta / epsilon), rule="malenia")}
        return {"malenia": malenia_time(means, problem.sigma2, epsilon, problem.L, problem.Delta, self.batch_size)}

    def enough(self):
        """Every worker has sent one, and n / sum(1/B_i) >= S/n."""
        counts = self.counts
        if np.any(counts == 0):
            return False
        return self.n_workers / np.sum(1.0 / counts) >= self.batch_size / self.n_workers

    def arrive(self, worker, grad, k_at):
        if k_at != self.k:  # a gradient of an older point (the runtime had not cancelled it yet)
            self.discarded[worker] += 1
            return [worker]
        self.sums[worker] += grad
        self.counts[worker] += 1
        self.accepted[worker] += 1
        if not self.enough():
            return [worker]
        direction = np.zeros(self.x.size)
        for i in range(self.n_workers):
            direction += self.sums[i] / self.counts[i]
        self._step(direction / self.n_workers, self.step_size)
        self.sums[:] = 0
        self.counts[:] = 0
        return ALL
