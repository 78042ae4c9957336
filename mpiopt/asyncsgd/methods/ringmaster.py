"""Ringmaster ASGD (Maranjyan, Tyurin and Richtarik, "Ringmaster ASGD: the first asynchronous SGD with
optimal time complexity", ICML 2025).

Asynchronous SGD that discards a gradient whose delay is R or more:

    delta_k = k - k_at;  if delta_k < R:  x_{k+1} = x_k - gamma g(x_{k_at}),  else: discard

and the worker starts again at the current point.  With R = max(1,
ceil(sigma^2/eps)) and gamma = min(1/(2RL), eps/(4 L sigma^2)) its time is the
optimal T_R of :mod:`..theory`, without knowing the workers' speeds.

``stop_computations=True`` is the paper's variant with calculation stops: as
soon as a worker's delay reaches R (its gradient could only be discarded) the
server stops its computation and restarts it at the current point, so no time
is spent on gradients that would be thrown away.  R = inf is Asynchronous SGD.
Per accepted or discarded gradient the server receives d words and sends d.
"""
import math

from ...core.options import Option, Options
from ...core.registry import register
from ...core.settings import is_integer
from .. import theory
from ..base import ALL, Method


@register("asyncsgd-method", "ringmaster")
class RingmasterASGD(Method):
    name = "ringmaster"
    # R is an integer or inf, which a declared float (finite) or int cannot say: check_options checks it
    options = Options(
        Option("threshold", object, None,
               "delay threshold R, an integer >= 1 or inf (None: max(1, ceil(sigma^2/epsilon)))"),
        Option("stop_computations", bool, False, "stop a worker's gradient once its delay reaches R"))

    @classmethod
    def check_options(cls, values):
        threshold = values.get("threshold")
        if threshold is None or (is_integer(threshold) and threshold >= 1) or threshold == math.inf:
            return None
        return f"{cls.owner()}: threshold must be None, an integer >= 1 or inf, got {threshold!r}"

    @classmethod
    def theory_options(cls, values, problem, epsilon):
        return {**values, "threshold": values["threshold"] or theory.default_batch(problem.sigma2, epsilon)}

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        return theory.default_step_size("ringmaster", n_workers, problem.L, problem.sigma2, epsilon,
                                        threshold=values["threshold"])

    def __init__(self, x0, n_workers, step_size, threshold, stop_computations=False):
        super().__init__(x0, n_workers, step_size)
        self.threshold = threshold if math.isinf(threshold) else int(threshold)
        self.stop_computations = bool(stop_computations)
        self._started = {}  # with stops: step -> workers computing at it

    def parameters(self):
        return {"step_size": self.step_size, "threshold": self.threshold,
                "stop_computations": self.stop_computations}

    def state(self, skip=()):
        arrays, values = super().state(skip=("_started", *skip))
        values["_started"] = {str(k): sorted(workers) for k, workers in self._started.items()}
        return arrays, values

    def load_state(self, arrays, values):
        values = dict(values)
        self._started = {int(k): set(workers) for k, workers in values.pop("_started").items()}
        super().load_state(arrays, values)

    def start(self):
        if self.stop_computations:
            self._started = {0: set(range(self.n_workers))}
        return ALL

    def arrive(self, worker, grad, k_at):
        if self.stop_computations:
            self._started.get(k_at, set()).discard(worker)
        if self.k - k_at < self.threshold:
            self.accepted[worker] += 1
            self._step(grad, self.step_size)
        else:
            self.discarded[worker] += 1
        restart = [worker]
        if self.stop_computations:
            if not math.isinf(self.threshold):  # those whose delay has just reached R
                restart += sorted(self._started.pop(self.k - self.threshold, ()))
            self._started.setdefault(self.k, set()).update(restart)
        return restart
