"""Fragile SGD (Tyurin and Richtarik, "On the optimal time complexities in decentralized stochastic
asynchronous optimization", NeurIPS 2024): Rennala's rounds on a graph, around a pivot.

The workers sit on a graph with a time rho per vector and edge (:mod:`..graphs`);
a vector from i to j takes the shortest-path time tau_{i->j}.  The pivot j
holds x_k and broadcasts it on its shortest-path tree; every worker computes
stochastic gradients at x_k one after another and sends partial sums back up
the tree; the pivot steps as soon as S gradients computed at x_k have reached
it, then broadcasts x_{k+1}:

    x_{k+1} = x_k - gamma (1/B) sum_{l<=B} g_l(x_k),   B >= S = max(ceil(sigma^2/eps), 1),  gamma = 1/(2L)

By default the sums travel as in the paper's Algorithm 4 (``links="paper"``,
:mod:`..treelinks`): each worker sends its accumulated sum to its parent, one
message per link at a time, the parents add what arrives, and the pivot steps
with the B >= S gradients it holds once it holds S.  ``links="uncongested"``
prices worker i's k-th gradient of a round as reaching the pivot at t_round +
tau_{j->i} + h_i1 + ... + h_ik + tau_{i->j} (:class:`.graphs.TreeJobs`).  Either
way a worker too far away never contributes (the fragile ones), which no
worker has to decide.  The pivot is the formula's:

    T_Fragile = (L Delta / eps) min_j t*(S, h, tau_{.->j} + tau_{j->.})
    t*(S, h, tau) = min_k max{max(tau_pi_k, h_pi_k), S (sum_{i<=k} 1/h_pi_i)^(-1)}

(constants dropped), optimal up to a log(n + 1) factor on the one-way times.
Per step the pivot receives B gradients in partial sums, and x crosses every
tree edge once.  Both runtimes price the tree's times as delays of the jobs
(under the paper's links each contributing worker's one job of the round);
on MPI the vectors also travel along the tree's edges, over a
distributed-graph topology of the graph (:mod:`..routes`).
"""
import math

import numpy as np

from ...core.options import Option, Options
from ...core.registry import register
from .. import theory
from ..graphs import LINKS, TreeJobs, best_pivot, equilibrium, graph_of
from .rennala import RennalaSGD


@register("asyncsgd-method", "fragile")
class FragileSGD(TreeJobs, RennalaSGD):
    name = "fragile"
    uses_jobs = True
    reference = False  # Rennala's rounds, but on a graph: not the comparison's yardstick
    options = Options(
        Option("batch", int, None, "S, gradients per step (None: max(1, ceil(sigma^2/epsilon)))", low=1),
        Option("pivot", int, None, "the pivot worker (None: the one of least predicted time)", low=0), LINKS)

    @classmethod
    def timing_options(cls, values, problem, epsilon, timing):
        graph = graph_of(cls, timing)
        h = timing.plain_model().mean(np.arange(1, timing.n_workers + 1))
        batch = values["batch"] or theory.default_batch(problem.sigma2, epsilon)
        pivot = best_pivot(graph, h, batch)[1] if values["pivot"] is None else values["pivot"]
        return {"batch": batch, **cls.tree_options(graph, pivot, values["links"], timing)}

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        return 1 / (2 * problem.L)

    def __init__(self, x0, n_workers, step_size, batch, pivot, before, after, links, parent, up, timing, seed=0):
        super().__init__(x0, n_workers, step_size, batch, restart=True)
        self._tree_jobs(pivot, before, after, links, parent, up, timing, seed)

    def tree_rule(self, counts):
        """The paper's round: the pivot steps once it holds S gradients."""
        return counts.sum() >= self.batch_size

    def tree_step(self, sums, counts):
        """x_{k+1} = x_k - gamma (1/B) sum of the B gradients held, B >= S, the workers' sums in worker order."""
        total = np.zeros(self.x.size)
        for worker in np.flatnonzero(counts):
            total += sums[worker]
        self._step(total / counts.sum(), self.step_size)

    def parameters(self):
        return {"step_size": self.step_size, "batch": self.batch_size, **self.tree_parameters()}

    @classmethod
    def predicted_time(cls, problem, timing, epsilon):
        """On a graph, every run's table has T_Fragile at the best pivot and the papers' lower bound."""
        if timing.graph is None:
            return {}
        means = timing.plain_model().mean(np.arange(1, timing.n_workers + 1))
        args = (timing.graph, means, problem.sigma2, epsilon, problem.L, problem.Delta)
        return {"fragile": fragile_time(*args)[0], "fragile_lower_bound": fragile_lower_bound(*args)}

    def predicted(self, problem, timing, epsilon):
        """At this run's pivot and S (the run's table has the best pivot's, for S from sigma^2/eps)."""
        h = timing.plain_model().mean(np.arange(1, self.n_workers + 1))
        value = equilibrium(self.batch_size, h, self.before + self.after)
        return {"fragile": float(problem.L * problem.Delta / epsilon * value)}


def fragile_time(graph, h, sigma2, epsilon, L, Delta):
    """(T_Fragile, the pivot): (L Delta/eps) min_j t*(S, h, tau_{.->j} + tau_{j->.}), S = max(ceil(sigma^2/eps), 1)."""
    value, pivot = best_pivot(graph, h, max(math.ceil(sigma2 / epsilon), 1))
    return float(L * Delta / epsilon * value), pivot


def fragile_lower_bound(graph, h, sigma2, epsilon, L, Delta):
    """The papers' lower bound for the homogeneous setup (constants dropped): (L Delta/eps) min_j t*(sigma^2/eps,
    h, tau_{.->j} / log(n + 1)), the one-way times to each j shrunk by the natural log(n + 1); Fragile's time
    is within that log of it."""
    tau, S = graph.times(), sigma2 / epsilon
    shrink = math.log(graph.n + 1)
    return float(L * Delta / epsilon * min(equilibrium(S, h, tau[:, j] / shrink) for j in range(graph.n)))
