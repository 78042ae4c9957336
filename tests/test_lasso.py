"""Consensus-ADMM lasso against independent single-process references, at any rank count."""
import numpy as np
import pytest
from mpi4py import MPI
from sklearn.linear_model import Lasso

from conftest import shard_bounds
from mpiopt.admm import lasso
from mpiopt.admm.reference import lasso_reference
from mpiopt.data.synthetic import lasso_rows

TIGHT = dict(eps_abs=1e-10, eps_rel=1e-10, max_iter=50000)
SHAPES = {"tall": (600, 20), "wide": (60, 80)}


def objective(A, b, lam, x):
    return 0.5 * float(np.sum((A @ x - b) ** 2)) + lam * float(np.abs(x).sum())


def sklearn_lasso(A, b, lam):
    """scikit-learn minimises ||b - Ax||^2 / (2 m) + alpha ||x||_1, so alpha = lam / m."""
    model = Lasso(alpha=lam / A.shape[0], fit_intercept=False, tol=1e-14, max_iter=200000)
    return model.fit(A, b).coef_


def problem(shape, seed=0):
    m, n = SHAPES[shape]
    A, b = lasso_rows(m, n, 0, m, density=0.2, noise=0.05, seed=seed)
    return A, b, 0.1 * float(np.abs(A.T @ b).max())


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["even", "uneven", "empty"])
@pytest.mark.parametrize("shape", ["tall", "wide"])
def test_lasso_objective_matches_sklearn(comm, shape, layout):
    A, b, lam = problem(shape)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    result = lasso(A[start:stop], b[start:stop], lam, comm=comm, **TIGHT)
    reference = objective(A, b, lam, sklearn_lasso(A, b, lam))
    assert result.status == "converged"
    assert abs(result.objective - reference) <= 1e-6 * reference
    assert abs(objective(A, b, lam, result.x) - reference) <= 1e-6 * reference
    assert np.array_equal(np.asarray(comm.bcast(result.x, root=0)), result.x), "ranks disagree on x"


@pytest.mark.many_ranks
@pytest.mark.mpi
@pytest.mark.parametrize("shape", ["tall", "wide"])
def test_lasso_answer_does_not_depend_on_rank_count(comm, shape):
    A, b, lam = problem(shape, seed=1)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    distributed = lasso(A[start:stop], b[start:stop], lam, comm=comm, **TIGHT)
    single = lasso(A, b, lam, comm=MPI.COMM_SELF, **TIGHT)
    assert np.allclose(distributed.x, single.x, rtol=0, atol=1e-7 * np.abs(single.x).max())
    assert abs(distributed.objective - single.objective) <= 1e-9 * single.objective


@pytest.mark.mpi(min_size=2)
def test_lasso_runs_on_a_sub_communicator(comm):
    """Only the even ranks solve; the odd ranks are not involved and must not be waited for."""
    A, b, lam = problem("tall", seed=2)
    sub = comm.Split(color=comm.rank % 2, key=comm.rank)
    try:
        if comm.rank % 2 == 0:
            start, stop = shard_bounds(A.shape[0], sub, "even")
            result = lasso(A[start:stop], b[start:stop], lam, comm=sub, **TIGHT)
            assert result.info["ranks"] == sub.size
            reference = objective(A, b, lam, sklearn_lasso(A, b, lam))
            assert abs(result.objective - reference) <= 1e-6 * reference
    finally:
        sub.Free()


@pytest.mark.mpi
def test_lam_ratio_uses_global_lambda_max(comm):
    A, b, _ = problem("tall", seed=3)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    lambda_max = float(np.abs(A.T @ b).max())
    result = lasso(A[start:stop], b[start:stop], comm=comm, lam_ratio=0.25, **TIGHT)
    assert result.info["lambda_max"] == pytest.approx(lambda_max, rel=1e-12)
    assert result.info["lam"] == pytest.approx(0.25 * lambda_max, rel=1e-12)
    at_max = lasso(A[start:stop], b[start:stop], comm=comm, lam_ratio=1.0, **TIGHT)
    assert np.abs(at_max.x).max() <= 1e-9, "x = 0 is optimal at lam = lambda_max"


