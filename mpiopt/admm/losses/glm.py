"""Losses of the form f_i(x) = sum_j phi(a_j^T x, t_j): logistic and Huber.

Their x-step  argmin_x f_i(x) + (rho/2) ||x - v||^2  has no closed form and is
solved iteratively, warm-started from the previous x_i and stopped at the
gradient tolerance the engine passes (it tightens as ADMM converges, so early
iterations are cheap and the last ones exact; Boyd et al. 2011, section 4.3):

* ``lbfgs`` (default): scipy's L-BFGS-B on numpy arrays; on CuPy arrays the
  same method written with array operations only (:func:`array_lbfgs`: the
  two-loop recursion with an Armijo backtracking search, everything on the
  GPU but the scalars of the line search and the stopping test); each
  iteration costs two products with A_i, O(m_i n);
* ``newton``: damped Newton with an Armijo line search on the exact Hessian
  A_i^T diag(phi'') A_i + rho I: for a tall shard its Cholesky factor
  (O(m_i n^2) to form, O(n^3) to factor), for a wide shard (m_i < n) the
  matrix inversion lemma, which factors only the m_i x m_i matrix
  rho I + D^(1/2) A_i A_i^T D^(1/2) (A_i A_i^T is formed once);
  few iterations, best when n or m_i is small.

Both run unchanged on numpy or CuPy arrays (Cholesky through cuSOLVER on the GPU).
"""
import math

import numpy as np
from mpi4py import MPI

from ...core import backend
from ...core.options import Option, Options
from ...core.registry import lookup, options_problem, register, unknown
from .base import LossShard, balance_signs, host_allreduce, quadratic_dual_value


