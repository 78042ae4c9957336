"""Duality gaps of consensus ADMM (mpiopt.admm.gap): L1 and elastic net with the squared and logistic losses.

The gap is checked against a brute-force evaluation of the Fenchel dual, at
scikit-learn's solutions, across rank counts and shard layouts (even, uneven,
empty), dense and sparse, with and without an intercept.
"""
import math

import numpy as np
import pytest
import scipy.sparse
from mpi4py import MPI
from sklearn.linear_model import ElasticNet, Lasso

from conftest import shard_bounds
from mpiopt.admm import ADMMSettings, solve
from mpiopt.admm.gap import dual_point, duality_gap
from mpiopt.admm.penalties import L1, ElasticNet as ElasticNetPenalty
from mpiopt.admm.solver import Problem
from mpiopt.core import CollectiveError

TIGHT = dict(eps_abs=1e-11, eps_rel=1e-11, max_iter=20000)
CASES = {  # name: (loss, penalty, options)
    "lasso": ("squared", "l1", {}),
    "elastic_net": ("squared", "elastic_net", {"l1_ratio": 0.7}),
    "logistic_l1": ("logistic", "l1", {}),
    "logistic_elastic_net": ("logistic", "elastic_net", {"l1_ratio": 0.5}),
}


def data(loss, m=48, n=12, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    truth = np.where(rng.random(n) < 0.4, rng.standard_normal(n), 0.0)
    b = A @ truth + 0.3 * rng.standard_normal(m) + 0.5
    if loss == "logistic":
        b = (b > 0.5).astype(float)
    return A, b


def penalty_object(name, lam, options, intercept):
    penalty = L1(lam) if name == "l1" else ElasticNetPenalty(lam, options["l1_ratio"])
    return penalty.leaving_free(1) if intercept else penalty


def l1_l2(name, lam, options):
    """The L1 and L2 weights of the penalty (scikit-learn's elastic-net convention)."""
    ratio = 1.0 if name == "l1" else options["l1_ratio"]
    return lam * ratio, lam * (1.0 - ratio)


def brute_force_dual(A, targets, loss, l1, l2, intercept, theta):
    """D(theta) = -sum_j phi*(-theta_j) - g*(A^T theta) from the definitions (inf outside the domain)."""
    A_aug = np.hstack([A, np.ones((A.shape[0], 1))]) if intercept else A
    v = A_aug.T @ theta
    if intercept:
        if abs(v[-1]) > 1e-9 * max(1.0, np.abs(theta).sum()):
            return -math.inf
        v = v[:-1]
    if l2 > 0:
        conjugate = float(np.sum(np.maximum(np.abs(v) - l1, 0.0) ** 2)) / (2 * l2)
    else:
        conjugate = 0.0 if np.abs(v).max() <= l1 * (1 + 1e-12) else math.inf
    if loss == "squared":  # phi(m) = (m - b)^2 / 2, phi*(u) = u^2 / 2 + u b
        return float(theta @ targets - 0.5 * theta @ theta) - conjugate
    p = targets * theta  # labels +-1; phi*(-theta) = p log p + (1 - p) log(1 - p) on [0, 1]
    if np.any(p < -1e-15) or np.any(p > 1 + 1e-15):
        return -math.inf
    p = np.clip(p, 0.0, 1.0)
    entropy = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
                      + np.where(p < 1, (1 - p) * np.log1p(-np.where(p < 1, p, 0.0)), 0.0))
    return float(entropy) - conjugate


def primal(A, targets, loss, lam_penalty, intercept, w):
    A_aug = np.hstack([A, np.ones((A.shape[0], 1))]) if intercept else A
    margin = A_aug @ w
    value = 0.5 * float(np.sum((margin - targets) ** 2)) if loss == "squared" \
        else float(np.logaddexp(0.0, -targets * margin).sum())
    return value + lam_penalty.value(w)


def gathered_theta(comm, theta):
    parts = comm.allgather(np.zeros(0) if theta is None else np.asarray(theta))
    return np.concatenate(parts)


