"""Working sets (mpiopt.admm.workingset): the outer loop, its column cache and its certificate.

Against independent references: scikit-learn's solutions (the screened columns
are zero there, on random, correlated and duplicated designs), P* from an
independent L-BFGS-B solve of the split form (the same objective to the tolerance, at 1-4 ranks,
uneven and empty shards, dense and sparse, lasso, elastic net and L1 logistic,
with and without an intercept), and the Gram matrix formed directly (the
incremental one is the same).  And: the gap is >= 0 and reaches gap_tol; the
full Gram matrix is never formed; a path reuses the gathered columns; the
answer does not depend on the rank count; the setting is checked and a
checkpoint runs the full solver.
"""
import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
import scipy.special
from mpi4py import MPI

from conftest import shard_bounds
from mpiopt.admm import lasso, solve
from mpiopt.admm.design import Design
from mpiopt.admm.path import regularization_path
from mpiopt.admm.penalties import L1
from mpiopt.admm.solver import Problem
from mpiopt.admm.workingset import ColumnCache, choose, scores
from mpiopt.core import CollectiveError
from test_admm_screening import CASES, design, reference, targets

LOSS = {"lasso": ("squared", "l1", {}), "elastic_net": ("squared", "elastic_net", {"l1_ratio": 0.7}),
        "logistic_l1": ("logistic", "l1", {})}


def problem_data(seed, shape=(60, 25), correlation=0.5, model="lasso", sparse=False):
    A = design(seed, shape, correlation)
    b = targets(A, model, seed)
    if sparse:
        rng = np.random.default_rng(seed)
        A = scipy.sparse.csr_matrix(A * (rng.random(A.shape) < 0.3))
    return A, b


def ws_solve(A, b, model, comm, lam_ratio=0.1, intercept=False, **settings):
    loss, penalty, options = LOSS[model]
    return solve(A, b, loss, penalty, comm=comm, lam_ratio=lam_ratio, intercept=intercept, **options, **settings)


@pytest.mark.parametrize("seed, shape, correlation, model, intercept", CASES)
def test_screened_columns_are_zero_in_scikit_learns_solution(seed, shape, correlation, model, intercept):
    """Every column the working-set solver proved zero is zero in scikit-learn's solution, and its answer has
    scikit-learn's support and objective."""
    A = design(seed, shape, correlation)
    b = targets(A, model, seed)
    loss, penalty, options = LOSS[model]
    problem = Problem(A, b, loss, MPI.COMM_SELF, intercept=intercept)
    result = problem.solve(penalty, lam_ratio=0.2, gap_tol=1e-10, **options)
    assert result.info["working_set"] and result.status == "converged" and result.relative_gap <= 1e-10
    coef, _ = reference(A, b, model, result.info["lam"], intercept)
    screened = np.asarray(result.info["screened_columns"], dtype=int)
    assert not np.any(np.abs(coef[screened]) > 1e-8), "a screened column is nonzero at the optimum"
    x = np.asarray(result.x)[:A.shape[1]]
    if model != "logistic_l1" and correlation != "ties":  # duplicated columns: the solution is not unique
        assert np.abs(x - coef).max() < 1e-5 * max(1.0, np.abs(coef).max())