class GLMLossShard(LossShard):
    iterative = True
    options = Options(
        Option("x_solver", str, "lbfgs", "the x-step's solver, a registered x_solver (lbfgs, newton, ...)"),
        Option("x_solver_options", dict, None, "a dict of the x_solver's own options (None: its defaults)",
               message="{name} must be a dict of the x_solver's options or None, got {value!r}"))

    @classmethod
    def check(cls, targets, options):
        return unknown("x_solver", options["x_solver"]) or options_problem("x_solver", options["x_solver"],
                                                                           options["x_solver_options"] or {})

    def __init__(self, design, targets, xp, x_solver, x_solver_options):
        super().__init__(design, xp)
        self.solve_x_step = lookup("x_solver", x_solver)
        self.targets = targets
        self.x_solver = x_solver
        self.x_solver_options = dict(x_solver_options or {})
        self._x = xp.zeros(self.n)
        self._outer = None  # A_aug A_aug^T of a wide shard, for Newton's matrix-inversion-lemma step
        self._hessian = None  # Newton's factored Hessian (kept for later directions while it serves)
        self.inner_iterations = 0

    # phi(margin, target) summed, and its first and second derivatives in the margin.
    def terms(self, margin):
        raise NotImplementedError

    # A loss of this family with a dual (its ``dual_concavity`` set) gives ``dual_residual(margin)`` (f_i and
    # theta = -phi'(margin)), ``dual_terms(theta)`` (its two sums and the state for ``dual_value``) and
    # ``dual_value``; the dual point's pass and all-reduce are shared here.
    def dual_sums(self, z, comm, intercept, theta_wanted, margin, dual_margin=None):
        """(the all-reduced [A^T theta, loss value, the two sums of ``dual_terms``], its state, theta) at z,
        theta balanced with an intercept (losses/base.py); theta from ``dual_margin`` when given."""
        xp, design, n, active = self.xp, self.design, self.n, self.active
        theta = state = None
        if active:
            margin = design.matvec(z) if margin is None else margin
            if dual_margin is None:
                value, theta = self.dual_residual(margin)
            else:  # f(z) alone at z's margins, theta at the other point's
                value, theta = self.margin_value(margin), self.dual_theta(dual_margin)
        if intercept:
            theta = balance_signs(theta, comm, xp, active)
        buffer = xp.zeros(n + 3)  # A^T theta and the scalar sums: one allreduce of n + 3 numbers
        if active:
            buffer[n] = value
            buffer[:n] = design.rmatvec(theta)
            (buffer[n + 1], buffer[n + 2]), state = self.dual_terms(theta)
        return host_allreduce(comm, backend.to_host(buffer)), state, theta

    def dual_theta(self, margin):
        """theta = -phi'(margin) alone (``dual_residual`` without the loss value)."""
        return self.dual_residual(margin)[1]

    def value(self, x):
        if not self.active:
            return 0.0
        return float(self.terms(self.design.matvec(x))[0])

    def margin_value(self, margin):
        """sum_j phi(margin_j, t_j) alone (a line search's trial)."""
        return float(self.terms(margin)[0])

    def gradient(self, x):
        return self.design.rmatvec(self.terms(self.design.matvec(x))[1])

    def prox(self, v, tolerance=None):
        """The x-step to gradient norm ``tolerance``; None (the first iteration): 1e-3 of the starting gradient."""
        if tolerance is None:
            tolerance = 1e-3 * float(self.xp.abs(self._subproblem(self._x, v)[1]).max())
        self._x = self.solve_x_step(self, v, self._x, tolerance, **self.x_solver_options)
        return self._x

    def _subproblem(self, x, v):
        margin = self.design.matvec(x)
        total, first, _ = self.terms(margin)
        difference = x - v
        value = float(total) + 0.5 * self.rho * float(difference @ difference)
        return value, self.design.rmatvec(first) + self.rho * difference

    def newton_direction(self, x, gradient, fresh=True):
        """H^{-1} gradient with H = A^T diag(phi''(A x)) A + rho I, the x-step's Hessian at x.

        Tall shard: the Cholesky factor of H (n x n).  Wide shard (rows < n): with
        B = D^(1/2) A, H^{-1} = (I - B^T (rho I + B B^T)^{-1} B) / rho (matrix inversion
        lemma), so only the rows x rows matrix rho I + D^(1/2) (A A^T) D^(1/2) is factored.

        ``fresh=False``: the last factored Hessian (at an earlier x, the same rho) when there is one: a
        positive definite approximation, so still a descent direction, without the m n^2 work of forming
        it (``newton_x_step`` decides when it has gone stale).
        """
        xp, design = self.xp, self.design
        if not fresh and self._hessian is not None and self._hessian[0] == self.rho:
            _, factor, scale = self._hessian
        else:
            _, _, second = self.terms(design.matvec(x))
            if self.rows >= self.n:
                hessian = design.gram(weights=second)
                hessian[xp.diag_indices_from(hessian)] += self.rho
                factor, scale = backend.cholesky(xp, hessian), None
            else:
                if self._outer is None:
                    self._outer = design.outer_gram()
                scale = xp.sqrt(second)
                inner = self._outer * scale[:, None] * scale[None, :]
                inner[xp.diag_indices_from(inner)] += self.rho
                factor = backend.cholesky(xp, inner)
            self._hessian = (self.rho, factor, scale)
        if scale is None:
            return backend.cholesky_solve(xp, factor, gradient)
        solved = backend.cholesky_solve(xp, factor, scale * design.matvec(gradient))
        return (gradient - design.rmatvec(scale * solved)) / self.rho

    def state(self):
        """The x-step's warm start and Newton's kept Hessian factor (a resumed run reuses it as the
        uninterrupted one would: resumes stay bitwise)."""
        state = {"x": self._x}
        if self._hessian is not None:
            rho, factor, scale = self._hessian
            state.update(hessian_rho=np.array(rho), hessian_factor=factor)
            if scale is not None:
                state["hessian_scale"] = scale
        return state

    def restore(self, state):
        if "x" in state:
            self._x = self.xp.asarray(state["x"], dtype=np.float64)
            if self._x.shape != (self.n,):
                raise ValueError(f"the x-step warm start has shape {self._x.shape}, expected ({self.n},)")
        if "hessian_factor" in state:
            scale = state.get("hessian_scale")
            self._hessian = (float(state["hessian_rho"]), self.xp.asarray(state["hessian_factor"], dtype=np.float64),
                             None if scale is None else self.xp.asarray(scale, dtype=np.float64))


