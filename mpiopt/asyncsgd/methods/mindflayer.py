"""MindFlayer SGD (Maranjyan, Shaikh Omar and Richtarik, "MindFlayer SGD: efficient parallel SGD in the
presence of heterogeneous and random worker compute times", UAI 2025).

When compute times are random with heavy tails, Rennala waits for the rare
very long gradient.  MindFlayer gives every attempt a time budget t_i: an
attempt that runs over it is given up.  Every round:

    worker i:  B_i attempts at x_k, one after another, each given up after t_i;
               g_i = the sum of the gradients that finished in time
    server:    x_{k+1} = x_k - gamma (sum_i g_i) / (sum_i p_i B_i),    p_i = P(tau_i <= t_i)

E[g_i] = p_i B_i grad f, so the step is unbiased.  An attempt costs
c_i = E min(tau_i, t_i) = integral_0^t_i P(tau_i > s) ds on average, so a
kept gradient costs c_i / p_i: the method is Rennala with those effective
times, and its time is Rennala's formula with tau_i replaced by c_i / p_i
(constants dropped, :mod:`..theory`).

Parameters (the defaults):

* t_i: the ``quantile`` q of worker i's compute time (None: the q of 0.05,
  0.10, ..., 0.95, 0.99 with the smallest c_i / p_i, worker by worker);
* B_i = floor(t / c_i) for the smallest t with sum_i p_i floor(t / c_i) >= S,
  S = ``batch`` (None: max(1, ceil(sigma^2/eps))): the workers' expected
  kept gradients reach S at the same time, Rennala's equilibrium;
* gamma = min(1/(2L), eps S / (4 L sigma^2)), Rennala's.

With fixed times every attempt finishes (t_i = tau_i, p_i = 1) and the
method is a synchronous Rennala with its B_i planned ahead.  Per round the
server receives n vectors and sends x_{k+1} to the n workers; the workers'
sums are added in worker order, so MPI ranks give the simulator's bits.
"""
import heapq

import numpy as np

from ...core.options import Option, Options
from ...core.registry import register
from .. import theory
from ..base import RoundMethod
from ..jobs import Job

QUANTILES = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9,
             0.95, 0.99)


def attempt_cost(model, number, budget, points=4097):
    """c = E min(tau, budget) = integral_0^budget P(tau > s) ds for worker ``number`` (Simpson's rule)."""
    return float(attempt_costs(model, np.array([number]), np.array([budget]), points)[0])


def attempt_costs(model, numbers, budgets, points=4097, block=2 ** 21):
    """:func:`attempt_cost` for each worker of ``numbers`` at its budget, a block of workers at a time (each
    row is the scalar rule's own linspace and pairwise sum, so the bits are the same)."""
    numbers, budgets = np.asarray(numbers), np.asarray(budgets, dtype=np.float64)
    weights = np.ones(points)
    weights[1:-1:2], weights[2:-1:2] = 4, 2
    costs, rows = np.empty(numbers.size), max(1, block // points)
    for first in range(0, numbers.size, rows):
        chosen = slice(first, first + rows)
        s = np.linspace(0.0, budgets[chosen], points, axis=1)
        survival = 1 - model.cdf(np.broadcast_to(numbers[chosen, None], s.shape), s)
        costs[chosen] = budgets[chosen] / (points - 1) / 3 * np.sum(weights * survival, axis=1)
    return costs


def budgets(model, n_workers, quantile=None):
    """(t, p, c) per worker: budgets, probabilities of finishing within them, expected attempt costs; for
    each worker the quantile of the least c / p (the first among ties), all workers at once."""
    numbers = np.arange(1, n_workers + 1)
    if model.fixed:
        t = model.mean(numbers).astype(np.float64)
        return t, np.ones(n_workers), t.copy()
    choices = (quantile,) if quantile is not None else QUANTILES
    best_t = best_p = best_c = None
    for q in choices:
        t = np.asarray(model.quantile(numbers, q), dtype=np.float64)
        p = np.asarray(model.cdf(numbers, t), dtype=np.float64)
        c = attempt_costs(model, numbers, t)
        if best_t is None:
            best_t, best_p, best_c = t, p, c
            continue
        better = c / p < best_c / best_p
        best_t, best_p, best_c = (np.where(better, new, old) for new, old in ((t, best_t), (p, best_p), (c, best_c)))
    return best_t, best_p, best_c


def trials(p, c, batch):
    """B_i = floor(t / c_i) for the smallest t with sum_i p_i floor(t / c_i) >= batch."""
    heap = [(float(ci), i) for i, ci in enumerate(c)]
    heapq.heapify(heap)
    counts, kept = np.zeros(len(c), dtype=np.int64), 0.0
    while True:
        t, i = heapq.heappop(heap)
        counts[i] += 1
        kept += p[i]
        while heap and heap[0][0] == t:  # every worker whose next attempt ends at the same t
            _, j = heapq.heappop(heap)
            counts[j] += 1
            kept += p[j]
            heapq.heappush(heap, ((counts[j] + 1) * float(c[j]), j))
        if kept >= batch * (1 - 1e-12):
            return counts
        heapq.heappush(heap, ((counts[i] + 1) * float(c[i]), i))


@register("asyncsgd-method", "mindflayer")
class MindFlayerSGD(RoundMethod):
    name = "mindflayer"
    planned = ("jobs", "budgets", "probabilities", "costs", "trials")
    options = Options(
        Option("quantile", float, None, "t_i is the q-quantile of worker i's compute time (None: the q with the "
                                        "smallest expected time per kept gradient)", low=0, low_open=True, high=1),
        Option("batch", int, None, "S: the kept gradients expected per step (None: max(1, ceil(sigma^2/eps)))",
               low=1))

    @classmethod
    def timing_options(cls, values, problem, epsilon, timing):
        batch = values["batch"] or theory.default_batch(problem.sigma2, epsilon)
        t, p, c = budgets(timing.compute, timing.n_workers, values["quantile"])
        return {"quantile": values["quantile"], "batch": batch, "budgets": t, "probabilities": p, "costs": c}

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        return theory.default_step_size("rennala", n_workers, problem.L, problem.sigma2, epsilon,
                                        batch=values["batch"])

    def __init__(self, x0, n_workers, step_size, quantile, batch, budgets, probabilities, costs):
        super().__init__(x0, n_workers, step_size)
        self.quantile, self.batch_size = quantile, int(batch)
        self.budgets, self.probabilities = np.asarray(budgets, float), np.asarray(probabilities, float)
        self.costs = np.asarray(costs, float)
        self.trials = trials(self.probabilities, self.costs, self.batch_size)
        self.normaliser = float(np.sum(self.probabilities * self.trials))
        self.participants = int(np.count_nonzero(self.trials))
        self.jobs = [Job(int(b), budget=float(t), trials=True) if b else None
                     for b, t in zip(self.trials, self.budgets)]

    def parameters(self):
        return {"step_size": self.step_size, "batch": self.batch_size, "quantile": self.quantile,
                "budgets": self.budgets.tolist(), "probabilities": self.probabilities.tolist(),
                "trials": self.trials.tolist()}

    def predicted(self, problem, timing, epsilon):
        effective = self.costs / self.probabilities
        return {"mindflayer": theory.predicted_times(effective, problem.sigma2, epsilon, problem.L,
                                                     problem.Delta)["rennala"]}

    def arrive(self, worker, grad, k_at):
        self.accepted[worker] += self.finished  # the attempts that finished within the budget
        if not self.keep(worker, grad, k_at):
            return ()
        self._step(self.round_total() / self.normaliser, self.step_size)
        return self.round_plan()
