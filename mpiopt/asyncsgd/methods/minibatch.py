"""Minibatch SGD: every worker computes one gradient at the same point; one synchronous step.

    x_{k+1} = x_k - gamma (1/n) sum_{i=1}^n g_i(x_k)

Each step waits for the slowest worker, so it takes tau_n (the largest time):
T_MB = tau_n (L Delta / eps)(1 + S / n) (see :mod:`..theory`).  Default
gamma = min(1/(2L), eps n / (4 L sigma^2)).  Per step the server receives n
gradients and sends the new point to n workers: n d words each way.

With ``compressor`` (:mod:`..uploads`) each worker uploads its gradient
compressed (Random-K or QSGD, unbiased with variance parameter omega): the
Shadowheart paper's compressed baseline; the step is then
gamma = min(1/(2L (1 + omega/n)), eps n / (4 L (1 + omega) sigma^2)).
"""
import math

from ...core.registry import register
from .. import theory
from ..base import ALL, Accumulator, Method
from ..jobs import PLAIN
from ..uploads import UPLOAD_OPTIONS, omega, upload_job


@register("asyncsgd-method", "minibatch")
class MinibatchSGD(Method):
    """A step takes one gradient from every worker, sent densely or compressed."""

    name = "minibatch"
    options = UPLOAD_OPTIONS

    @classmethod
    def theory_options(cls, values, problem, epsilon):
        job = upload_job(values, problem.dim)
        return {"upload": job, "omega": omega(job, problem.dim), "compressor": values["compressor"]}

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        w = values.get("omega", 0.0)
        if not w:
            return theory.default_step_size("minibatch", n_workers, problem.L, problem.sigma2, epsilon)
        noise = math.inf if problem.sigma2 == 0 else epsilon * n_workers / (4 * problem.L * (1 + w) * problem.sigma2)
        return min(1 / (2 * problem.L * (1 + w / n_workers)), noise)

    def __init__(self, x0, n_workers, step_size, upload=None, omega=0.0, compressor=None):
        super().__init__(x0, n_workers, step_size)
        self.batch = Accumulator(self.x.size)
        self.upload, self.omega, self.compressor = upload, float(omega), compressor
        self.uses_jobs = upload is not None

    def parameters(self):
        if self.upload is None:
            return {"step_size": self.step_size}
        return {"step_size": self.step_size, "compressor": self.compressor, "omega": self.omega,
                **({"coordinates": self.upload.coordinates} if self.upload.messages else {})}

    def state(self, skip=()):
        return super().state(skip=("upload", *skip))

    def job(self, worker):
        return self.upload or PLAIN

    def arrive(self, worker, grad, k_at):
        if k_at != self.k:  # every worker computes at x_k and nothing is cancelled: a runtime bug
            raise RuntimeError(f"minibatch SGD: worker {worker} sent a gradient of step {k_at} at step {self.k}")
        self.batch.add(grad)
        self.accepted[worker] += 1
        if self.batch.count < self.n_workers:
            return ()
        self._step(self.batch.take(), self.step_size)
        return ALL