LBFGS_OPTIONS = Options(
    Option("memory", int, 20, "the correction pairs kept (scipy's maxcor)", low=1),
    Option("max_iter", int, 10000, "the most iterations of one x-step", low=1))


@register("x_solver", "lbfgs", options=LBFGS_OPTIONS)
def lbfgs_x_step(shard, v, x, tolerance, **options):
    """L-BFGS on the x-step's objective from the warm start x, to gradient norm ``tolerance``: scipy's
    L-BFGS-B for numpy arrays, :func:`array_lbfgs` for CuPy arrays (scipy works on the host only).
    ``options``: the declared ones (LBFGS_OPTIONS), their defaults where not given."""
    options = {**LBFGS_OPTIONS.defaults(), **options}
    memory, max_iter = options["memory"], options["max_iter"]
    if not backend.is_numpy(shard.xp):
        return array_lbfgs(shard, v, x, tolerance, memory, max_iter)
    import scipy.optimize
    result = scipy.optimize.minimize(shard._subproblem, x, args=(v,), jac=True, method="L-BFGS-B",
                                     options={"gtol": tolerance, "ftol": 0.0, "maxiter": max_iter, "maxcor": memory})
    shard.inner_iterations += result.nit
    return result.x


def _two_loop(gradient, pairs, gamma):
    """H gradient for the L-BFGS inverse-Hessian estimate H of the (s, y, 1 / s^T y) ``pairs`` (oldest first)
    over gamma I (Nocedal and Wright, algorithm 7.4); the scalars stay 0-d arrays, on the device."""
    q = gradient.copy()
    alphas = []
    for s, y, inverse in reversed(pairs):
        alpha = inverse * (s @ q)
        q -= alpha * y
        alphas.append(alpha)
    r = gamma * q
    for (s, y, inverse), alpha in zip(pairs, reversed(alphas)):
        r += (alpha - inverse * (y @ r)) * s
    return r


def array_lbfgs(shard, v, x, tolerance, memory=20, max_iter=10000, stall=100):
    """L-BFGS with array operations only (numpy or CuPy): the two-loop recursion over the last ``memory``
    pairs and a backtracking search, from x to gradient max-norm ``tolerance`` (scipy's gtol).

    A step is taken when it satisfies Armijo's condition on the values or, once
    the values agree to rounding (within 1e-10 relative), its approximation from
    the directional derivatives, exact for a quadratic (Hager and Zhang 2005):
    near the answer the decrease is below the values' rounding but the
    gradients still tell.  The x-step's objective is rho-strongly convex, so
    every step's pair is kept (s^T y > 0).  A search that finds no step
    restarts from the scaled gradient once and then stops, as does a run of
    ``stall`` steps that do not lower the gradient's max-norm: rounding then
    allows no further progress.
    """
    xp = shard.xp
    initial = 1.0 / (shard.rho + shard.curvature())  # the first step's scale: 1 / (Hessian's mean diagonal)
    value, gradient = shard._subproblem(x, v)
    pairs = []
    best, stalled = math.inf, 0
    for _ in range(max_iter):
        norm = float(xp.abs(gradient).max())
        if norm <= tolerance:
            break
        best, stalled = (norm, 0) if norm < best else (best, stalled + 1)
        if stalled > stall:
            break
        if pairs:
            s, y, inverse = pairs[-1]
            gamma = 1.0 / (inverse * (y @ y))  # s^T y / y^T y
        else:
            gamma = initial
        direction = -_two_loop(gradient, pairs, gamma)
        slope = float(gradient @ direction)
        if not slope < 0:  # rounding spoilt the estimate: start it again
            pairs.clear()
            direction = -initial * gradient
            slope = float(gradient @ direction)
        scale, rounding = 1.0, 1e-10 * abs(value)
        while True:
            candidate = x + scale * direction
            candidate_value, candidate_gradient = shard._subproblem(candidate, v)
            if candidate_value <= value + 1e-4 * scale * slope:
                break
            if candidate_value <= value + rounding and \
                    float(candidate_gradient @ direction) <= (2e-4 - 1.0) * slope:  # (1 - 2 c1) |slope|
                break
            scale *= 0.5
            if scale < 1e-10:
                candidate = None
                break
        if candidate is None:
            if not pairs:
                break
            pairs.clear()
            continue
        step, change = candidate - x, candidate_gradient - gradient
        curvature = float(step @ change)
        if curvature > 0:
            pairs.append((step, change, 1.0 / curvature))
            if len(pairs) > memory:
                pairs.pop(0)
        x, value, gradient = candidate, candidate_value, candidate_gradient
        shard.inner_iterations += 1
    return x


