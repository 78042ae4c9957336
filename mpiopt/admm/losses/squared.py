"""The squared loss of one rank's rows, f_i(x) = ||A_i x - b_i||^2 / 2, and its x-step.

The x-step of consensus ADMM (Boyd et al. 2011, section 8.2.1) is the proximal
operator of f_i:

    x_i = argmin_x f_i(x) + (rho/2) ||x - v||^2 = (A_i^T A_i + rho I)^{-1} (A_i^T b_i + rho v)

solved with a factorization computed once per rho and cached:

* tall shard (m_i >= n): Cholesky of the n x n matrix A_i^T A_i + rho I; each
  x-step is two triangular solves, O(n^2), and A_i is no longer touched (the
  loss value comes from the Gram matrix too);
* wide shard (m_i < n): by the matrix inversion lemma
  (rho I + A^T A)^{-1} = (I - A^T (rho I + A A^T)^{-1} A) / rho, so only the
  m_i x m_i matrix A_i A_i^T + rho I is factored; each x-step costs O(m_i n);
* sparse shard with many columns (n > ``gram_limit``): no factorization;
  conjugate gradients with a Jacobi preconditioner, warm-started, to the
  engine's tolerance.

Changing rho reuses the Gram matrix and redoes only the Cholesky factorization.
The Gram matrix is formed on first use (the first factorization), not when the
shard is built: the working-set solver (workingset.py) evaluates values,
gradients and duality gaps of the full problem from the rows and factors only
the working set's Gram, so the full one is never formed there.
"""
from ...core import backend
from ...core.registry import register
from .base import LossShard, host_allreduce, quadratic_dual_value

GRAM_LIMIT = 5000