def optimal_objective(A, b, model, lam, intercept):
    """P* by L-BFGS-B on the split form x = x+ - x- (x+, x- >= 0; the intercept free), on all rows at once:
    a smooth bound-constrained problem, independent of the ADMM code, solved to gradient 1e-13."""
    A = A.toarray() if scipy.sparse.issparse(A) else np.asarray(A)
    m, n = A.shape
    l1 = lam * (0.7 if model.endswith("elastic_net") else 1.0)
    l2 = lam * 0.3 if model.endswith("elastic_net") else 0.0

    def split(w):
        return w[:n] - w[n:2 * n], (w[2 * n] if intercept else 0.0)

    def value_and_gradient(w):
        x, c = split(w)
        scores = A @ x + c
        if model.startswith("logistic"):
            margins = -b * scores
            loss = np.logaddexp(0.0, margins).sum()
            d_scores = -b * scipy.special.expit(margins)
        else:
            residual = scores - b
            loss, d_scores = 0.5 * residual @ residual, residual
        d_x = A.T @ d_scores + l2 * x
        value = loss + l1 * w[:2 * n].sum() + 0.5 * l2 * x @ x
        gradient = np.concatenate([d_x + l1, -d_x + l1] + ([[d_scores.sum()]] if intercept else []))
        return value, gradient
    bounds = [(0.0, None)] * (2 * n) + [(None, None)] * int(intercept)
    fit = scipy.optimize.minimize(value_and_gradient, np.zeros(2 * n + int(intercept)), jac=True,
                                  method="L-BFGS-B", bounds=bounds,
                                  options={"maxiter": 100000, "gtol": 1e-13, "ftol": 0.0, "maxcor": 30})
    return fit.fun


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("layout", ["even", "uneven", "empty"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("model", ["lasso", "elastic_net", "logistic_l1"])
def test_working_sets_reach_the_optimal_objective(comm, model, intercept, sparse, layout):
    """The certificate holds against P* from an independent solver (P(x) - gap <= P*), and P(x) is P* to
    the tolerance (the full ADMM solver's agreement with the same P* is tested in test_solver.py)."""
    if layout == "empty" and comm.size == 1:
        pytest.skip("one rank cannot leave a rank empty")
    A, b = problem_data(3, (80, 30) if model != "logistic_l1" else (120, 30), 0.5, model, sparse)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    ws = ws_solve(A[start:stop], b[start:stop], model, comm, intercept=intercept, gap_tol=1e-9)
    assert ws.info["working_set"] and ws.status == "converged"
    assert 0 <= ws.gap and ws.relative_gap <= 1e-9
    optimum = optimal_objective(A, b, model, ws.info["lam"], intercept)
    assert ws.objective - ws.gap <= optimum + 1e-11 * abs(optimum)
    assert ws.objective <= optimum + 2e-9 * abs(optimum)
    # every rank has the same answer
    x = np.asarray(ws.x)
    assert np.array_equal(comm.bcast(x, root=0), x)


@pytest.mark.many_ranks
@pytest.mark.mpi(min_size=2)
def test_the_answer_does_not_depend_on_the_rank_count(comm):
    A, b = problem_data(5, (90, 40), 0.9)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    distributed = ws_solve(A[start:stop], b[start:stop], "lasso", comm, intercept=True, gap_tol=1e-10)
    alone = ws_solve(A, b, "lasso", MPI.COMM_SELF, intercept=True, gap_tol=1e-10)
    assert abs(distributed.objective - alone.objective) <= 2e-10 * abs(alone.objective)
    assert np.abs(np.asarray(distributed.x) - np.asarray(alone.x)).max() < 1e-4


@pytest.mark.many_ranks
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("working_set", [True, False])
@pytest.mark.parametrize("limit", [0.003, 0.02, 0.08])
def test_a_time_limit_is_one_decision_for_every_rank(comm, limit, working_set):
    """Each rank's clock differs: the limit (in the engine's residual all-reduce, and the working sets' clock
    for their inner solves' settings) is one decision for all ranks, so none is left waiting."""
    A, b = problem_data(6, (200, 60), 0.9, "logistic_l1")
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    for _ in range(3):
        result = ws_solve(A[start:stop], b[start:stop], "logistic_l1", comm, gap_tol=1e-14, eps_abs=0.0,
                          eps_rel=0.0, time_limit=limit, working_set=working_set)
        assert result.status in ("time_limit", "converged", "max_iterations")
        assert comm.allgather((result.status, result.iterations)) == [(result.status, result.iterations)] * comm.size


@pytest.mark.parametrize("model", ["lasso", "elastic_net", "logistic_l1"])
def test_the_gap_is_nonnegative_and_reaches_the_tolerance(model):
    A, b = problem_data(7, (100, 60), 0.5, model)
    for tol in (1e-4, 1e-8):
        result = ws_solve(A, b, model, MPI.COMM_SELF, gap_tol=tol)
        gaps = [row["gap"] for row in result.info["outer"]]
        assert min(gaps) >= -1e-12 * abs(result.objective)
        assert result.relative_gap <= tol and result.relative_gap == result.info["outer"][-1]["relative_gap"]
        assert result.info["outer"][0]["relative_gap"] > tol  # it did work to get there
        assert result.iterations == result.info["outer"][-1]["iterations"] == len(result.history["iter"])
    # the default stopping rule is a relative gap of 1e-6
    assert ws_solve(A, b, model, MPI.COMM_SELF).relative_gap <= 1e-6


def test_the_full_gram_matrix_is_never_formed():
    A, b = problem_data(8, (400, 300), 0.0)
    problem = Problem(A, b, "squared", MPI.COMM_SELF)
    result = problem.solve("l1", lam_ratio=0.3)
    assert result.info["working_set"] and not problem.shard.gram_formed
    assert max(result.info["working_set_sizes"]) < 300 and len(problem._column_cache) < 300
    full = problem.solve("l1", lam_ratio=0.3, working_set=False)  # the full solver forms it
    assert problem.shard.gram_formed and abs(full.objective - result.objective) <= 1e-5 * result.objective


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("intercept", [False, True])
def test_the_incremental_gram_matrix_is_the_direct_one(sparse, intercept):
    A, _ = problem_data(9, (50, 30), 0.5, sparse=sparse)
    cache = ColumnCache(Design(A, intercept, np), np, gram_wanted=True)
    cache.add(np.array([4, 1, 7]))
    cache.add(np.array([1, 20, 3, 9]))
    cache.add(np.array([25]))
    assert list(cache.order) == [4, 1, 7, 20, 3, 9, 25]  # in the order they came
    for columns in ([4, 1, 7, 3, 9, 20, 25], [7, 20, 25], [3]):
        block, gram = cache.take(np.array(columns))
        dense = A.toarray() if sparse else A
        expected_block = dense[:, columns]
        assert np.allclose(block.toarray() if sparse else block, expected_block, rtol=0, atol=0)
        augmented = np.hstack([expected_block, np.ones((50, 1))]) if intercept else expected_block
        assert np.allclose(gram, augmented.T @ augmented, rtol=1e-13, atol=1e-12)
        x = np.linspace(-1, 1, len(columns))
        margin = cache.margin(x, np.array(columns), 0.5)
        assert np.allclose(margin, expected_block @ x + (0.5 if intercept else 0.0), rtol=1e-13, atol=1e-12)


def test_the_working_set_rule():
    """The support first, then the smallest scores; size max(p0, 2 |support|, the last size); screened never."""
    norms = np.ones(8)
    correlation = np.array([1.0, 0.2, 0.9, 0.5, 0.99, 0.1, 0.0, 0.8])
    kept = np.array([True] * 7 + [False])
    d = scores(correlation, norms, L1(1.0), kept)
    assert np.isinf(d[7]) and d[4] < d[2] < d[3]
    assert np.allclose(d[:7], 1.0 - correlation[:7])  # the KKT violation, skglm's
    norms[2] = 100.0  # a long column: celer's (1 - 0.9) / 100 would put it first; the violation does not
    assert np.array_equal(scores(correlation, norms, L1(1.0), kept), d)
    support = np.zeros(8, dtype=bool)
    support[5] = True
    assert list(choose(d, support, 0, 3)) == [0, 4, 5]
    assert list(choose(d, support, 4, 3)) == [0, 2, 4, 5]  # never smaller than the last working set
    support[[1, 3]] = True
    chosen = choose(d, support, 0, 2)
    assert {1, 3, 5} <= set(chosen) and len(chosen) == 6 and 7 not in chosen


def test_a_path_reuses_the_gathered_columns_and_matches_the_full_path():
    A, b = problem_data(10, (150, 80), 0.5)
    ws = regularization_path(A, b, "squared", "l1", MPI.COMM_SELF, n_lams=8, lam_min_ratio=0.05, gap_tol=1e-9,
                             working_set=True)
    full = regularization_path(A, b, "squared", "l1", MPI.COMM_SELF, n_lams=8, lam_min_ratio=0.05,
                               working_set=False, gap_tol=1e-11, eps_abs=0.0, eps_rel=0.0, max_iter=20000)
    assert all(r.info["working_set"] for r in ws.results)
    assert np.all(ws.objectives <= full.objectives + 1e-9 * np.abs(full.objectives))
    assert np.all(full.objectives <= ws.objectives + np.array([r.gap for r in ws.results]) + 1e-12)
    assert ws.results[0].iterations == 0  # lambda_max: 0 is certified at once
    assert ws.results[0].relative_gap <= 1e-12


@pytest.mark.mpi(min_size=1)
def test_a_squared_path_on_tall_dense_shards_runs_the_full_solver_by_default(comm):
    """Its Gram matrix serves every weight; wide or sparse squared paths, and logistic ones, run working sets
    (the first weight, lambda_max, is certified at 0 without iterating)."""
    def path_uses_working_sets(A, b, loss="squared"):
        start, stop = shard_bounds(A.shape[0], comm, "even")
        path = regularization_path(A[start:stop], b[start:stop], loss, "l1", comm, n_lams=3, lam_min_ratio=0.1)
        return [bool(r.info.get("working_set")) for r in path.results[1:]]

    tall, b = problem_data(13, (40 * comm.size + 40, 10), 0.0)
    assert path_uses_working_sets(tall, b) == [False, False]
    assert path_uses_working_sets(scipy.sparse.csr_matrix(tall), b) == [True, True]
    assert path_uses_working_sets(tall, np.where(b > np.median(b), 1.0, -1.0), "logistic") == [True, True]
    wide, b = problem_data(13, (30, 60), 0.0)
    assert path_uses_working_sets(wide, b) == [True, True]


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("fraction", [0.05, 0.5, 0.95])
@pytest.mark.parametrize("model", ["lasso", "logistic_l1"])
def test_a_checkpoint_resumes_bitwise_wherever_the_run_was_cut(comm, tmp_path_factory, model, fraction):
    """Cut by max_iter (inside an inner solve, mostly), resumed from the file (the outer state and the inner
    ADMM solve's own checkpoint; a proximal Newton inner solve is redone from its outer state): bit for bit
    the uninterrupted run; a finished run resumed does nothing new, and
    the inner solves' files are gone once it has finished."""
    A, b = problem_data(14, (120, 40), 0.5, model)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    folder = comm.bcast(str(tmp_path_factory.mktemp("ws_checkpoint")) if comm.rank == 0 else None)
    settings = dict(intercept=True, gap_tol=1e-10, max_iter=5000)
    whole = ws_solve(A[start:stop], b[start:stop], model, comm, **settings)
    assert whole.status == "converged" and whole.iterations > (20 if model == "lasso" else 6)  # logistic: Newton
    cut = max(1, int(fraction * whole.iterations))
    path = f"{folder}/state.npz"
    first = ws_solve(A[start:stop], b[start:stop], model, comm, checkpoint=path, **dict(settings, max_iter=cut))
    assert first.status == "max_iterations" and first.iterations == cut and first.info["working_set"]
    resumed = ws_solve(A[start:stop], b[start:stop], model, comm, checkpoint=path, **settings)
    if model == "lasso":  # the inner ADMM solve resumes from its own checkpoint, where it was cut
        assert resumed.info["resumed_at"] == cut
    else:  # proximal Newton's inner solves (a few Newton steps) are redone from the top of their outer iteration
        tops = [row["iterations"] for row in whole.info["outer"]]
        assert resumed.info["resumed_at"] == max(top for top in tops if top <= cut)
    assert resumed.iterations == whole.iterations
    assert np.array_equal(np.asarray(resumed.x), np.asarray(whole.x)) and resumed.gap == whole.gap
    again = ws_solve(A[start:stop], b[start:stop], model, comm, checkpoint=path, **settings)
    assert np.array_equal(np.asarray(again.x), np.asarray(whole.x)) and again.iterations == whole.iterations
    if comm.rank == 0:
        import os
        assert sorted(os.listdir(folder)) == ["state.npz"]


@pytest.mark.mpi(min_size=1)
def test_a_full_solver_checkpoint_is_refused_by_working_sets(comm, tmp_path_factory):
    A, b = problem_data(15, (60, 20), 0.0)
    start, stop = shard_bounds(A.shape[0], comm, "even")
    folder = comm.bcast(str(tmp_path_factory.mktemp("ws_refused")) if comm.rank == 0 else None)
    path = f"{folder}/state.npz"
    lasso(A[start:stop], b[start:stop], lam_ratio=0.1, comm=comm, checkpoint=path, working_set=False)
    with pytest.raises(CollectiveError, match="checkpoint"):
        lasso(A[start:stop], b[start:stop], lam_ratio=0.1, comm=comm, checkpoint=path)


def test_settings_are_checked_and_a_checkpoint_keeps_working_sets(tmp_path):
    A, b = problem_data(11, (60, 20), 0.0)
    with pytest.raises(CollectiveError, match="working_set must be True, False or None"):
        lasso(A, b, lam_ratio=0.1, comm=MPI.COMM_SELF, working_set="yes")
    with pytest.raises(CollectiveError, match="working_set_size"):
        lasso(A, b, lam_ratio=0.1, comm=MPI.COMM_SELF, working_set_size=0)
    checkpointed = lasso(A, b, lam_ratio=0.1, comm=MPI.COMM_SELF, checkpoint=str(tmp_path / "state.npz"))
    assert checkpointed.info["working_set"] and (tmp_path / "state.npz").exists()
    # where there is no duality gap (ridge, Huber) the full solver runs, even when asked for working sets
    ridge = solve(A, b, "squared", "l2", lam=1.0, comm=MPI.COMM_SELF, working_set=True)
    assert "outer_iterations" not in ridge.info
    off = lasso(A, b, lam_ratio=0.1, comm=MPI.COMM_SELF, working_set=False)
    assert "outer_iterations" not in off.info


requires_gpu = pytest.mark.skipif(__import__("mpiopt.core.backend", fromlist=["x"]).device_count() == 0,
                                  reason="needs CuPy and a CUDA device")


@pytest.mark.gpu
@requires_gpu
@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("model", ["lasso", "elastic_net", "logistic_l1"])
@pytest.mark.parametrize("shape", [(400, 60), (40, 120)])
def test_gpu_working_sets_reach_the_cpu_answer(comm, model, intercept, shape):
    """On CuPy shards working sets are off by default (not measured there) and run when asked: the same
    certified objective as on the CPU, the answer a CuPy array."""
    import cupy
    A, b = problem_data(12, shape, 0.5, model)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    A_local, b_local = A[start:stop], b[start:stop]
    cpu = ws_solve(A_local, b_local, model, comm, intercept=intercept, gap_tol=1e-9)
    default = ws_solve(cupy.asarray(A_local), cupy.asarray(b_local), model, comm, intercept=intercept, gap_tol=1e-9)
    assert "outer_iterations" not in default.info
    gpu = ws_solve(cupy.asarray(A_local), cupy.asarray(b_local), model, comm, intercept=intercept, gap_tol=1e-9,
                   working_set=True)
    assert isinstance(gpu.x, cupy.ndarray) and gpu.info["working_set"] and gpu.status == "converged"
    assert abs(gpu.objective - cpu.objective) <= 2e-9 * abs(cpu.objective) + gpu.gap + cpu.gap


def test_restricted_logistic_problems_take_the_x_solver_they_are_given():
    A, b = problem_data(16, (80, 30), 0.0, "logistic_l1")
    problem = Problem(A, b, "logistic", MPI.COMM_SELF, x_solver="lbfgs")
    sub = problem.on_columns(np.asfortranarray(A[:, :5]), x_solver="newton")
    assert sub.shard.x_solver == sub.x_solver == "newton" and problem.shard.x_solver == "lbfgs"
    assert problem.on_columns(np.asfortranarray(A[:, :5])).shard.x_solver == "lbfgs"