NEWTON_OPTIONS = Options(Option("max_iter", int, 100, "the most Newton steps of one x-step", low=1))


@register("x_solver", "newton", options=NEWTON_OPTIONS)
def newton_x_step(shard, v, x, tolerance, **options):
    """Damped Newton with an Armijo line search on the Hessian A^T diag(phi'') A + rho I
    (``newton_direction``: Cholesky for a tall shard, the matrix inversion lemma for a wide one).

    Consecutive ADMM x-steps start from nearby points, so the Hessian factored for an earlier step is
    tried first (forming it, m n^2 flops, dominates a step on a working set's few columns): it is kept
    while a full step is accepted and cuts the gradient by at least half, and formed afresh otherwise.
    ``options``: the declared ones (NEWTON_OPTIONS), their defaults where not given."""
    max_iter = {**NEWTON_OPTIONS.defaults(), **options}["max_iter"]
    xp = shard.xp
    value, gradient = shard._subproblem(x, v)
    fresh = False
    for _ in range(max_iter):
        norm = float(xp.abs(gradient).max())
        if norm <= tolerance:
            break
        step = shard.newton_direction(x, gradient, fresh=fresh)
        decrease = float(gradient @ step)
        scale = 1.0
        while True:
            candidate = x - scale * step
            candidate_value, candidate_gradient = shard._subproblem(candidate, v)
            if candidate_value <= value - 1e-4 * scale * decrease or scale < 1e-10:
                break
            scale *= 0.5
        x, value, gradient = candidate, candidate_value, candidate_gradient
        fresh = scale < 1.0 or float(xp.abs(gradient).max()) > 0.5 * norm  # the kept Hessian has gone stale
        shard.inner_iterations += 1
    return x


