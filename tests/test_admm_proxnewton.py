"""Proximal Newton on working sets (mpiopt.admm.proxnewton): its coordinate descent against a brute force
over sign patterns, the choice of inner solver, the logistic elastic net against an independent L-BFGS-B
solve of the split form, and the same iterates at any rank count."""
import itertools

import numpy as np
import pytest
import scipy.optimize
from mpi4py import MPI

from conftest import shard_bounds
from mpiopt.admm import solve
from mpiopt.admm.proxnewton import penalized_quadratic, violation
from mpiopt.core import CollectiveError
from test_admm_workingset import optimal_objective, problem_data


def brute_force(H, grad, x, l1, l2, free):
    """argmin of grad^T (y - x) + (y - x)^T H (y - x) / 2 + l1 |y|_1 + l2 |y|^2 / 2 (the last ``free``
    coordinates unpenalized) over every sign pattern: on a pattern the problem is a linear system; the
    minimizer is the best solution whose signs agree with its pattern."""
    size = len(x)
    penalized = size - free
    best, best_value = None, np.inf
    for signs in itertools.product((-1, 0, 1), repeat=penalized):
        kept = [k for k in range(penalized) if signs[k] != 0] + list(range(penalized, size))
        y = np.zeros(size)
        if kept:
            sign = np.array([signs[k] if k < penalized else 0 for k in kept], dtype=float)
            ridge = np.array([l2 if k < penalized else 0.0 for k in kept])
            system = H[np.ix_(kept, kept)] + np.diag(ridge)
            rhs = H[kept] @ x - grad[kept] - l1 * sign
            try:
                y[kept] = np.linalg.solve(system, rhs)
            except np.linalg.LinAlgError:
                continue
            if np.any(np.sign(y[kept[:len(kept) - free]]) != sign[:len(kept) - free]):
                continue
        d = y - x
        value = grad @ d + 0.5 * d @ H @ d + l1 * np.abs(y[:penalized]).sum() + 0.5 * l2 * y[:penalized] @ y[:penalized]
        if value < best_value:
            best, best_value = y, value
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("free", [0, 1])
@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_coordinate_descent_finds_the_brute_force_minimizer(seed, free, l2):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((9, 5))
    H = B.T @ B
    grad, x = rng.standard_normal(5) * 3, rng.standard_normal(5) * (rng.random(5) < 0.5)
    y, epochs = penalized_quadratic(H, grad, x, 1.0, l2, free, 1e-13)
    expected = brute_force(H, grad, x, 1.0, l2, free)
    assert np.abs(y - expected).max() < 1e-9 and epochs >= 1
    assert violation(y, grad + H @ (y - x), 1.0, l2, free) <= 1e-13


def test_coordinate_descent_handles_duplicated_columns():
    """A singular H (two equal columns): still a minimizer, the violation met; the objective the brute force's."""
    rng = np.random.default_rng(7)
    B = rng.standard_normal((8, 4))
    B[:, 3] = B[:, 1]
    H, grad, x = B.T @ B, rng.standard_normal(4) * 4, np.zeros(4)
    y, _ = penalized_quadratic(H, grad, x, 0.5, 0.0, 0, 1e-12)

    def model(v):
        return grad @ (v - x) + 0.5 * (v - x) @ H @ (v - x) + 0.5 * np.abs(v).sum()
    singular = scipy.optimize.minimize(lambda w: model(w[:4] - w[4:]), np.ones(8), bounds=[(0, None)] * 8,
                                       method="L-BFGS-B", options={"ftol": 0, "gtol": 1e-12}).x
    assert model(y) <= model(singular[:4] - singular[4:]) + 1e-9


@pytest.mark.parametrize("loss, penalty, given, expected", [
    ("logistic", "l1", {}, "prox_newton"),
    ("logistic", "elastic_net", {"l1_ratio": 0.5}, "prox_newton"),
    ("logistic", "l1", {"inner_solver": "admm"}, "admm"),
    ("squared", "l1", {}, "admm"),  # dense: ADMM's Gram x-step, measured faster
    ("squared", "l1", {"sparse": True}, "prox_newton"),
    ("squared", "elastic_net", {"inner_solver": "prox_newton", "l1_ratio": 0.5}, "prox_newton"),
    ("logistic", "group_lasso", {"groups": np.repeat(np.arange(5), 4), "lam": 3.0}, "admm"),
    ("huber", "l1", {"working_set": True}, "admm"),
])
def test_the_inner_solver_is_proximal_newton_where_it_applies(loss, penalty, given, expected):
    options = dict(given)
    A, b = problem_data(21, (80, 20), 0.3, "logistic_l1" if loss == "logistic" else "lasso",
                        sparse=options.pop("sparse", False))
    weight = {"lam": options.pop("lam")} if "lam" in options else {"lam_ratio": 0.3}
    result = solve(A, b, loss, penalty, comm=MPI.COMM_SELF, **weight, **options)
    assert result.info["inner_solver"] == expected and result.status == "converged"