@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_dual_matches_brute_force_and_gap_is_nonnegative_at_any_point(case, intercept):
    loss, penalty_name, options = CASES[case]
    A, b = data(loss, seed=3)
    problem = Problem(A, b, loss, MPI.COMM_SELF, intercept=intercept)
    lam = 0.2 * problem.lambda_max(penalty_name, options.get("l1_ratio", 0.5))
    penalty = penalty_object(penalty_name, lam, options, intercept)
    l1, l2 = l1_l2(penalty_name, lam, options)
    rng = np.random.default_rng(1)
    for scale in (0.0, 0.1, 1.0, 3.0):
        z = scale * rng.standard_normal(problem.shard.n)
        gap, theta = dual_point(problem.shard, penalty, z, MPI.COMM_SELF)
        reference = brute_force_dual(A, problem.b, loss, l1, l2, intercept, theta)
        assert math.isfinite(reference), "the dual point is not feasible"
        assert abs(gap.dual - reference) <= 1e-10 * max(1.0, abs(reference))
        assert abs(gap.primal - primal(A, problem.b, loss, penalty, intercept, z)) <= 1e-10 * abs(gap.primal)
        assert gap.gap >= 0 and gap.relative == pytest.approx(gap.gap / abs(gap.primal))


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["even", "uneven", "empty"])
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_gap_is_nonnegative_and_goes_to_zero(comm, case, intercept, layout):
    loss, penalty_name, options = CASES[case]
    A, b = data(loss)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    result = solve(A[start:stop], b[start:stop], loss, penalty_name, comm=comm, lam_ratio=0.1,
                   intercept=intercept, gap_tol=0.0, gap_every=5, working_set=False, **options, **TIGHT)
    gaps = np.array(result.history["gap"])
    evaluated = gaps[~np.isnan(gaps)]
    assert len(evaluated) >= 2 and np.all(evaluated >= -1e-12 * abs(result.objective))
    assert evaluated[-1] < evaluated[0]
    assert result.status == "converged" and result.gap >= -1e-12 * abs(result.objective)
    assert result.relative_gap < 1e-8
    assert result.info["gap"] == result.gap and result.info["relative_gap"] == result.relative_gap


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["even", "uneven", "empty"])
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_dual_point_is_feasible_and_gap_is_the_same_at_any_rank_count(comm, case, intercept, layout):
    loss, penalty_name, options = CASES[case]
    A, b = data(loss, seed=5)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    shard_A = scipy.sparse.csr_matrix(A[start:stop]) if layout == "uneven" else A[start:stop]
    distributed = Problem(shard_A, b[start:stop], loss, comm, intercept=intercept)
    single = Problem(A, b, loss, MPI.COMM_SELF, intercept=intercept)
    lam = 0.1 * single.lambda_max(penalty_name, options.get("l1_ratio", 0.5))
    penalty = penalty_object(penalty_name, lam, options, intercept)
    l1, l2 = l1_l2(penalty_name, lam, options)
    z = 0.3 * np.random.default_rng(2).standard_normal(single.shard.n)  # the same point on every rank
    gap, theta = dual_point(distributed.shard, penalty, z, comm)
    reference, reference_theta = dual_point(single.shard, penalty, z, MPI.COMM_SELF)
    theta = gathered_theta(comm, theta)
    assert np.allclose(theta, reference_theta, rtol=0, atol=1e-12 * np.abs(reference_theta).max())
    for key in ("primal", "dual", "gap"):
        assert getattr(gap, key) == pytest.approx(getattr(reference, key), rel=1e-11, abs=1e-11)
    correlation = A.T @ theta
    if l2 == 0:
        assert np.abs(correlation).max() <= lam * (1 + 1e-12)
    if intercept:
        assert abs(theta.sum()) <= 1e-12 * np.abs(theta).sum()
    if loss == "logistic":
        assert np.all(single.b * theta >= 0) and np.all(single.b * theta <= 1)
    assert gap.gap >= 0


@pytest.mark.mpi
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_sparse_shards_give_the_dense_gap(comm, case, intercept):
    loss, penalty_name, options = CASES[case]
    A, b = data(loss, seed=7)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    settings = dict(comm=comm, lam_ratio=0.1, intercept=intercept, **options, **TIGHT)
    dense = solve(A[start:stop], b[start:stop], loss, penalty_name, **settings)
    sparse = solve(scipy.sparse.csr_matrix(A[start:stop]), b[start:stop], loss, penalty_name, **settings)
    assert dense.relative_gap < 1e-8 and sparse.relative_gap < 1e-8
    assert dense.gap >= -1e-12 * abs(dense.objective) and sparse.gap >= -1e-12 * abs(sparse.objective)


@pytest.mark.mpi
@pytest.mark.parametrize("model", ["lasso", "elastic_net"])
def test_gap_is_zero_at_the_sklearn_solution(comm, model):
    A, b = data("squared", m=60, n=15, seed=11)
    m = A.shape[0]
    problem = Problem(A, b, "squared", MPI.COMM_SELF)
    if model == "lasso":
        lam = 0.1 * problem.lambda_max("l1")
        reference = Lasso(alpha=lam / m, fit_intercept=False, tol=1e-14, max_iter=200000).fit(A, b)
        penalty = L1(lam)
    else:
        lam = 0.1 * problem.lambda_max("elastic_net", 0.6)
        reference = ElasticNet(alpha=lam / m, l1_ratio=0.6, fit_intercept=False, tol=1e-14,
                               max_iter=200000).fit(A, b)
        penalty = ElasticNetPenalty(lam, 0.6)
    start, stop = shard_bounds(m, comm, "uneven")
    distributed = Problem(A[start:stop], b[start:stop], "squared", comm)
    gap, _ = dual_point(distributed.shard, penalty, reference.coef_, comm)
    assert gap.gap >= -1e-12 * abs(gap.primal) and gap.relative < 1e-9