def entropy(p, xp):
    """sum_j H(p_j) = -sum_j p_j log p_j + (1 - p_j) log(1 - p_j), with 0 log 0 = 0."""
    safe = xp.where(p > 0, p, 1.0)
    below = xp.where(p < 1, p, 0.0)
    terms = xp.where(p > 0, p * xp.log(safe), 0.0) + xp.where(p < 1, (1.0 - p) * xp.log1p(-below), 0.0)
    return -float(terms.sum())


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

    dual_concavity = 4.0  # -phi*(-theta_j) = H(p_j), the binary entropy of p_j = y_j theta_j: H'' <= -4
    newton_inner = True   # smooth, phi'' > 0: proximal Newton on working sets (proxnewton.py)

    def margin_value(self, margin):
        return float(self.xp.logaddexp(0.0, -self.targets * margin).sum())

    def dual_residual(self, margin):
        """theta_j = y_j p_j with p_j = sigmoid(-y_j m_j) in [0, 1] (balancing keeps it there)."""
        return self.margin_value(margin), self.dual_theta(margin)

    def dual_theta(self, margin):
        y = self.targets
        return y * (0.5 * (1.0 + self.xp.tanh(-0.5 * (y * margin))))

    def dual_terms(self, theta):
        """(sum_j H(p_j), 0) and p = y theta, the state that a rescaled dual value needs."""
        p = self.targets * theta
        return (entropy(p, self.xp), 0.0), p

    def newton_terms(self, margin):
        """(f, phi', phi'', sum_j H(p_j)) at the margins in one pass with two transcendental functions:
        with s_j = y_j m_j, e_j = exp(-|s_j|), l_j = log(1 + exp(-s_j)) = max(-s_j, 0) + log1p(e_j) and
        p_j = sigmoid(-s_j), log(1 - p_j) = -l_j and log p_j = -(l_j + s_j), so H(p_j) = l_j + p_j s_j."""
        xp, y = self.xp, self.targets
        signed = y * margin
        e = xp.exp(-xp.abs(signed))  # one exp and one log1p a row: cheaper than logaddexp and tanh (docs/scaling.md)
        inverse = 1.0 / (1.0 + e)
        losses = xp.maximum(-signed, 0.0) + xp.log1p(e)
        probability = xp.where(signed > 0, e * inverse, inverse)  # sigmoid(-s)
        value = float(losses.sum())
        # p (1 - p) = e / (1 + e)^2 for either sign of s, without 1 - p's cancellation
        return value, -y * probability, e * inverse * inverse, (value + float(probability @ signed),)

    def dual_value_bound(self, sums, scale):
        """A lower bound on sum_j H(scale p_j) from sums = [sum_j H(p_j)] without a pass: H is concave with
        H(0) = 0."""
        return scale * float(sums[0])

    def dual_value(self, sums, scale, p, comm):
        """sum_j H(scale p_j): the sum itself at scale 1, else one more pass and all-reduce of a scalar."""
        if scale == 1.0:
            return float(sums[0])
        return float(host_allreduce(comm, [entropy(scale * p, self.xp) if self.active else 0.0])[0])

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
    options = Options(Option("delta", float, 1.0, "the width of the quadratic zone", low=0,
                             low_open=True)) + GLMLossShard.options

    @classmethod
    def null_intercept(cls, targets, comm, options):
        """Bisection on the monotone derivative sum_j psi(c - b_j) over every rank's rows."""
        delta, xp = options["delta"], backend.get_array_module(targets)
        low = comm.allreduce(float(targets.min()) if targets.size else np.inf, op=MPI.MIN)
        high = comm.allreduce(float(targets.max()) if targets.size else -np.inf, op=MPI.MAX)
        for _ in range(100):
            middle = 0.5 * (low + high)
            slope = comm.allreduce(float(xp.clip(middle - targets, -delta, delta).sum()))
            low, high = (middle, high) if slope < 0 else (low, middle)
        return 0.5 * (low + high)

    def __init__(self, design, targets, xp, delta, x_solver, x_solver_options):
        super().__init__(design, targets, xp, x_solver, x_solver_options)
        self.delta = float(delta)

    dual_concavity = 1.0  # -phi*(-theta_j) = theta_j b_j - theta_j^2 / 2 on |theta_j| <= delta
    # working sets only when asked: faster than the full solver at loose gap tolerances, slower at tight ones
    # (the inner ADMM's many restarts, with no Newton-type inner solver for Huber's kinks; docs/admm.md)
    working_sets_by_default = False

    def dual_residual(self, margin):
        """theta = clip(b - A z, -delta, delta) (balancing keeps it in the box)."""
        value, clipped, _ = self.terms(margin)
        return float(value), -clipped

    def dual_terms(self, theta):
        return (float(theta @ self.targets), float(theta @ theta)), None

    def dual_value(self, sums, scale, state, comm):
        return quadratic_dual_value(sums, scale)  # scale <= 1 keeps |scale theta_j| <= delta

    def terms(self, margin):
        xp, delta = self.xp, self.delta
        residual = margin - self.targets
        size = xp.abs(residual)
        inside = size <= delta
        total = xp.where(inside, 0.5 * residual * residual, delta * (size - 0.5 * delta)).sum()
        return total, xp.clip(residual, -delta, delta), inside.astype(residual.dtype)
