"""Gap-safe screening (mpiopt.admm.gap.screen and the ``screening`` setting).

Safety: on many random problems (tall and wide; independent, correlated and
duplicated columns; lasso, elastic net, L1 logistic; with and without an
intercept) no feature removed by the sphere test is nonzero in scikit-learn's
solution, and at the optimum the test keeps every nonzero.  Then: solves and
paths with screening equal those without, at any rank count and shard layout,
dense and sparse, with the certificate of the full problem; a checkpoint turns
screening off (the iterations, and so a resume, stay bitwise those of before).
"""
import warnings

import numpy as np
import pytest
import scipy.sparse
from mpi4py import MPI
from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression

from conftest import shard_bounds
from mpiopt.admm import solve
from mpiopt.admm.gap import column_norms, screen
from mpiopt.admm.path import regularization_path
from mpiopt.admm.penalties import L1, ElasticNet as ElasticNetPenalty
from mpiopt.admm.solver import Problem
from mpiopt.core import CollectiveError

MODELS = ["lasso", "elastic_net", "logistic_l1"]


def design(seed, shape, correlation):
    """Columns with pairwise correlation ``correlation``, or "ties": every column duplicated once."""
    rng = np.random.default_rng(seed)
    m, n = shape
    if correlation == "ties":
        half = rng.standard_normal((m, (n + 1) // 2))
        return np.hstack([half, half])[:, :n]
    common = rng.standard_normal((m, 1))
    return np.sqrt(1 - correlation) * rng.standard_normal((m, n)) + np.sqrt(correlation) * common


def targets(A, model, seed):
    rng = np.random.default_rng(seed + 1000)
    n = A.shape[1]
    truth = np.where(rng.random(n) < 0.2, rng.standard_normal(n), 0.0)
    b = A @ truth + 0.5 * rng.standard_normal(A.shape[0]) + 0.3
    return np.where(b > np.median(b), 1.0, -1.0) if model == "logistic_l1" else b


def reference(A, b, model, lam, intercept):
    """scikit-learn's coefficients (penalized ones), at tight tolerance, on this package's scaling."""
    m = A.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence, and scikit-learn 1.8's deprecation of penalty=
        if model == "lasso":
            fit = Lasso(alpha=lam / m, fit_intercept=intercept, tol=1e-13, max_iter=100000).fit(A, b)
        elif model == "elastic_net":
            fit = ElasticNet(alpha=lam / m, l1_ratio=0.7, fit_intercept=intercept, tol=1e-13,
                             max_iter=100000).fit(A, b)
        else:
            fit = LogisticRegression(penalty="l1", C=1.0 / lam, fit_intercept=intercept, tol=1e-12,
                                     solver="saga" if intercept else "liblinear", max_iter=200000).fit(A, b)
    coef = np.ravel(fit.coef_)
    intercept_value = np.ravel(fit.intercept_)[0] if intercept else None
    return coef, intercept_value


def penalty_for(model, lam, intercept):
    penalty = ElasticNetPenalty(lam, 0.7) if model == "elastic_net" else L1(lam)
    return penalty.leaving_free(1) if intercept else penalty


CASES = [(seed, shape, correlation, model, intercept)
         for seed, (shape, correlation) in enumerate([((40, 12), 0.0), ((40, 12), 0.5), ((40, 12), 0.9),
                                                      ((40, 12), "ties"), ((15, 30), 0.0), ((15, 30), 0.5),
                                                      ((15, 30), 0.9), ((15, 30), "ties")])
         for model in MODELS for intercept in (False, True)]


@pytest.mark.parametrize("seed, shape, correlation, model, intercept", CASES)
def test_screening_never_removes_a_feature_nonzero_at_the_optimum(seed, shape, correlation, model, intercept):
    A = design(seed, shape, correlation)
    b = targets(A, model, seed)
    problem = Problem(A, b, "logistic" if model == "logistic_l1" else "squared", MPI.COMM_SELF,
                      intercept=intercept)
    norms = column_norms(problem.shard, MPI.COMM_SELF)
    assert np.allclose(norms, np.linalg.norm(A, axis=0))
    largest = problem.lambda_max("elastic_net" if model == "elastic_net" else "l1", 0.7)
    rng = np.random.default_rng(seed)
    for ratio in (0.8, 0.3, 0.1):
        lam = ratio * largest
        coef, offset = reference(A, b, model, lam, intercept)
        optimum = np.append(coef, offset) if intercept else coef
        penalty = penalty_for(model, lam, intercept)
        tolerance = 1e-5 if model == "logistic_l1" and intercept else 1e-10  # saga leaves tiny nonzeros
        nonzero = np.abs(coef) > tolerance
        # the sphere test at points near and far from the optimum: whatever it removes is zero there
        for noise in (0.0, 1e-3, 1e-1, 1.0):
            point = optimum + noise * rng.standard_normal(optimum.shape) * (1.0 + np.abs(optimum))
            for z in (point, np.zeros_like(optimum)):
                kept, gap = screen(problem.shard, penalty, z, MPI.COMM_SELF, norms)
                assert gap.gap >= -1e-9 * max(1.0, abs(gap.primal))
                assert not np.any(nonzero & ~kept), (ratio, noise, np.flatnonzero(nonzero & ~kept))
        # at the optimum, every nonzero is kept and (the gap nearly 0) most zeros are removed
        kept, gap = screen(problem.shard, penalty, optimum, MPI.COMM_SELF, norms)
        assert kept[nonzero].all()


def test_screening_removes_features_near_the_optimum():
    A = design(3, (100, 200), 0.0)
    b = targets(A, "lasso", 3)
    problem = Problem(A, b, "squared", MPI.COMM_SELF)
    lam = 0.3 * problem.lambda_max("l1")
    coef, _ = reference(A, b, "lasso", lam, False)
    kept, _ = screen(problem.shard, L1(lam), coef, MPI.COMM_SELF, column_norms(problem.shard, MPI.COMM_SELF))
    assert (~kept).sum() >= 0.8 * (coef == 0).sum()


# -- solves with screening equal those without --------------------------------------------------------------

TIGHT = dict(eps_abs=1e-9, eps_rel=1e-9, max_iter=20000)  # tighter makes the logistic x-steps stall (L-BFGS)


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["even", "uneven", "empty"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("model, intercept", [("lasso", False), ("lasso", True), ("elastic_net", False),
                                              ("logistic_l1", True)])
@pytest.mark.parametrize("shape", [(60, 150), (400, 60)])
def test_screened_solve_equals_the_plain_one(comm, layout, sparse, model, intercept, shape):
    A = design(7, shape, 0.5)
    b = targets(A, model, 7)
    start, stop = shard_bounds(shape[0], comm, layout)
    A_local = scipy.sparse.csr_matrix(A[start:stop]) if sparse else A[start:stop]
    loss = "logistic" if model == "logistic_l1" else "squared"
    penalty = "elastic_net" if model == "elastic_net" else "l1"
    settings = dict(comm=comm, lam_ratio=0.3, l1_ratio=0.7, intercept=intercept, **TIGHT)
    plain = solve(A_local, b[start:stop], loss, penalty, **settings)
    screened = solve(A_local, b[start:stop], loss, penalty, screening=True, **settings)
    assert screened.info["screened"] > 0
    assert screened.converged and screened.x.shape == plain.x.shape
    assert np.abs(screened.x - plain.x).max() <= 1e-6 * max(1.0, np.abs(plain.x).max())
    assert abs(screened.objective - plain.objective) <= 1e-8 * abs(plain.objective)
    # the certificate is the full problem's, at the returned x
    assert -1e-12 * abs(screened.objective) <= screened.gap <= 1e-6 * abs(screened.objective)  # >= 0 to rounding
    assert screened.info["features"] == A.shape[1] and screened.info["n"] == A.shape[1] + int(intercept)
    primal = screened.info["dual_objective"] + screened.gap  # the full problem's objective at x (gap.py)
    assert primal == pytest.approx(screened.objective, rel=1e-10)
    # the same on every rank
    assert all(np.array_equal(x, screened.x) for x in comm.allgather(screened.x))


@pytest.mark.mpi
@pytest.mark.parametrize("model", ["lasso", "logistic_l1"])
def test_path_with_screening_equals_the_path_without(comm, model):
    A = design(5, (80, 120), 0.5)
    b = targets(A, model, 5)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    loss = "logistic" if model == "logistic_l1" else "squared"
    settings = dict(comm=comm, n_lams=8, lam_min_ratio=0.05, intercept=model == "logistic_l1", **TIGHT)
    plain = regularization_path(A[start:stop], b[start:stop], loss, "l1", **settings)
    screened = regularization_path(A[start:stop], b[start:stop], loss, "l1", screening=True, **settings)
    assert sum(r.info["screened"] for r in screened.results) > 0
    scale = max(1.0, np.abs(plain.coefs).max())
    assert np.abs(screened.coefs - plain.coefs).max() <= 1e-5 * scale
    assert np.allclose(screened.objectives, plain.objectives, rtol=1e-8)
    assert all(r.gap >= -1e-12 * abs(r.objective) and r.relative_gap <= 1e-6 for r in screened.results)


@pytest.mark.mpi
def test_screening_is_off_with_a_checkpoint_and_resumes_bitwise(comm, tmp_path_factory):
    A = design(9, (60, 100), 0.5)
    b = targets(A, "lasso", 9)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    folder = comm.bcast(str(tmp_path_factory.mktemp("screen_checkpoint")) if comm.rank == 0 else None)
    settings = dict(comm=comm, lam_ratio=0.3, eps_abs=1e-10, eps_rel=1e-10, max_iter=5000, working_set=False)
    whole = solve(A[start:stop], b[start:stop], "squared", "l1", **settings)
    path = f"{folder}/state.npz"
    first = solve(A[start:stop], b[start:stop], "squared", "l1", screening=True, checkpoint=path,
                  **dict(settings, max_iter=10))
    assert first.status == "max_iterations" and "screened" not in first.info
    resumed = solve(A[start:stop], b[start:stop], "squared", "l1", screening=True, checkpoint=path, **settings)
    assert resumed.info["resumed_at"] == 10 and resumed.iterations == whole.iterations
    assert np.array_equal(resumed.x, whole.x) and resumed.gap == whole.gap


def test_screening_is_off_by_default_and_checked():
    A = design(1, (50, 80), 0.0)
    b = targets(A, "lasso", 1)
    result = solve(A, b, "squared", "l1", lam_ratio=0.3, comm=MPI.COMM_SELF, working_set=False)
    assert "screened" not in result.info and result.info["settings"]["screening"] is False
    # the working-set solver (the default here) screens at each of its gap checks, whatever the setting
    assert solve(A, b, "squared", "l1", lam_ratio=0.3, comm=MPI.COMM_SELF).info["screened"] > 0
    with pytest.raises(CollectiveError, match="screening must be True or False"):
        solve(A, b, "squared", "l1", lam_ratio=0.3, comm=MPI.COMM_SELF, screening=1)
    # where the gap is unavailable (here ridge) the setting is accepted and does nothing
    ridge = solve(A, b, "squared", "l2", lam=1.0, comm=MPI.COMM_SELF, screening=True)
    assert "screened" not in ridge.info
