"""Asynchronous SGD: the server steps on every gradient as it arrives, computed at a stale point.

    x_{k+1} = x_k - gamma_k g(x_{k - delta_k}),   delta_k = k - (the step the worker started from)

and the worker starts again at x_{k+1}.  With a constant step gamma =
min(1/(2nL), eps/(4 L sigma^2)) (Koloskova, Stich and Jaggi, "Sharper
convergence guarantees for asynchronous SGD for distributed and federated
learning", NeurIPS 2022; Mishchenko, Bach, Even and Woodworth, "Asynchronous
SGD beats minibatch SGD under arbitrary delays", NeurIPS 2022) its time is
T_A = (1/n sum_i 1/tau_i)^(-1) (L Delta/eps)(1 + S/n).

``delay_adaptive=True`` uses gamma_k = min(gamma, 1/(2 L delta_k)): a gradient
only moves the point as far as its delay allows, so the slow workers' very
stale gradients cannot undo the progress of the fast ones (the rule of the
delay-adaptive analyses above).  Per gradient the server receives d words and
sends d words back.

With ``compressor`` (:mod:`..uploads`) each gradient is uploaded compressed
(Random-K or QSGD, variance parameter omega) and the constant step becomes
gamma = min(1/(2 n L (1 + omega)), eps / (4 L (1 + omega) sigma^2)).
"""
import math

from ...core.options import Option, Options
from ...core.registry import register
from .. import theory
from ..base import Method
from ..jobs import PLAIN
from ..uploads import UPLOAD_OPTIONS, omega, upload_job


@register("asyncsgd-method", "asgd")
class AsynchronousSGD(Method):
    name = "asgd"
    options = Options(
        Option("delay_adaptive", bool, True, "gamma_k = min(gamma, 1/(2 L delay_k)); false: a constant step")
    ) + UPLOAD_OPTIONS

    @classmethod
    def theory_options(cls, values, problem, epsilon):
        job = upload_job(values, problem.dim)
        return {"delay_adaptive": values["delay_adaptive"], "L": problem.L, "upload": job,
                "omega": omega(job, problem.dim), "compressor": values["compressor"]}

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        w = values.get("omega", 0.0)
        if not w:
            return theory.default_step_size("asgd", n_workers, problem.L, problem.sigma2, epsilon)
        noise = math.inf if problem.sigma2 == 0 else epsilon / (4 * problem.L * (1 + w) * problem.sigma2)
        return min(1 / (2 * n_workers * problem.L * (1 + w)), noise)

    def __init__(self, x0, n_workers, step_size, L=None, delay_adaptive=False, upload=None, omega=0.0,
                 compressor=None):
        super().__init__(x0, n_workers, step_size)
        if delay_adaptive and not (L and L > 0):
            raise ValueError("the delay-adaptive step size needs the smoothness constant L > 0")
        self.L, self.delay_adaptive = L, bool(delay_adaptive)
        self.upload, self.omega, self.compressor = upload, float(omega), compressor
        self.uses_jobs = upload is not None

    def parameters(self):
        if self.upload is None:
            return {"step_size": self.step_size, "delay_adaptive": self.delay_adaptive}
        return {"step_size": self.step_size, "delay_adaptive": self.delay_adaptive, "compressor": self.compressor,
                "omega": self.omega, **({"coordinates": self.upload.coordinates} if self.upload.messages else {})}

    def state(self, skip=()):
        return super().state(skip=("upload", *skip))

    def job(self, worker):
        return self.upload or PLAIN

    def gamma(self, delay):
        if self.delay_adaptive and delay > 0:
            return min(self.step_size, 1 / (2 * self.L * delay))
        return self.step_size

    def arrive(self, worker, grad, k_at):
        self.accepted[worker] += 1
        self._step(grad, self.gamma(self.k - k_at))
        return [worker]
