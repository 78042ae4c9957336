"""The squared loss of one rank's rows, f_i(x) = ||A_i x - b_i||^2 / 2, and its x-step.

The x-step of consensus ADMM (Boyd et al. 2011, section 8.2.1) is the proximal
operator of f_i:

    x_i = argmin_x f_i(x) + (rho/2) ||x - v||^2 = (A_i^T A_i + rho I)^{-1} (A_i^T b_i + rho v)

The factorization is computed once per rho and cached:

* tall shard (m_i >= n): Cholesky of the n x n matrix A_i^T A_i + rho I; each
  x-step is two triangular solves, O(n^2), and A_i is no longer touched (the
  loss value comes from the Gram matrix too);
* wide shard (m_i < n): by the matrix inversion lemma
  (rho I + A^T A)^{-1} = (I - A^T (rho I + A A^T)^{-1} A) / rho, so only the
  m_i x m_i matrix A_i A_i^T + rho I is factored; each x-step costs O(m_i n).

Changing rho reuses the Gram matrix and redoes only the Cholesky factorization.
"""
from ..core import backend


class SquaredLossShard:
    """One rank's rows of a least-squares data term."""

    name = "squared"

    def __init__(self, A, b, xp):
        self.xp = xp
        self.rows, self.n = A.shape
        self.active = self.rows > 0
        self.tall = self.rows >= self.n
        self.Atb = A.T @ b
        self.rho = None
        self._factor = None
        if self.tall:
            self.gram = A.T @ A
            self.half_bb = 0.5 * float(b @ b)
        else:
            self.A, self.b = A, b
            self.gram = A @ A.T

    @property
    def kind(self):
        if not self.active:
            return "empty"
        return "tall" if self.tall else "wide"

    def factorize(self, rho):
        """Cache the Cholesky factor for this rho (no work when rho is unchanged)."""
        if rho == self.rho or not self.active:
            self.rho = rho
            return
        xp = self.xp
        shifted = self.gram + rho * xp.eye(self.gram.shape[0], dtype=self.gram.dtype)
        self._factor = backend.cholesky(xp, shifted)
        self.rho = rho

    def prox(self, v):
        """x-step: argmin_x f_i(x) + (rho/2) ||x - v||^2 with the cached factor."""
        rhs = self.Atb + self.rho * v
        if self.tall:
            return backend.cholesky_solve(self.xp, self._factor, rhs)
        correction = self.A.T @ backend.cholesky_solve(self.xp, self._factor, self.A @ rhs)
        return (rhs - correction) / self.rho

    def value(self, x):
        """f_i(x); 0 for an empty shard."""
        if not self.active:
            return 0.0
        if self.tall:
            return 0.5 * float(x @ (self.gram @ x)) - float(self.Atb @ x) + self.half_bb
        residual = self.A @ x - self.b
        return 0.5 * float(residual @ residual)

    def gradient_at_zero(self):
        """grad f_i(0) = -A_i^T b_i, from which lambda_max = ||sum_i grad f_i(0)||_inf."""
        return -self.Atb