def test_asking_for_proximal_newton_where_it_does_not_apply_is_a_collective_error():
    A, b = problem_data(22, (60, 20), 0.0)
    with pytest.raises(CollectiveError, match="inner_solver='prox_newton' needs"):
        solve(A, b, "huber", "l1", comm=MPI.COMM_SELF, lam_ratio=0.3, inner_solver="prox_newton", working_set=True)
    with pytest.raises(CollectiveError, match="inner_solver='prox_newton' needs"):
        solve(A, b, "squared", "group_lasso", comm=MPI.COMM_SELF, lam=3.0, groups=np.repeat(np.arange(5), 4),
              inner_solver="prox_newton")
    with pytest.raises(CollectiveError, match="inner_solver must be one of"):
        solve(A, np.sign(b), "logistic", "l1", comm=MPI.COMM_SELF, lam_ratio=0.3, inner_solver="newton")


def logistic_elastic_net_optimum(A, b, lam, intercept):
    """P* of the logistic elastic net (l1_ratio 0.7) by optimal_objective's split form."""
    return optimal_objective(A, b, "logistic_elastic_net", lam, intercept)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("layout", ["uneven", "empty"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("intercept", [False, True])
def test_the_logistic_elastic_net_reaches_the_optimum(comm, intercept, sparse, layout):
    """P(x) - gap <= P* <= P(x) against an independent L-BFGS-B solve, at 1-4 ranks, with an empty shard."""
    if layout == "empty" and comm.size == 1:
        pytest.skip("one rank cannot leave a rank empty")
    A, b = problem_data(23, (150, 30), 0.5, "logistic_l1", sparse)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    result = solve(A[start:stop], b[start:stop], "logistic", "elastic_net", comm=comm, lam_ratio=0.1, l1_ratio=0.7,
                   intercept=intercept, gap_tol=1e-10)
    assert result.info["inner_solver"] == "prox_newton" and result.status == "converged"
    optimum = logistic_elastic_net_optimum(A, b, result.info["lam"], intercept)
    assert result.objective - result.gap <= optimum + 1e-11 * abs(optimum)
    assert result.objective <= optimum + 2e-10 * abs(optimum)


@pytest.mark.many_ranks
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_proximal_newton_takes_the_same_steps_at_any_rank_count(comm, sparse, loss):
    """Rank 0's directions and steps from all-reduced sums: the same iterations, working sets and gaps as one
    process on all the rows, to the sums' rounding."""
    A, b = problem_data(24, (200, 50), 0.5, "logistic_l1" if loss == "logistic" else "lasso", sparse)
    start, stop = shard_bounds(A.shape[0], comm, "uneven")
    settings = dict(lam_ratio=0.05, intercept=True, gap_tol=1e-12, inner_solver="prox_newton")
    distributed = solve(A[start:stop], b[start:stop], loss, "l1", comm=comm, **settings)
    alone = solve(A, b, loss, "l1", comm=MPI.COMM_SELF, **settings)
    assert distributed.iterations == alone.iterations
    assert distributed.info["working_set_sizes"] == alone.info["working_set_sizes"]
    assert np.abs(np.asarray(distributed.x) - np.asarray(alone.x)).max() < 1e-9
    gaps = [row["relative_gap"] for row in distributed.info["outer"]]
    assert np.allclose(gaps, [row["relative_gap"] for row in alone.info["outer"]], rtol=1e-6, atol=1e-13)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("layout", ["uneven", "empty"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("model", ["lasso", "elastic_net"])
def test_the_squared_loss_by_proximal_newton_reaches_the_optimum(comm, model, sparse, layout):
    """The squared loss's proximal Newton (a constant Hessian, the cache's Gram matrix when the block is tall)
    against P* of an independent L-BFGS-B split form, with an intercept: the certificate is a bound and the
    objective is P* to it."""
    if layout == "empty" and comm.size == 1:
        pytest.skip("one rank cannot leave a rank empty")
    A, b = problem_data(31, (90, 25), 0.5, model, sparse)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    options = {"l1_ratio": 0.7} if model == "elastic_net" else {}
    result = solve(A[start:stop], b[start:stop], "squared", "l1" if model == "lasso" else "elastic_net", comm=comm,
                   lam_ratio=0.1, intercept=True, gap_tol=1e-10, inner_solver="prox_newton", **options)
    assert result.info["inner_solver"] == "prox_newton" and result.status == "converged"
    optimum = optimal_objective(A, b, model, result.info["lam"], True)
    assert result.objective - result.gap <= optimum + 1e-11 * abs(optimum)
    assert result.objective <= optimum + 2e-10 * abs(optimum)


def blocked_model(seed, intercept):
    """A sparse restricted problem's model at x: (Blocks of width 4 over its 23 columns, the shard, x, grad, the
    row weights), with the dense Hessian A_aug^T diag(weights) A_aug formed explicitly for the reference."""
    import scipy.sparse
    from mpiopt.admm.solver import Problem
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((70, 23)) * (rng.random((70, 23)) < 0.35)
    dense[:, 1] = rng.standard_normal(70)
    labels = np.where(rng.random(70) < 0.5, 1.0, -1.0)
    problem = Problem(scipy.sparse.csr_matrix(dense), labels, "logistic", MPI.COMM_SELF, intercept=intercept)
    shard = problem.shard
    size = shard.n
    x = np.where(rng.random(size) < 0.4, rng.standard_normal(size), 0.0)
    weights = rng.random(70) * 0.25
    grad = rng.standard_normal(size) * 3
    augmented = np.hstack([dense, np.ones((70, 1))]) if intercept else dense
    return shard, x, grad, weights, augmented.T @ (weights[:, None] * augmented)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("l2", [0.0, 0.4])
def test_the_blocked_direction_is_the_dense_models_minimizer(seed, intercept, l2):
    """Block coordinate descent with the model's gradient carried by the rows (no Hessian formed) finds the
    minimizer that coordinate descent on the explicitly formed dense Hessian finds."""
    from mpiopt.admm import proxnewton
    shard, x, grad, weights, H = blocked_model(seed, intercept)
    blocks = proxnewton.Blocks(shard, 4)
    assert len(blocks.starts) == 6 and blocks.sizes[-1] == 3  # 23 columns: five blocks of 4 and one of 3

    import types
    solver = types.SimpleNamespace(comm=MPI.COMM_SELF, l1=1.5, l2=l2, epochs=0)  # what direction reads of a ProxNewton
    hessian = blocks.hessian(weights, MPI.COMM_SELF)
    d = blocks.direction(x, grad, hessian, 1e-12, solver)
    y, _ = penalized_quadratic(H, grad, x, 1.5, l2, int(intercept), 1e-13, max_epochs=100000)
    assert np.abs((x + d) - y).max() < 1e-9
    assert violation(x + d, grad + H @ d, 1.5, l2, int(intercept)) < 1e-9
    one_block = proxnewton.Blocks(shard, 23)  # every column in one block: the dense Hessian itself
    assert np.allclose(one_block.dense_hessian(weights, MPI.COMM_SELF), H, rtol=1e-13, atol=1e-13)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("layout", ["uneven", "empty"])
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("model", ["logistic_l1", "lasso"])
def test_blocked_proximal_newton_reaches_the_optimum_at_any_rank_count(comm, model, intercept, layout, monkeypatch):
    """Working sets large enough for the blocked direction (the blocks made small here): the certificate holds
    against an independent L-BFGS-B solve, and the answer is one process's on all the rows."""
    from mpiopt.admm import proxnewton
    if layout == "empty" and comm.size == 1:
        pytest.skip("one rank cannot leave a rank empty")
    monkeypatch.setattr(proxnewton, "BLOCKED_FROM", 8)
    monkeypatch.setattr(proxnewton, "BLOCK_WIDTH", 5)
    calls = []
    direction = proxnewton.Blocks.direction
    monkeypatch.setattr(proxnewton.Blocks, "direction", lambda self, *a: calls.append(1) or direction(self, *a))
    A, b = problem_data(31, (160, 40), 0.5, model, True)
    loss = "logistic" if model == "logistic_l1" else "squared"
    start, stop = shard_bounds(A.shape[0], comm, layout)
    settings = dict(lam_ratio=0.03 if loss == "logistic" else 0.003, intercept=intercept, gap_tol=1e-10,
                    inner_solver="prox_newton")
    result = solve(A[start:stop], b[start:stop], loss, "l1", comm=comm, **settings)
    assert calls and max(result.info["working_set_sizes"]) > 8 and result.status == "converged"
    optimum = optimal_objective(A, b, model, result.info["lam"], intercept)
    assert result.objective - result.gap <= optimum + 1e-11 * abs(optimum)
    assert result.objective <= optimum + 2e-10 * abs(optimum)
    alone = solve(A, b, loss, "l1", comm=MPI.COMM_SELF, **settings)
    assert np.abs(np.asarray(result.x) - np.asarray(alone.x)).max() < 1e-7
