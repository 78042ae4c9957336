"""Minibatch SGD: every worker computes one gradient at the same point; one synchronous step.

    x_{k+1} = x_k - gamma (1/n) sum_{i=1}^n g_i(x_k)

Each step waits for the slowest worker, so it takes tau_n (the largest time):
T_MB = tau_n (L Delta / eps)(1 + S / n) (see :mod:`.theory`).  Default
gamma = min(1/(2L), eps n / (4 L sigma^2)).  Per step the server receives n
gradients and sends the new point to n workers: n d words each way.
"""
from ..core.registry import register
from . import theory
from .base import ALL, Accumulator, Method


@register("asyncsgd-method", "minibatch")
class MinibatchSGD(Method):
    """No options beyond the step size: a step takes one gradient from every worker."""

    name = "minibatch"

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        return theory.default_step_size("minibatch", n_workers, problem.L, problem.sigma2, epsilon)

    def __init__(self, x0, n_workers, step_size):
        super().__init__(x0, n_workers, step_size)
        self.batch = Accumulator(self.x.size)

    def arrive(self, worker, grad, k_at):
        if k_at != self.k:  # every worker computes at x_k and nothing is cancelled: a runtime bug
            raise RuntimeError(f"minibatch SGD: worker {worker} sent a gradient of step {k_at} at step {self.k}")
        self.batch.add(grad)
        self.accepted[worker] += 1
        if self.batch.count < self.n_workers:
            return ()
        self._step(self.batch.take(), self.step_size)
        return ALL
