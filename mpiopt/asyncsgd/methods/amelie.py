"""Amelie SGD (Tyurin and Richtarik, "On the optimal time complexities in decentralized stochastic
asynchronous optimization", NeurIPS 2024): Malenia's rounds on a graph, for heterogeneous data.

Worker i holds f_i and f = (1/n) sum_i f_i, so every worker must be heard
from.  As in Fragile SGD (:mod:`.fragile`) the pivot broadcasts x_k on its
shortest-path tree and the workers' partial sums come back along it (under
the same link models, ``links``); the
pivot keeps a sum g_i and a count B_i per worker and steps once every B_i >= 1
and (1/n sum_i 1/B_i)^(-1) >= S/n, S = max(ceil(sigma^2/eps), n):

    x_{k+1} = x_k - gamma (1/n) sum_i g_i / B_i,     gamma = 1/(2L)

Its time, optimal for heterogeneous data (constants dropped):

    T_Amelie = (L Delta / eps) max{max_{i,j} tau_{i->j}, max_i h_i, (sigma^2 / (n eps)) (1/n) sum_i h_i}

Every run on a graph has T_Amelie among its predicted times (``predicted_time``).
The pivot by default is the graph's centre (the least max_i tau_{j->i} +
tau_{i->j}), which the slowest round trip bounds.  Per step the pivot receives
sum_i B_i gradients in partial sums, and x crosses every tree edge once.
"""
import numpy as np

from ...core.options import Option, Options
from ...core.registry import register
from ..graphs import LINKS, TreeJobs, graph_of
from .malenia import MaleniaSGD, malenia_batch


@register("asyncsgd-method", "amelie")
class AmelieSGD(TreeJobs, MaleniaSGD):
    name = "amelie"
    uses_jobs = True
    options = Options(
        Option("batch", int, None, "S: stop collecting once (1/n sum 1/B_i)^(-1) >= S/n (None: max(ceil("
                                   "sigma^2/eps), n))", low=1),
        Option("pivot", int, None, "the pivot worker (None: the graph's centre)", low=0), LINKS)

    @classmethod
    def timing_options(cls, values, problem, epsilon, timing):
        graph = graph_of(cls, timing)
        tau = graph.times()
        pivot = int(np.argmin(np.max(tau + tau.T, axis=1))) if values["pivot"] is None else values["pivot"]
        return {"batch": values["batch"] or malenia_batch(problem.sigma2, epsilon, timing.n_workers),
                **cls.tree_options(graph, pivot, values["links"], timing)}

    @classmethod
    def predicted_time(cls, problem, timing, epsilon):
        """On a graph, every run's table has T_Amelie."""
        if timing.graph is None:
            return {}
        means = timing.plain_model().mean(np.arange(1, timing.n_workers + 1))
        return {"amelie": amelie_time(timing.graph, means, problem.sigma2, epsilon, problem.L, problem.Delta)}

    def __init__(self, x0, n_workers, step_size, batch, pivot, before, after, links, parent, up, timing, seed=0):
        super().__init__(x0, n_workers, step_size, batch)
        self._tree_jobs(pivot, before, after, links, parent, up, timing, seed)

    def tree_rule(self, counts):
        """Malenia's rule on the pivot's counts: every B_i >= 1 and (1/n sum 1/B_i)^(-1) >= S/n."""
        return bool(np.all(counts > 0)) and self.n_workers / np.sum(1.0 / counts) >= self.batch_size / self.n_workers

    def tree_step(self, sums, counts):
        """x_{k+1} = x_k - gamma (1/n) sum_i g_i / B_i, in worker order."""
        direction = np.zeros(self.x.size)
        for i in range(self.n_workers):
            direction += sums[i] / counts[i]
        self._step(direction / self.n_workers, self.step_size)

    def parameters(self):
        return {"step_size": self.step_size, "batch": self.batch_size, **self.tree_parameters()}


def amelie_time(graph, h, sigma2, epsilon, L, Delta):
    """T_Amelie = (L Delta/eps) max{max_ij tau_{i->j}, max_i h_i, sigma^2/(n eps) mean(h)}."""
    h, n = np.asarray(h, dtype=np.float64), graph.n
    return float(L * Delta / epsilon * max(float(graph.times().max()), float(h.max()),
                                          sigma2 / (n * epsilon) * float(h.mean())))
