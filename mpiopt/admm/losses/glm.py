"""Losses of the form f_i(x) = sum_j phi(a_j^T x, t_j): logistic and Huber.

Their x-step  argmin_x f_i(x) + (rho/2) ||x - v||^2  has no closed form and is
solved iteratively, warm-started from the previous x_i and stopped at the
gradient tolerance the engine passes (it tightens as ADMM converges, so early
iterations are cheap and the last ones exact; Boyd et al. 2011, section 4.3):

* ``lbfgs`` (default): scipy's L-BFGS-B; each iteration costs two products
  with A_i, O(m_i n);
* ``newton``: damped Newton with an Armijo line search on the exact Hessian
  A_i^T diag(phi'') A_i + rho I (O(m_i n^2) to form, then a Cholesky solve);
  few iterations, best when n is small.
"""
import numpy as np
from mpi4py import MPI

from ...core import backend
from ...core.registry import lookup, register, unknown
from .base import LossShard


class GLMLossShard(LossShard):
    iterative = True
    options = ("x_solver",)

    @classmethod
    def check(cls, targets, options):
        return unknown("x_solver", options["x_solver"])

    def __init__(self, design, targets, xp, x_solver="lbfgs"):
        super().__init__(design, xp)
        self.solve_x_step = lookup("x_solver", x_solver)
        self.targets = targets
        self.x_solver = x_solver
        self._x = xp.zeros(self.n)
        self.inner_iterations = 0

    # phi(margin, target) summed, and its first and second derivatives in the margin.
    def terms(self, margin):
        raise NotImplementedError

    def value(self, x):
        if not self.active:
            return 0.0
        return float(self.terms(self.design.matvec(x))[0])

    def gradient(self, x):
        return self.design.rmatvec(self.terms(self.design.matvec(x))[1])

    def prox(self, v, tolerance=None):
        """The x-step to gradient norm ``tolerance``; None (the first iteration): 1e-3 of the starting gradient."""
        if tolerance is None:
            tolerance = 1e-3 * float(self.xp.abs(self._subproblem(self._x, v)[1]).max())
        self._x = self.solve_x_step(self, v, self._x, tolerance)
        return self._x

    def _subproblem(self, x, v):
        margin = self.design.matvec(x)
        total, first, _ = self.terms(margin)
        difference = x - v
        value = float(total) + 0.5 * self.rho * float(difference @ difference)
        return value, self.design.rmatvec(first) + self.rho * difference

    def state(self):
        return {"x": self._x}

    def restore(self, state):
        if "x" in state:
            self._x = self.xp.asarray(state["x"], dtype=np.float64)
            if self._x.shape != (self.n,):
                raise ValueError(f"the x-step warm start has shape {self._x.shape}, expected ({self.n},)")


@register("x_solver", "lbfgs")
def lbfgs_x_step(shard, v, x, tolerance):
    """scipy's L-BFGS-B on the x-step's objective from the warm start x, to gradient norm ``tolerance``."""
    import scipy.optimize
    result = scipy.optimize.minimize(shard._subproblem, x, args=(v,), jac=True, method="L-BFGS-B",
                                     options={"gtol": tolerance, "ftol": 0.0, "maxiter": 10000, "maxcor": 20})
    shard.inner_iterations += result.nit
    return result.x


@register("x_solver", "newton")
def newton_x_step(shard, v, x, tolerance, max_iter=100):
    """Damped Newton with an Armijo line search on the exact Hessian A^T diag(phi'') A + rho I."""
    xp = shard.xp
    value, gradient = shard._subproblem(x, v)
    for _ in range(max_iter):
        if float(xp.abs(gradient).max()) <= tolerance:
            break
        _, _, second = shard.terms(shard.design.matvec(x))
        hessian = shard.design.gram(weights=second)
        hessian[xp.diag_indices_from(hessian)] += shard.rho
        step = backend.cholesky_solve(xp, backend.cholesky(xp, hessian), gradient)
        decrease = float(gradient @ step)
        scale = 1.0
        while True:
            candidate = x - scale * step
            candidate_value, candidate_gradient = shard._subproblem(candidate, v)
            if candidate_value <= value - 1e-4 * scale * decrease or scale < 1e-10:
                break
            scale *= 0.5
        x, value, gradient = candidate, candidate_value, candidate_gradient
        shard.inner_iterations += 1
    return x


@register("loss", "logistic")
class LogisticLossShard(GLMLossShard):
    """f_i(x) = sum_j log(1 + exp(-y_j a_j^T x)) with labels y_j in {-1, +1}."""

    name = "logistic"
    target_name = "y_local"
    curvature_bound = 0.25

    @classmethod
    def check(cls, targets, options):
        values = set(np.unique(backend.to_host(targets)).tolist())
        if not values <= {-1.0, 1.0} and not values <= {0.0, 1.0}:
            return f"labels must be in {{-1, 1}} or {{0, 1}}, got values {sorted(values)[:5]}"
        return super().check(targets, options)

    @classmethod
    def prepare_targets(cls, b, xp):
        return xp.where(b > 0, 1.0, -1.0)

    @classmethod
    def null_intercept(cls, targets, comm, options):
        """The log-odds of the positive labels over every rank's rows."""
        count = comm.allreduce(int(targets.shape[0]))
        positive = comm.allreduce(int((targets > 0).sum())) / count
        positive = min(max(positive, 1e-12), 1 - 1e-12)
        return float(np.log(positive / (1 - positive)))

    def terms(self, margin):
        xp, y = self.xp, self.targets
        signed = y * margin
        total = xp.logaddexp(0.0, -signed).sum()
        probability = 0.5 * (1.0 + xp.tanh(-0.5 * signed))  # sigmoid(-y m), stable for large |m|
        return total, -y * probability, probability * (1.0 - probability)


@register("loss", "huber")
class HuberLossShard(GLMLossShard):
    """f_i(x) = sum_j huber_delta(a_j^T x - b_j): quadratic within delta, linear beyond (robust regression)."""

    name = "huber"
    curvature_bound = 1.0
    options = ("delta", "x_solver")

    @classmethod
    def check(cls, targets, options):
        delta = options["delta"]
        if not (isinstance(delta, (int, float, np.integer, np.floating)) and not isinstance(delta, bool)
                and delta > 0):
            return f"delta must be > 0, got {delta!r}"
        return super().check(targets, options)

    @classmethod
    def null_intercept(cls, targets, comm, options):
        """Bisection on the monotone derivative sum_j psi(c - b_j) over every rank's rows."""
        delta = options["delta"]
        low = comm.allreduce(float(targets.min()) if targets.size else np.inf, op=MPI.MIN)
        high = comm.allreduce(float(targets.max()) if targets.size else -np.inf, op=MPI.MAX)
        for _ in range(100):
            middle = 0.5 * (low + high)
            slope = comm.allreduce(float(np.clip(middle - targets, -delta, delta).sum()))
            low, high = (middle, high) if slope < 0 else (low, middle)
        return 0.5 * (low + high)

    def __init__(self, design, targets, xp, delta=1.0, x_solver="lbfgs"):
        super().__init__(design, targets, xp, x_solver)
        self.delta = float(delta)

    def terms(self, margin):
        xp, delta = self.xp, self.delta
        residual = margin - self.targets
        size = xp.abs(residual)
        inside = size <= delta
        total = xp.where(inside, 0.5 * residual * residual, delta * (size - 0.5 * delta)).sum()
        return total, xp.clip(residual, -delta, delta), inside.astype(residual.dtype)
