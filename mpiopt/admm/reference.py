"""A single-process lasso reference that shares no code with the ADMM solver.

The lasso is rewritten as a smooth problem with bounds, x = p - q with p, q >= 0:

    minimize (1/2) ||A (p - q) - b||^2 + lam 1^T (p + q)   subject to p, q >= 0

and solved by scipy's L-BFGS-B to a tight projected-gradient tolerance.  With
more rows than columns the Gram matrix A^T A is formed once so each evaluation
costs O(n^2).  Used by the command line to report the distance of the
distributed answer to a single-process one; the tests check it against
scikit-learn.
"""
import numpy as np
import scipy.optimize


def lasso_reference(A, b, lam, gtol=1e-12, max_iter=100000):
    """Return (x, objective) of the lasso on the full data, on one process."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = A.shape[1]
    Atb = A.T @ b
    half_bb = 0.5 * float(b @ b)
    gram = A.T @ A if A.shape[0] >= n else None

    def smooth_part(x):
        if gram is not None:
            gradient = gram @ x - Atb
            return 0.5 * float(x @ (gradient - Atb)) + half_bb, gradient
        residual = A @ x - b
        return 0.5 * float(residual @ residual), A.T @ residual

    def split_objective(pq):
        value, gradient = smooth_part(pq[:n] - pq[n:])
        value += lam * float(pq.sum())
        return value, np.concatenate([gradient + lam, lam - gradient])

    solution = scipy.optimize.minimize(
        split_objective, np.zeros(2 * n), jac=True, method="L-BFGS-B", bounds=[(0, None)] * (2 * n),
        options={"maxiter": max_iter, "maxfun": 10 * max_iter, "ftol": 0.0, "gtol": gtol, "maxcor": 30})
    x = solution.x[:n] - solution.x[n:]
    return x, smooth_part(x)[0] + lam * float(np.abs(x).sum())
