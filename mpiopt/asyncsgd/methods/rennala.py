"""Rennala SGD (Tyurin and Richtarik, "Optimal time complexities of parallel stochastic optimization
methods under a fixed computation model", NeurIPS 2023).

The server collects B gradients computed at the current point x_k, from any
workers (a fast worker contributes several), ignoring gradients computed at an
older point; then it steps and every worker restarts at x_{k+1}:

    x_{k+1} = x_k - gamma (1/B) sum_{j=1}^B g_j(x_k)

With B = max(1, ceil(sigma^2/eps)) and gamma = min(1/(2L), eps B/(4 L sigma^2))
its time is T_R = min_m (1/m sum_{i<=m} 1/tau_i)^(-1) (L Delta/eps)(1 + S/m),
the lower bound: Rennala is optimal.  Per step the server receives B
gradients and, on restart, sends x_{k+1} to all n workers.

``restart=False`` lets workers finish what they compute; their late gradients
(computed at an older point) are then counted as discarded on arrival.
"""
from ...core.options import Option, Options
from ...core.registry import register
from .. import theory
from ..base import ALL, Accumulator, Method


@register("asyncsgd-method", "rennala")
class RennalaSGD(Method):
    name = "rennala"
    reference = True  # optimal: the comparison's times are given beside Rennala's
    options = Options(
        Option("batch", int, None, "B, gradients per step (None: max(1, ceil(sigma^2/epsilon)))", low=1),
        Option("restart", bool, True, "after a step every worker restarts at the new point"))

    @classmethod
    def theory_options(cls, values, problem, epsilon):
        return {**values, "batch": values["batch"] or theory.default_batch(problem.sigma2, epsilon)}

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        return theory.default_step_size("rennala", n_workers, problem.L, problem.sigma2, epsilon,
                                        batch=values["batch"])

    def __init__(self, x0, n_workers, step_size, batch, restart=True):
        super().__init__(x0, n_workers, step_size)
        self.batch_size, self.restart = int(batch), bool(restart)
        self.batch = Accumulator(self.x.size)

    def parameters(self):
        return {"step_size": self.step_size, "batch": self.batch_size, "restart": self.restart}

    def arrive(self, worker, grad, k_at):
        if k_at != self.k:
            self.discarded[worker] += 1
            return [worker]
        self.batch.add(grad)
        self.accepted[worker] += 1
        if self.batch.count < self.batch_size:
            return [worker]
        self._step(self.batch.take(), self.step_size)
        return ALL if self.restart else [worker]
