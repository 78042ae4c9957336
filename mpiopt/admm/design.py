"""One rank's rows of the design matrix, dense or sparse, with an optional intercept column.

The losses never touch A directly: they ask for A x, A^T w and the Gram
matrices here, so dense numpy, CuPy and scipy.sparse (CSR/CSC) shards share one
code path, and an intercept is a column of ones that is never materialised.
"""
import sys

import numpy as np


def is_sparse(A):
    sparse = sys.modules.get("scipy.sparse")  # not imported: A cannot be sparse, and a dense run never imports it
    return sparse is not None and sparse.issparse(A)


class Design:
    """A_i, or [A_i, 1] when ``intercept``; ``n`` counts the intercept."""

    def __init__(self, A, intercept, xp, column_squares=None):
        """``column_squares``: ||a_k||^2 of A's columns when already known (validation computed them)."""
        self.A, self.intercept, self.xp = A, bool(intercept), xp
        self._column_squares = column_squares
        self.sparse = is_sparse(A)
        self.rows, self.features = A.shape
        self.n = self.features + int(self.intercept)

    def matvec(self, x):
        """A_aug x (no pass over A when every coefficient is 0, as at a path's start)."""
        coefficients = x[:self.features]
        if not bool(coefficients.any()):
            y = self.xp.zeros(self.rows)
        else:
            y = self.A @ coefficients
            if self.sparse:
                y = self.xp.asarray(y).ravel()
        return y + x[-1] if self.intercept else y

    def rmatvec(self, w):
        """A_aug^T w."""
        g = self.A.T @ w
        if self.sparse:
            g = np.asarray(g).ravel()
        if self.intercept:
            g = self.xp.concatenate([g, w.sum(keepdims=True).astype(g.dtype, copy=False)])  # stays on the device
        return g

    def gram(self, weights=None):
        """A_aug^T diag(weights) A_aug as a dense n x n array (weights None: all ones)."""
        xp, A = self.xp, self.A
        if weights is None:
            core = A.T @ A
            sums = A.sum(axis=0)
            total = float(self.rows)
        elif self.sparse and A.format in ("csr", "csc"):  # rows scaled in a copy (A^T kept as CSR for a CSR A):
            weighted = A.copy()                           # no format conversions (a large share of a Hessian)
            if A.format == "csr":
                weighted.data *= np.repeat(weights, np.diff(A.indptr))
                core = self.transposed() @ weighted
            else:
                weighted.data *= weights[A.indices]
                core = A.T @ weighted
            sums = weighted.sum(axis=0)
            total = float(weights.sum())
        else:
            weighted = A.multiply(weights[:, None]) if self.sparse else A * weights[:, None]
            core = A.T @ weighted
            sums = weighted.sum(axis=0)
            total = float(weights.sum())
        core = core.toarray() if self.sparse else core
        if not self.intercept:
            return core
        sums = np.asarray(sums).ravel() if self.sparse else sums
        out = xp.empty((self.n, self.n))
        out[:-1, :-1] = core
        out[:-1, -1] = sums
        out[-1, :-1] = sums
        out[-1, -1] = total
        return out

    def transposed(self):
        """A^T as CSR (a sparse CSR A's), made once."""
        if getattr(self, "_transposed", None) is None:
            self._transposed = self.A.T.tocsr()
        return self._transposed

    def outer_gram(self):
        """A_aug A_aug^T as a dense m_i x m_i array."""
        outer = self.A @ self.A.T
        outer = outer.toarray() if self.sparse else outer
        return outer + 1.0 if self.intercept else outer

    def squared_norm(self):
        """||A_aug||_F^2, for the default rho."""
        if self.sparse:
            core = float(self.A.data @ self.A.data)
        else:
            core = float(self.column_squares().sum())
        return core + (self.rows if self.intercept else 0.0)

    def ones_correlation(self):
        """A_aug^T 1 (the column sums, and the row count for the intercept), computed once."""
        if getattr(self, "_ones_correlation", None) is None:
            A, xp = self.A, self.xp
            sums = xp.asarray(A.sum(axis=0)).ravel() if self.sparse else xp.ones(self.rows) @ A
            self._ones_correlation = xp.concatenate([sums, xp.asarray([float(self.rows)])]) if self.intercept \
                else sums
        return self._ones_correlation

    def column_squares(self):
        """||a_k||^2 of each column of A (no intercept), in one pass without an m x n temporary; computed once."""
        if self._column_squares is None:
            A, xp = self.A, self.xp
            if self.sparse:
                squares = np.bincount(A.indices, weights=A.data * A.data, minlength=self.features) \
                    if A.format == "csr" else np.asarray(A.multiply(A).sum(axis=0)).ravel()
            else:
                squares = xp.einsum("ij,ij->j", A, A)
            self._column_squares = squares
        return self._column_squares

    def columns(self, index):
        """The columns ``index`` (a host integer array) of A, copied: Fortran-ordered when dense (a working
        set's block, whose Gram products read it by columns), CSR when sparse CSR."""
        A, xp = self.A, self.xp
        if self.sparse:
            block = A[:, index]
            return block.tocsr() if A.format == "csr" else block
        return xp.asfortranarray(A[:, xp.asarray(index)])