@register("loss", "squared")
class SquaredLossShard(LossShard):
    name = "squared"

    @classmethod
    def null_intercept(cls, targets, comm, options):
        """The mean of b over every rank's rows."""
        return comm.allreduce(float(targets.sum())) / comm.allreduce(int(targets.shape[0]))

    def __init__(self, design, b, xp, gram_limit=GRAM_LIMIT, gram=None):
        super().__init__(design, xp)
        self.b = b
        self.Atb = design.rmatvec(b)
        self.half_bb = 0.5 * float(b @ b)
        self._factor = None
        self.method = "cg" if design.sparse and design.n > gram_limit else (
            "cholesky-tall" if self.rows >= self.n else "cholesky-wide")
        self._gram = gram  # formed on first use (self.gram), unless given (the working set's, grown incrementally)
        if self.method == "cg":
            self.diagonal = None  # diag(A^T A) for the preconditioner, computed on first use
            self._x = xp.zeros(self.n)
        self.iterative = self.method == "cg"

    dual_concavity = 1.0  # -phi*(-theta) = theta b - theta^2 / 2
    newton_inner = True   # proximal Newton on working sets: one Newton step solves a restricted problem
    newton_dual_count = 2
    constant_hessian = True

    def newton_terms(self, margin):
        """(f, phi' = r, phi'' (None: constant, 1), [theta^T b, ||theta||^2]) with r = margin - b, theta = -r."""
        r = margin - self.b
        squares = float(r @ r)
        return 0.5 * squares, r, None, (-float(r @ self.b), squares)

    def dual_theta(self, margin):
        """theta = -phi'(margin) = b - margin, the residual."""
        return self.b - margin

    def margin_value(self, margin):
        r = margin - self.b
        return 0.5 * float(r @ r)

    def dual_value_bound(self, sums, scale):
        """sum_j -phi*(-scale theta_j), exactly (a quadratic in the scale)."""
        return quadratic_dual_value(sums, scale)

    def dual_sums(self, z, comm, intercept, theta_wanted, margin, dual_margin=None):
        """(the all-reduced [A^T theta, loss value, theta^T b, ||theta||^2], None, theta) at z:
        theta the residual b - A z, centered with an intercept; from the Gram matrix when it is formed and theta
        is not wanted (theta None then), from A^T b at a point with every coefficient 0."""
        xp, design, n, active = self.xp, self.design, self.n, self.active
        from_gram = not theta_wanted and self.method == "cholesky-tall" and self.gram_formed \
            and margin is None and dual_margin is None
        # at a point with every coefficient 0 (a path's start), A_aug^T r comes from A^T b: no pass over the rows
        from_atb = not from_gram and active and not bool(z[:design.features].any()) and dual_margin is None
        theta = None
        if active:
            if from_gram:
                correlation_local = self.Atb - self.gram @ z  # A_aug^T r; its last entry is sum(r) with an intercept
                value = self.value(z)
                rb = 2.0 * self.half_bb - float(self.Atb @ z)
                rsum = float(correlation_local[-1]) if intercept else 0.0
            else:
                residual = self.b - (design.matvec(z) if margin is None else margin)
                value = 0.5 * float(residual @ residual)
                if dual_margin is not None:  # theta from another point's residual; f(z) from z's
                    residual = self.b - dual_margin
                rsum = float(residual.sum())
        center = 0.0
        if intercept:  # make sum(theta) = 0 (one allreduce of a few scalars)
            total, rows = host_allreduce(comm, [rsum if active else 0.0, self.rows])
            center = float(total) / rows
        buffer = xp.zeros(n + 3)  # A^T theta and the scalar sums: one allreduce of n + 3 numbers
        if active:
            buffer[n] = value
            if from_gram:  # theta = r - center: A^T 1 is G's intercept column, sum(b) the last entry of A^T b
                buffer[:n] = correlation_local - center * self.gram[:, -1] if intercept else correlation_local
                sb = float(self.Atb[-1]) if intercept else 0.0
                buffer[n + 1] = rb - center * sb
                buffer[n + 2] = 2.0 * value - 2.0 * center * rsum + center * center * self.rows
            else:
                theta = residual - center if intercept else residual
                if from_atb:  # theta = b - (c + center) 1 with c the intercept's value
                    shift = (float(z[-1]) if design.intercept else 0.0) + (center if intercept else 0.0)
                    buffer[:n] = self.Atb - shift * design.ones_correlation() if shift else self.Atb
                else:
                    buffer[:n] = design.rmatvec(theta)
                buffer[n + 1] = float(theta @ self.b)
                buffer[n + 2] = float(theta @ theta)
        return host_allreduce(comm, backend.to_host(buffer)), None, theta

    def dual_value(self, sums, scale, state, comm):
        return quadratic_dual_value(sums, scale)

    @property
    def gram(self):
        """A_aug^T A_aug (tall shard) or A_aug A_aug^T (wide shard), formed on first use; None for CG."""
        if self._gram is None and self.method != "cg":
            self._gram = self.design.gram() if self.method == "cholesky-tall" else self.design.outer_gram()
        return self._gram

    @property
    def gram_formed(self):
        return self._gram is not None

    def factorize(self, rho):
        """Cache the Cholesky factor for this rho (no work when rho is unchanged)."""
        if rho == self.rho or not self.active or self.method == "cg":
            self.rho = rho
            return
        xp = self.xp
        shifted = self.gram + rho * xp.eye(self.gram.shape[0], dtype=self.gram.dtype)
        self._factor = backend.cholesky(xp, shifted)
        self.rho = rho

    def prox(self, v, tolerance=None):
        rhs = self.Atb + self.rho * v
        if self.method == "cholesky-tall":
            return backend.cholesky_solve(self.xp, self._factor, rhs)
        if self.method == "cholesky-wide":
            design = self.design
            correction = design.rmatvec(backend.cholesky_solve(self.xp, self._factor, design.matvec(rhs)))
            return (rhs - correction) / self.rho
        self._x = self._conjugate_gradients(rhs, self._x, tolerance or 1e-10)
        return self._x

    def _conjugate_gradients(self, rhs, x, tolerance, max_iter=1000):
        """Solve (A^T A + rho I) x = rhs by preconditioned CG from x (Jacobi preconditioner)."""
        xp, design = self.xp, self.design
        operator = lambda p: design.rmatvec(design.matvec(p)) + self.rho * p  # noqa: E731
        inverse_diagonal = 1.0 / (self._diagonal() + self.rho)
        residual = rhs - operator(x)
        direction = inverse_diagonal * residual
        rz = float(residual @ direction)
        for _ in range(max_iter):
            if float(xp.sqrt(residual @ residual)) <= tolerance:
                break
            applied = operator(direction)
            step = rz / float(direction @ applied)
            x = x + step * direction
            residual = residual - step * applied
            preconditioned = inverse_diagonal * residual
            rz_next = float(residual @ preconditioned)
            direction = preconditioned + (rz_next / rz) * direction
            rz = rz_next
        return x

    def _diagonal(self):
        if self.diagonal is None:
            A = self.design.A
            core = self.xp.asarray(A.multiply(A).sum(axis=0)).ravel()
            if self.design.intercept:
                core = self.xp.concatenate([core, self.xp.asarray([float(self.rows)])])
            self.diagonal = core
        return self.diagonal

    def value(self, x):
        """f_i(x); 0 for an empty shard."""
        if not self.active:
            return 0.0
        if self.method == "cholesky-tall" and self.gram_formed:
            return 0.5 * float(x @ (self.gram @ x)) - float(self.Atb @ x) + self.half_bb
        residual = self.design.matvec(x) - self.b
        return 0.5 * float(residual @ residual)

    def gradient(self, x):
        if self.method == "cholesky-tall" and self.gram_formed:  # from the Gram matrix, O(n^2), like the value
            return self.gram @ x - self.Atb
        if self.design.intercept and not bool(x[:-1].any()):  # only the intercept c: c A_aug^T 1 - A_aug^T b
            return float(x[-1]) * self.design.ones_correlation() - self.Atb
        if not bool(x.any()):  # lambda_max's point: no pass over the rows
            return -self.Atb
        return self.design.rmatvec(self.design.matvec(x) - self.b)

    def state(self):
        return {"x": self._x} if self.method == "cg" else {}

    def restore(self, state):
        if self.method == "cg" and "x" in state:
            self._x = self.xp.asarray(state["x"], dtype=float)
            if self._x.shape != (self.n,):
                raise ValueError(f"the x-step warm start has shape {self._x.shape}, expected ({self.n},)")