@pytest.mark.mpi
@pytest.mark.parametrize("case", ["lasso", "logistic_l1"])
def test_gap_tol_stops_early_with_a_valid_certificate(comm, case):
    loss, penalty_name, options = CASES[case]
    A, b = data(loss, seed=13)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    settings = dict(comm=comm, lam_ratio=0.1, intercept=True, **options)
    exact = solve(A[start:stop], b[start:stop], loss, penalty_name, **settings, **TIGHT)
    residual_rule = solve(A[start:stop], b[start:stop], loss, penalty_name, **settings,
                          eps_abs=1e-10, eps_rel=1e-10, max_iter=20000)
    early = solve(A[start:stop], b[start:stop], loss, penalty_name, **settings, eps_abs=1e-10, eps_rel=1e-10,
                  max_iter=20000, gap_tol=1e-3, gap_every=1)
    assert early.status == "converged" and early.relative_gap <= 1e-3
    assert early.iterations < residual_rule.iterations
    optimum = exact.objective - max(exact.gap, 0.0)  # a lower bound on P*
    assert early.objective - optimum <= early.gap + 1e-9 * abs(exact.objective)
    assert exact.objective - exact.gap <= early.objective  # the certificate holds both ways


@pytest.mark.mpi
def test_without_gap_tol_the_iterations_are_unchanged(comm):
    A, b = data("squared", seed=17)
    start, stop = shard_bounds(A.shape[0], comm, "even")
    plain = solve(A[start:stop], b[start:stop], "squared", "l1", comm=comm, lam_ratio=0.1, working_set=False)
    assert "gap" not in plain.history and plain.gap is not None and plain.relative_gap is not None
    loose = solve(A[start:stop], b[start:stop], "squared", "l1", comm=comm, lam_ratio=0.1, gap_tol=0.0,
                  working_set=False)
    assert np.array_equal(plain.x, loose.x) and plain.iterations == loose.iterations  # gap_tol 0 never stops first
    assert loose.gap == plain.gap


@pytest.mark.mpi
@pytest.mark.parametrize("loss, penalty, options", [("squared", "l2", {"lam": 1.0}),
                                                     ("huber", "l2", {"lam": 1.0}),
                                                     ("squared", "nonnegative", {})])
def test_gap_is_none_where_unavailable(comm, loss, penalty, options):
    A, b = data("squared", seed=19)
    start, stop = shard_bounds(A.shape[0], comm, "even")
    result = solve(A[start:stop], b[start:stop], loss, penalty, comm=comm, gap_tol=1e-6, max_iter=200, **options)
    assert result.gap is None and result.relative_gap is None and "gap" not in result.history


def test_gap_settings_are_checked():
    assert "gap_tol" in ADMMSettings(gap_tol=-1.0).problem()
    assert "gap_every" in ADMMSettings(gap_every=0).problem()
    assert ADMMSettings(gap_tol=1e-6, gap_every=3).problem() is None
    A, b = data("squared")
    with pytest.raises(CollectiveError, match="gap_tol"):
        solve(A, b, "squared", "l1", comm=MPI.COMM_SELF, lam_ratio=0.1, gap_tol="tight")


@pytest.mark.parametrize("working_set", [False, True])
def test_log_has_a_gap_column_and_a_certificate(capsys, working_set):
    A, b = data("squared", seed=23)
    solve(A, b, "squared", "l1", comm=MPI.COMM_SELF, lam_ratio=0.1, verbose=True, gap_tol=1e-8,
          working_set=working_set)
    out = capsys.readouterr().out
    header = [line.split() for line in out.splitlines() if "iter" in line.split()][0]
    assert "gap" in header and ("outer" in header) == working_set
    assert "certificate: duality gap" in out


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["even", "uneven", "empty"])
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("case", ["lasso", "elastic_net"])
def test_gram_shortcut_of_tall_shards_gives_the_explicit_gap(comm, case, intercept, layout):
    """The engine's gap of a tall squared shard comes from its Gram matrix; the same as from the rows."""
    loss, penalty_name, options = CASES[case]
    A, b = data(loss, m=400, n=10, seed=29)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    problem = Problem(A[start:stop], b[start:stop], loss, comm, intercept=intercept)
    assert problem.shard.method == "cholesky-tall" or not problem.shard.active
    lam = 0.1 * problem.lambda_max(penalty_name, options.get("l1_ratio", 0.5))
    penalty = penalty_object(penalty_name, lam, options, intercept)
    rng = np.random.default_rng(4)
    for scale in (0.0, 0.05, 1.0):
        z = scale * rng.standard_normal(problem.shard.n)
        explicit, _ = dual_point(problem.shard, penalty, z, comm)
        shortcut = duality_gap(problem.shard, penalty, z, comm)
        for key in ("primal", "dual", "gap"):
            assert getattr(shortcut, key) == pytest.approx(getattr(explicit, key), rel=1e-10, abs=1e-9)


