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

from ...core import backend
from .base import LossShard

X_SOLVERS = ("lbfgs", "newton")


class GLMLossShard(LossShard):
    iterative = True

    def __init__(self, design, targets, xp, x_solver="lbfgs"):
        super().__init__(design, xp)
        if x_solver not in X_SOLVERS:
            raise ValueError(f"x_solver must be one of {', '.join(X_SOLVERS)}, got {x_solver!r}")
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

    def gradient_at_zero(self):
        return self.gradient(self.xp.zeros(self.n))

    def prox(self, v, tolerance=None):
        """The x-step to gradient norm ``tolerance``; None (the first iteration): 1e-3 of the starting gradient."""
        if tolerance is None:
            tolerance = 1e-3 * float(self.xp.abs(self._subproblem(self._x, v)[1]).max())
        solve = self._newton if self.x_solver == "newton" else self._lbfgs
        self._x = solve(v, self._x, tolerance)
        return self._x

    def _subproblem(self, x, v):
        margin = self.design.matvec(x)
        total, first, _ = self.terms(margin)
        difference = x - v
        value = float(total) + 0.5 * self.rho * float(difference @ difference)
        return value, self.design.rmatvec(first) + self.rho * difference

    def _lbfgs(self, v, x, tolerance):
        import scipy.optimize
        result = scipy.optimize.minimize(self._subproblem, x, args=(v,), jac=True, method="L-BFGS-B",
                                         options={"gtol": tolerance, "ftol": 0.0, "maxiter": 10000, "maxcor": 20})
        self.inner_iterations += result.nit
        return result.x

    def _newton(self, v, x, tolerance, max_iter=100):
        xp = self.xp
        value, gradient = self._subproblem(x, v)
        for _ in range(max_iter):
            if float(xp.abs(gradient).max()) <= tolerance:
                break
            _, _, second = self.terms(self.design.matvec(x))
            hessian = self.design.gram(weights=second)
            hessian[xp.diag_indices_from(hessian)] += self.rho
            step = backend.cholesky_solve(xp, backend.cholesky(xp, hessian), gradient)
            decrease = float(gradient @ step)
            scale = 1.0
            while True:
                candidate = x - scale * step
                candidate_value, candidate_gradient = self._subproblem(candidate, v)
                if candidate_value <= value - 1e-4 * scale * decrease or scale < 1e-10:
                    break
                scale *= 0.5
            x, value, gradient = candidate, candidate_value, candidate_gradient
            self.inner_iterations += 1
        return x

    def state(self):
        return {"x": self._x}

    def restore(self, state):
        if "x" in state:
            self._x = self.xp.asarray(state["x"], dtype=np.float64)
            if self._x.shape != (self.n,):
                raise ValueError(f"the x-step warm start has shape {self._x.shape}, expected ({self.n},)")


class LogisticLossShard(GLMLossShard):
    """f_i(x) = sum_j log(1 + exp(-y_j a_j^T x)) with labels y_j in {-1, +1}."""

    name = "logistic"
    curvature_bound = 0.25

    def terms(self, margin):
        xp, y = self.xp, self.targets
        signed = y * margin
        total = xp.logaddexp(0.0, -signed).sum()
        probability = 0.5 * (1.0 + xp.tanh(-0.5 * signed))  # sigmoid(-y m), stable for large |m|
        return total, -y * probability, probability * (1.0 - probability)


class HuberLossShard(GLMLossShard):
    """f_i(x) = sum_j huber_delta(a_j^T x - b_j): quadratic within delta, linear beyond (robust regression)."""

    name = "huber"
    curvature_bound = 1.0

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
