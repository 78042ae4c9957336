"""The L1-logistic certificate of the working sets tracks the suboptimality.

At points x of known relative suboptimality s = (P(x) - P*) / P* (1e-6 and
1e-9) on five designs (independent, correlated 0.5 and 0.9, wide, sparse
CSR), the relative duality gap the solver reports at x is a true bound
(>= s) and within 10x of s.  P* is computed here, independently of mpiopt:
L-BFGS-B on the split form x = x+ - x-, then Newton's method on the support
it finds with the signs fixed (a smooth problem there), until the gradient is
at rounding; its KKT conditions are checked on every column.  The points are
x* + t v, v random on the support (signs kept), t found by bisection.

The certificate is read through the public API: a solve warm-started at x
with gap_tol = 1 stops at its first certificate, the one of x itself.
"""
import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
import scipy.special
from mpi4py import MPI

from conftest import shard_bounds
from mpiopt.admm import solve

LAM_RATIO = 0.1


def make(name, seed=3):
    """A small version of benchmarks/sparse_solvers.py's designs, with +-1 labels."""
    rng = np.random.default_rng(seed)
    if name == "sparse":
        m, n = 600, 150
        A = scipy.sparse.random(m, n, density=0.05, format="csr", random_state=seed,
                                data_rvs=rng.standard_normal)
        dense = A.toarray()
    else:
        m, n = (60, 300) if name == "wide" else (300, 40)
        dense = rng.standard_normal((m, n))
        if name.startswith("corr"):
            rho = float(name[4:])
            for j in range(1, n):
                dense[:, j] = np.sqrt(1 - rho * rho) * dense[:, j] + rho * dense[:, j - 1]
        A = dense
    truth = np.zeros(n)
    truth[rng.choice(n, 6, replace=False)] = rng.standard_normal(6)
    scores = dense @ truth
    y = np.where(scores + 0.5 * (np.std(scores) or 1.0) * rng.standard_normal(m) >= 0, 1.0, -1.0)
    return A, dense, y


def objective(dense, y, lam, x):
    return float(np.logaddexp(0.0, -y * (dense @ x)).sum()) + lam * float(np.abs(x).sum())


def tight_optimum(dense, y, lam):
    """x* and P*: L-BFGS-B on the split form, then Newton on the support with fixed signs; KKT checked."""
    m, n = dense.shape

    def split(w):
        x = w[:n] - w[n:]
        margins = -y * (dense @ x)
        d_scores = -y * scipy.special.expit(margins)
        d_x = dense.T @ d_scores
        return np.logaddexp(0.0, margins).sum() + lam * w.sum(), np.concatenate([d_x + lam, -d_x + lam])
    fit = scipy.optimize.minimize(split, np.zeros(2 * n), jac=True, method="L-BFGS-B", bounds=[(0, None)] * (2 * n),
                                  options={"maxiter": 100000, "gtol": 1e-12, "ftol": 0.0, "maxcor": 30})
    x = fit.x[:n] - fit.x[n:]
    support = np.flatnonzero(np.abs(x) > 1e-7)
    signs = np.sign(x[support])
    x = np.where(np.abs(x) > 1e-7, x, 0.0)
    B = dense[:, support]
    for _ in range(50):
        p = scipy.special.expit(-y * (B @ x[support]))
        gradient = B.T @ (-y * p) + lam * signs
        if np.abs(gradient).max() <= 1e-13 * lam:
            break
        hessian = B.T @ (B * (p * (1 - p))[:, None])
        x[support] -= np.linalg.solve(hessian, gradient)
    assert np.all(np.sign(x[support]) == signs), "the polished support changed its signs"
    p = scipy.special.expit(-y * (dense @ x))
    correlation = dense.T @ (-y * p)
    assert np.abs(correlation[support] + lam * signs).max() <= 1e-9 * lam
    outside = np.setdiff1d(np.arange(n), support)
    assert np.abs(correlation[outside]).max(initial=0.0) <= lam * (1 + 1e-9), "not the optimum"
    return x, support, objective(dense, y, lam, x)


def point_at(dense, y, lam, x_star, support, best, target, seed):
    """x* + t v with v random on the support, t chosen so that the relative suboptimality is ``target``."""
    v = np.zeros_like(x_star)
    v[support] = np.random.default_rng(seed).standard_normal(len(support)) * np.abs(x_star[support])
    low, high = 0.0, 0.5  # |t v_k| < |x_k*|: the signs are kept
    for _ in range(200):
        middle = 0.5 * (low + high)
        if (objective(dense, y, lam, x_star + middle * v) - best) / abs(best) < target:
            low = middle
        else:
            high = middle
    x = x_star + high * v
    return x, (objective(dense, y, lam, x) - best) / abs(best)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("name", ["independent", "corr0.5", "corr0.9", "wide", "sparse"])
def test_the_logistic_gap_bounds_and_tracks_the_suboptimality(comm, name):
    A, dense, y = make(name)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    first = solve(A[start:stop], y[start:stop], "logistic", "l1", comm=comm, lam_ratio=LAM_RATIO, gap_tol=1e-3)
    lam = first.info["lam"]
    x_star, support, best = tight_optimum(dense, y, lam)
    for target in (1e-6, 1e-9):
        x, suboptimality = point_at(dense, y, lam, x_star, support, best, target, seed=len(name))
        assert 0.5 * target <= suboptimality <= 2 * target
        first.x, first.u = x.copy(), None  # a warm start at x: its first certificate is x's
        certified = solve(A[start:stop], y[start:stop], "logistic", "l1", comm=comm, lam=lam, gap_tol=1.0,
                          warm_start=first)
        assert certified.info["outer_iterations"] == 0 and np.array_equal(np.asarray(certified.x), x)
        gap = certified.relative_gap
        assert gap >= suboptimality * (1 - 1e-6), f"{name}: the gap {gap:.3e} is below P(x) - P* ({suboptimality:.3e})"
        assert gap <= 10 * suboptimality, f"{name}: gap {gap:.3e} at suboptimality {suboptimality:.3e}"


def test_without_the_refined_dual_point_the_gap_is_of_the_square_root():
    """The test above can fail: x's own dual point (the ADMM inner solver keeps it) gives a gap far above 10x
    the suboptimality at 1e-9 on the independent design."""
    A, dense, y = make("independent")
    first = solve(A, y, "logistic", "l1", comm=MPI.COMM_SELF, lam_ratio=LAM_RATIO, gap_tol=1e-3)
    lam = first.info["lam"]
    x_star, support, best = tight_optimum(dense, y, lam)
    x, suboptimality = point_at(dense, y, lam, x_star, support, best, 1e-9, seed=1)
    first.x, first.u = x.copy(), None
    loose = solve(A, y, "logistic", "l1", comm=MPI.COMM_SELF, lam=lam, gap_tol=1.0, warm_start=first,
                  inner_solver="admm")
    assert loose.relative_gap > 100 * suboptimality