@pytest.mark.mpi
def test_checkpoint_resume_with_gap_tol_is_bitwise_identical(comm, tmp_path_factory):
    A, b = data("logistic", seed=31)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    A_local, b_local = A[start:stop], b[start:stop]
    folder = comm.bcast(str(tmp_path_factory.mktemp("gap_checkpoint")) if comm.rank == 0 else None)
    settings = dict(comm=comm, lam_ratio=0.1, intercept=True, eps_abs=1e-12, eps_rel=1e-12, max_iter=5000,
                    gap_tol=1e-9, gap_every=3, working_set=False)  # the full solver's gap column
    whole = solve(A_local, b_local, "logistic", "l1", **settings)
    path = f"{folder}/state.npz"
    first = solve(A_local, b_local, "logistic", "l1", checkpoint=path, **dict(settings, max_iter=10))
    assert first.status == "max_iterations" and first.info["stop"] == "max_iter"
    resumed = solve(A_local, b_local, "logistic", "l1", checkpoint=path, **settings)
    assert resumed.info["resumed_at"] == 10 and resumed.iterations == whole.iterations
    assert np.array_equal(resumed.x, whole.x) and resumed.gap == whole.gap
    assert np.array_equal(np.array(resumed.history["gap"]), np.array(whole.history["gap"]), equal_nan=True)
    # a checkpoint written without gap_tol resumes with it (the gap column starts as NaN)
    other = f"{folder}/plain.npz"
    solve(A_local, b_local, "logistic", "l1", checkpoint=other, **dict(settings, max_iter=10, gap_tol=None))
    mixed = solve(A_local, b_local, "logistic", "l1", checkpoint=other, **settings)
    assert len(mixed.history["gap"]) == len(mixed.history["iter"]) and mixed.relative_gap < 1e-8


# -- the estimators and the command line ----------------------------------------------------------------------

def test_lasso_estimator_reports_scikit_learns_dual_gap_and_stops_on_gap_tol():
    sklearn = pytest.importorskip("sklearn.linear_model")
    from mpiopt.estimators import ElasticNetADMM, LassoADMM
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 40))
    y = X[:, :5] @ rng.standard_normal(5) + 0.1 * rng.standard_normal(300)
    for ours, theirs in ((LassoADMM(alpha=0.05, comm=MPI.COMM_SELF), sklearn.Lasso(alpha=0.05, tol=1e-14)),
                         (ElasticNetADMM(alpha=0.05, l1_ratio=0.7, comm=MPI.COMM_SELF),
                          sklearn.ElasticNet(alpha=0.05, l1_ratio=0.7, tol=1e-14))):
        ours.fit(X, y)
        theirs.fit(X, y)
        assert 0 <= ours.dual_gap_ < 1e-7  # on scikit-learn's scale: (1/2n)||y - Xw||^2 + ...

        def objective(model):
            residual = y - X @ model.coef_ - model.intercept_
            l1 = getattr(model, "l1_ratio", 1.0)
            return (residual @ residual / (2 * y.size) + 0.05 * l1 * np.abs(model.coef_).sum()
                    + 0.05 * (1 - l1) / 2 * model.coef_ @ model.coef_)

        loose = type(ours)(**{**ours.get_params(), "gap_tol": 1e-3, "tol": 1e-12}).fit(X, y)
        tight = type(ours)(**{**ours.get_params(), "tol": 1e-12}).fit(X, y)
        assert loose.n_iter_ < tight.n_iter_
        # the certificate: the loose model is within its reported gap of the optimum
        assert objective(loose) - objective(theirs) <= loose.dual_gap_ * (1 + 1e-9) + 1e-15
        assert 0 <= loose.dual_gap_ <= 1e-3 * objective(loose) * (1 + 1e-9)


def test_cli_gap_tol_stops_on_the_gap_and_writes_the_certificate(tmp_path):
    import json
    import subprocess
    import sys
    output = tmp_path / "lasso.json"
    done = subprocess.run([sys.executable, "-m", "mpiopt", "lasso", "--synthetic", "2000x50", "--gap-tol", "1e-4",
                           "--eps-abs", "1e-12", "--eps-rel", "1e-12", "--quiet", "--output", str(output)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(output.read_text())
    assert result["status"] == "converged" and 0 <= result["relative_gap"] <= 1e-4
    assert result["history"]["gap"] and result["iterations"] < 1000