@pytest.mark.mpi
def test_float32_and_non_contiguous_inputs_are_accepted(comm):
    A, b, lam = problem("tall", seed=4)
    start, stop = shard_bounds(A.shape[0], comm, "even")
    A32, b32 = A.astype(np.float32), b.astype(np.float32)
    from32 = lasso(A32[start:stop], b32[start:stop], lam, comm=comm, **TIGHT)
    reference = objective(A32.astype(np.float64), b32.astype(np.float64), lam,
                          sklearn_lasso(A32.astype(np.float64), b32.astype(np.float64), lam))
    assert from32.x.dtype == np.float64
    assert abs(from32.objective - reference) <= 1e-6 * reference

    wide_columns = np.zeros((A.shape[0], 2 * A.shape[1]))
    wide_columns[:, ::2] = A
    strided = wide_columns[start:stop, ::2]
    fortran = np.asfortranarray(A[start:stop])
    assert not strided.flags.c_contiguous and not fortran.flags.c_contiguous
    reference64 = objective(A, b, lam, sklearn_lasso(A, b, lam))
    for shard in (strided, fortran):
        result = lasso(shard, b[start:stop], lam, comm=comm, **TIGHT)
        assert abs(result.objective - reference64) <= 1e-6 * reference64


@pytest.mark.mpi
def test_result_reports_history_timings_and_max_iter_status(comm):
    A, b, lam = problem("tall", seed=5)
    start, stop = shard_bounds(A.shape[0], comm, "even")
    result = lasso(A[start:stop], b[start:stop], lam, comm=comm, max_iter=7, eps_abs=0, eps_rel=0, log_every=3,
                   working_set=False,
                   verbose=True)
    assert result.status == "max_iterations" and result.info["stop"] == "max_iter" and result.iterations == 7
    assert result.history["iter"] == list(range(1, 8))
    assert all(len(column) == 7 for column in result.history.values())
    assert result.objective_history["iter"] == [1, 3, 6, 7], "with the log on, the objective at each log row"
    quiet = lasso(A[start:stop], b[start:stop], lam, comm=comm, max_iter=7, eps_abs=0, eps_rel=0, log_every=3,
                  working_set=False)
    assert quiet.objective_history["iter"] == [7] and quiet.objective == result.objective
    assert result.objective == result.objective_history["objective"][-1]
    assert result.objective == pytest.approx(objective(A, b, lam, result.x), rel=1e-12)
    assert set(result.timings) >= {"setup", "solve", "per_iteration", "x_step", "communication", "total"}
    assert all(value >= 0 for value in result.timings.values())


@pytest.mark.mpi
def test_residual_history_is_global_not_rank_zero_only(comm):
    """r_norm^2 = sum_i ||x_i - z||^2 over all ranks; on one rank it is ||x - z||^2 alone."""
    A, b, lam = problem("tall", seed=6)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    result = lasso(A[start:stop], b[start:stop], lam, comm=comm, max_iter=1, rho=1.0, alpha=1.0, working_set=False)
    x_local = np.linalg.solve(A[start:stop].T @ A[start:stop] + np.eye(A.shape[1]), A[start:stop].T @ b[start:stop])
    squared = comm.allreduce(float(np.sum((x_local - result.x) ** 2)))
    assert result.history["r_norm"][0] == pytest.approx(np.sqrt(squared), rel=1e-9)


def test_reference_solver_agrees_with_sklearn():
    for shape in SHAPES:
        A, b, lam = problem(shape, seed=7)
        x, value = lasso_reference(A, b, lam)
        expected = objective(A, b, lam, sklearn_lasso(A, b, lam))
        assert abs(value - expected) <= 1e-9 * expected
        assert value == pytest.approx(objective(A, b, lam, x), rel=1e-12)


@pytest.mark.mpi
def test_verbose_log_prints_on_rank_zero_only(comm, capsys):
    A, b, lam = problem("tall", seed=8)
    start, stop = shard_bounds(A.shape[0], comm, "even")
    lasso(A[start:stop], b[start:stop], lam, comm=comm, verbose=True, max_iter=5, working_set=False)
    printed = capsys.readouterr().out
    if comm.rank == 0:
        for column in ("iter", "objective", "r_norm", "eps_pri", "s_norm", "eps_dual", "rho", "time"):
            assert column in printed
        assert "status:      max_iterations" in printed
    else:
        assert printed == ""


@pytest.mark.mpi
@pytest.mark.parametrize("reducer", ["mpi", "ring", "rd", "hier", "ps-sharded"])
def test_z_step_reducer_gives_the_same_answer(comm, reducer):
    A, b, lam = problem("tall", seed=9)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    baseline = lasso(A[start:stop], b[start:stop], lam, comm=comm, reducer="mpi", **TIGHT)
    result = lasso(A[start:stop], b[start:stop], lam, comm=comm, reducer=reducer, **TIGHT)
    assert result.info["settings"]["reducer"] == reducer
    assert np.allclose(result.x, baseline.x, rtol=0, atol=1e-9 * np.abs(baseline.x).max())
    assert abs(result.iterations - baseline.iterations) <= 2
