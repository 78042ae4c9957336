"""The general consensus-ADMM solver: every loss and penalty against an independent reference."""
import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
from mpi4py import MPI
from sklearn.linear_model import ElasticNet, Lasso

from conftest import shard_bounds
from mpiopt.admm import penalties, solve
from mpiopt.admm.path import regularization_path
from mpiopt.core import CollectiveError

TIGHT = dict(eps_abs=1e-10, eps_rel=1e-10, max_iter=50000)


def regression(seed=0, m=300, n=12, outliers=False):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    x = rng.standard_normal(n) * (rng.random(n) < 0.5)
    b = A @ x + 0.3 + 0.1 * rng.standard_normal(m)
    if outliers:
        b[::17] += 20 * rng.standard_normal(b[::17].size)
    return A, b


def classification(seed=0, m=400, n=10):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    w = rng.standard_normal(n)
    y = np.where(A @ w + 0.5 + rng.standard_normal(m) > 0, 1.0, 0.0)
    return A, y


def logistic_value(A, y01, w, c=0.0):
    margin = (2 * y01 - 1) * (A @ w + c)
    return float(np.logaddexp(0, -margin).sum())


def huber_value(A, b, w, delta, c=0.0):
    r = A @ w + c - b
    return float(np.where(np.abs(r) <= delta, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta)).sum())


def l1_reference(smooth, n, lam, free=0):
    """argmin smooth(x) + lam ||x[:n - free]||_1 by L-BFGS-B on x = p - q (p, q >= 0); ``smooth`` -> (f, g)."""
    penalized = n - free

    def objective(v):
        p, q, c = v[:penalized], v[penalized:2 * penalized], v[2 * penalized:]
        x = np.concatenate([p - q, c])
        f, g = smooth(x)
        return f + lam * float(p.sum() + q.sum()), np.concatenate([g[:penalized] + lam, lam - g[:penalized],
                                                                 g[penalized:]])
    bounds = [(0, None)] * (2 * penalized) + [(None, None)] * free
    solution = scipy.optimize.minimize(objective, np.zeros(2 * penalized + free), jac=True, method="L-BFGS-B",
                                       bounds=bounds, options={"ftol": 0, "gtol": 1e-12, "maxiter": 100000,
                                                               "maxfun": 1000000})
    v = solution.x
    x = np.concatenate([v[:penalized] - v[penalized:2 * penalized], v[2 * penalized:]])
    return x, solution.fun


def l2_reference(smooth, n, lam):
    """min smooth(x) + (lam/2) ||x||^2 by L-BFGS-B; ``smooth`` -> (f, g)."""
    def objective(w):
        f, g = smooth(w)
        return f + 0.5 * lam * w @ w, g + lam * w
    return scipy.optimize.minimize(objective, np.zeros(n), jac=True, method="L-BFGS-B",
                                   options={"gtol": 1e-12, "ftol": 0}).fun


def smooth_squared(A, b):
    return lambda x: (0.5 * float(np.sum((A @ x - b) ** 2)), A.T @ (A @ x - b))


def smooth_logistic(A, y01, intercept=False):
    signs = 2 * y01 - 1

    def f(x):
        w, c = (x[:-1], x[-1]) if intercept else (x, 0.0)
        margin = signs * (A @ w + c)
        weight = -signs * 0.5 * (1 + np.tanh(-0.5 * margin))
        g = A.T @ weight
        return float(np.logaddexp(0, -margin).sum()), np.append(g, weight.sum()) if intercept else g
    return f


def smooth_huber(A, b, delta):
    def f(x):
        r = A @ x - b
        return huber_value(A, b, x, delta), A.T @ np.clip(r, -delta, delta)
    return f


def shard(comm, A, b, layout="uneven"):
    start, stop = shard_bounds(A.shape[0], comm, layout)
    return A[start:stop], b[start:stop]


def close(value, reference, rtol=1e-6):
    assert abs(value - reference) <= rtol * abs(reference), (value, reference)


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["even", "empty"])
def test_squared_elastic_net_matches_sklearn(comm, layout):
    A, b = regression(1)
    m, lam, ratio = A.shape[0], 20.0, 0.3
    result = solve(*shard(comm, A, b, layout), "squared", "elastic_net", lam, comm, l1_ratio=ratio, **TIGHT)
    model = ElasticNet(alpha=lam / m, l1_ratio=ratio, fit_intercept=False, tol=1e-14, max_iter=100000).fit(A, b)
    penalty = penalties.ElasticNet(lam, ratio)
    reference = 0.5 * np.sum((A @ model.coef_ - b) ** 2) + penalty.value(model.coef_)
    close(result.objective, reference)


@pytest.mark.mpi
def test_squared_l2_matches_closed_form_ridge(comm):
    A, b = regression(2)
    lam = 3.0
    result = solve(*shard(comm, A, b), "squared", "l2", lam, comm, **TIGHT)
    x = np.linalg.solve(A.T @ A + lam * np.eye(A.shape[1]), A.T @ b)
    assert np.allclose(result.x, x, atol=1e-7)


@pytest.mark.mpi
def test_squared_nonnegative_matches_nnls(comm):
    A, b = regression(3)
    result = solve(*shard(comm, A, b), "squared", "nonnegative", None, comm, **TIGHT)
    x, _ = scipy.optimize.nnls(A, b)
    assert np.all(result.x >= 0)
    close(0.5 * np.sum((A @ result.x - b) ** 2), 0.5 * np.sum((A @ x - b) ** 2))


@pytest.mark.mpi
def test_squared_box_matches_lsq_linear(comm):
    A, b = regression(4)
    result = solve(*shard(comm, A, b), "squared", "box", None, comm, lower=-0.2, upper=0.5, **TIGHT)
    reference = scipy.optimize.lsq_linear(A, b, bounds=(-0.2, 0.5), tol=1e-14, lsmr_tol="auto")
    assert result.x.min() >= -0.2 - 1e-12 and result.x.max() <= 0.5 + 1e-12
    close(0.5 * np.sum((A @ result.x - b) ** 2), 0.5 * np.sum((A @ reference.x - b) ** 2))


@pytest.mark.mpi
def test_group_lasso_matches_proximal_gradient_reference(comm):
    A, b = regression(5, n=12)
    groups = np.repeat(np.arange(4), 3)
    lam = 15.0
    result = solve(*shard(comm, A, b), "squared", "group_lasso", lam, comm, groups=groups, **TIGHT)
    penalty = penalties.GroupLasso(lam, groups)
    step = 1.0 / np.linalg.norm(A, 2) ** 2
    x = y = np.zeros(A.shape[1])
    t = 1.0
    for _ in range(20000):  # FISTA, an independent reference
        x_next = penalty.prox(y - step * A.T @ (A @ y - b), step)
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        y = x_next + (t - 1) / t_next * (x_next - x)
        x, t = x_next, t_next
    reference = 0.5 * np.sum((A @ x - b) ** 2) + penalty.value(x)
    close(result.objective, reference)
    zero_groups = [g for g in range(4) if np.all(x[groups == g] == 0)]
    assert all(np.all(np.abs(result.x[groups == g]) < 1e-8) for g in zero_groups)


@pytest.mark.mpi
@pytest.mark.parametrize("x_solver", ["lbfgs", "newton"])
def test_logistic_l1_matches_reference(comm, x_solver):
    A, y = classification(6)
    lam = 4.0
    result = solve(*shard(comm, A, y), "logistic", "l1", lam, comm, x_solver=x_solver, **TIGHT)
    _, reference = l1_reference(smooth_logistic(A, y), A.shape[1], lam)
    close(result.objective, reference)
    close(logistic_value(A, y, result.x) + lam * np.abs(result.x).sum(), reference)


@pytest.mark.mpi
def test_logistic_l2_matches_reference(comm):
    A, y = classification(7)
    lam = 2.0
    result = solve(*shard(comm, A, y), "logistic", "l2", lam, comm, **TIGHT)
    close(result.objective, l2_reference(smooth_logistic(A, y), A.shape[1], lam))


@pytest.mark.mpi
def test_logistic_accepts_minus_one_one_labels(comm):
    A, y = classification(8)
    signed = 2 * y - 1
    zero_one = solve(*shard(comm, A, y), "logistic", "l1", 3.0, comm, **TIGHT)
    minus_one = solve(*shard(comm, A, signed), "logistic", "l1", 3.0, comm, **TIGHT)
    assert np.allclose(zero_one.x, minus_one.x, atol=1e-9)


@pytest.mark.mpi
@pytest.mark.parametrize("penalty", ["l1", "l2"])
def test_huber_matches_reference(comm, penalty):
    A, b = regression(9, outliers=True)
    lam, delta = 5.0, 1.0
    result = solve(*shard(comm, A, b), "huber", penalty, lam, comm, delta=delta, **TIGHT)
    if penalty == "l1":
        _, reference = l1_reference(smooth_huber(A, b, delta), A.shape[1], lam)
    else:
        reference = l2_reference(smooth_huber(A, b, delta), A.shape[1], lam)
    close(result.objective, reference)


@pytest.mark.mpi
def test_squared_intercept_matches_sklearn_lasso(comm):
    A, b = regression(10)
    m, lam = A.shape[0], 25.0
    result = solve(*shard(comm, A, b), "squared", "l1", lam, comm, intercept=True, **TIGHT)
    model = Lasso(alpha=lam / m, fit_intercept=True, tol=1e-14, max_iter=100000).fit(A, b)
    assert result.x[-1] == pytest.approx(model.intercept_, abs=1e-6)
    assert np.allclose(result.x[:-1], model.coef_, atol=1e-6)
    reference = 0.5 * np.sum((A @ model.coef_ + model.intercept_ - b) ** 2) + lam * np.abs(model.coef_).sum()
    close(result.objective, reference)


@pytest.mark.mpi
def test_logistic_intercept_is_not_penalized(comm):
    A, y = classification(11)
    lam = 6.0
    result = solve(*shard(comm, A, y), "logistic", "l1", lam, comm, intercept=True, **TIGHT)
    _, reference = l1_reference(smooth_logistic(A, y, intercept=True), A.shape[1] + 1, lam, free=1)
    close(result.objective, reference)
    best = np.log(y.mean() / (1 - y.mean()))
    for working_set, accuracy in ((False, 1e-6), (None, 1e-4)):  # working sets: to the root of their 1e-10 gap
        at_max = solve(*shard(comm, A, y), "logistic", "l1", None, comm, intercept=True, lam_ratio=1.0,
                       working_set=working_set, **TIGHT)
        assert np.abs(at_max.x[:-1]).max() < 1e-8, "lambda_max with an intercept zeroes every coefficient"
        assert at_max.x[-1] == pytest.approx(best, abs=accuracy)


@pytest.mark.mpi
@pytest.mark.parametrize("form", ["csr", "csc"])
def test_sparse_and_dense_give_the_same_answer(comm, form, monkeypatch):
    A, b = regression(12, m=200, n=30)
    A[np.abs(A) < 0.8] = 0.0
    A_local, b_local = shard(comm, A, b)
    sparse = getattr(scipy.sparse, f"{form}_matrix")(A_local)
    dense_result = solve(A_local, b_local, "squared", "l1", 5.0, comm, **TIGHT)
    sparse_result = solve(sparse, b_local, "squared", "l1", 5.0, comm, **TIGHT)
    assert np.allclose(dense_result.x, sparse_result.x, atol=1e-8)
    import mpiopt.admm.losses.squared as squared
    monkeypatch.setattr(squared, "GRAM_LIMIT", 10)  # force the conjugate-gradient x-step
    cg_result = solve(sparse, b_local, "squared", "l1", 5.0, comm, **TIGHT)
    assert cg_result.info["settings"] and np.allclose(cg_result.x, dense_result.x, atol=1e-6)
    logistic_dense = solve(A_local, (b_local > 0).astype(float), "logistic", "l1", 2.0, comm, **TIGHT)
    logistic_sparse = solve(sparse, (b_local > 0).astype(float), "logistic", "l1", 2.0, comm, **TIGHT)
    assert np.allclose(logistic_dense.x, logistic_sparse.x, atol=1e-7)


@pytest.mark.mpi
def test_adaptive_rho_recovers_from_a_bad_start(comm):
    A, b = regression(13, m=600, n=20)
    A_local, b_local = shard(comm, A, b)
    settings = dict(eps_abs=1e-8, eps_rel=1e-8, max_iter=20000, anderson=0, working_set=False)
    best = min(solve(A_local, b_local, "squared", "l1", 10.0, comm, rho=rho, adaptive_rho="none",
                     **settings).iterations for rho in (1.0, 10.0, 100.0, 1000.0))
    adaptive = solve(A_local, b_local, "squared", "l1", 10.0, comm, rho=0.01 * 300, **settings)
    fixed_small = solve(A_local, b_local, "squared", "l1", 10.0, comm, rho=0.01 * 300, adaptive_rho="none",
                        **settings)
    assert adaptive.status == "converged"
    assert adaptive.info["rho_changes"] >= 1
    assert adaptive.iterations < fixed_small.iterations
    assert adaptive.iterations <= 5 * best
    balanced = solve(A_local, b_local, "squared", "l1", 10.0, comm, rho=3.0, adaptive_rho="balance", **settings)
    assert abs(balanced.objective - adaptive.objective) <= 1e-7 * adaptive.objective


@pytest.mark.mpi
def test_anderson_acceleration_cuts_iterations_and_keeps_the_answer(comm):
    rng = np.random.default_rng(18)
    shared = rng.standard_normal((400, 1))
    A = np.sqrt(0.1) * rng.standard_normal((400, 30)) + np.sqrt(0.9) * shared  # strongly correlated columns
    b = A @ rng.standard_normal(30) + 0.1 * rng.standard_normal(400)
    A_local, b_local = shard(comm, A, b)
    plain = solve(A_local, b_local, "squared", "l1", 5.0, comm, anderson=0, **TIGHT)
    accelerated = solve(A_local, b_local, "squared", "l1", 5.0, comm, anderson=5, **TIGHT)
    assert accelerated.iterations <= 0.75 * plain.iterations
    close(accelerated.objective, plain.objective, rtol=1e-9)
    assert np.count_nonzero(accelerated.x) == np.count_nonzero(plain.x), "the answer is a prox output"


@pytest.mark.mpi
def test_regularization_path_matches_sklearn_lasso_path(comm):
    from sklearn.linear_model import lasso_path
    A, b = regression(14, m=300, n=15)
    A_local, b_local = shard(comm, A, b)
    path = regularization_path(A_local, b_local, "squared", "l1", comm, n_lams=8, lam_min_ratio=1e-2, **TIGHT)
    m = A.shape[0]
    alphas, coefs, _ = lasso_path(A, b, alphas=path.lams / m, tol=1e-14, max_iter=100000)
    assert np.allclose(path.coefs, coefs.T, atol=1e-6)
    assert path.lams[0] == pytest.approx(np.abs(A.T @ b).max())
    assert np.all(np.abs(path.coefs[0]) < 1e-7), "x = 0 at lambda_max, up to the solver tolerance"
    assert path.iterations[1:].mean() <= path.results[1].iterations * 2


@pytest.mark.mpi
def test_checkpoint_resume_is_bitwise_identical(comm, tmp_path_factory):
    A, y = classification(15)
    A_local, y_local = shard(comm, A, y)
    folder = comm.bcast(str(tmp_path_factory.mktemp("checkpoint")) if comm.rank == 0 else None)
    path = f"{folder}/state.npz"
    settings = dict(eps_abs=1e-9, eps_rel=1e-9, max_iter=5000, working_set=False)  # the full solver's checkpoint
    whole = solve(A_local, y_local, "logistic", "l1", 3.0, comm, **settings)
    first = solve(A_local, y_local, "logistic", "l1", 3.0, comm, checkpoint=path, checkpoint_every=7,
                  **dict(settings, max_iter=20))
    assert first.status == "max_iterations"
    resumed = solve(A_local, y_local, "logistic", "l1", 3.0, comm, checkpoint=path, checkpoint_every=7, **settings)
    assert resumed.info["resumed_at"] == 20
    assert resumed.iterations == whole.iterations
    assert np.array_equal(resumed.x, whole.x)
    assert resumed.history["r_norm"] == whole.history["r_norm"]
    again = solve(A_local, y_local, "logistic", "l1", 3.0, comm, checkpoint=path, **settings)
    assert again.info["resumed_at"] == whole.iterations, "resumed at its last iteration: nothing left to do"
    assert np.array_equal(again.x, whole.x) and again.objective == whole.objective
    capped = solve(A_local, y_local, "logistic", "l1", 3.0, comm, checkpoint=path, **dict(settings, max_iter=20))
    assert capped.iterations == whole.iterations and np.array_equal(capped.x, whole.x)
    with np.load(path, allow_pickle=False) as stored:
        assert "z" in stored.files


@pytest.mark.mpi
def test_checkpoint_of_another_problem_is_refused(comm, tmp_path_factory):
    A, b = regression(16)
    A_local, b_local = shard(comm, A, b)
    folder = comm.bcast(str(tmp_path_factory.mktemp("refuse")) if comm.rank == 0 else None)
    path = f"{folder}/state.npz"
    solve(A_local, b_local, "squared", "l1", 5.0, comm, checkpoint=path, checkpoint_every=2, max_iter=4)
    with pytest.raises(CollectiveError, match="belongs to another problem"):
        solve(A_local, b_local, "squared", "l1", 6.0, comm, checkpoint=path, max_iter=4)
    with pytest.raises(CollectiveError, match="belongs to another problem"):
        solve(A_local, b_local + 1.0, "squared", "l1", 5.0, comm, checkpoint=path, max_iter=4)
    if comm.size > 1 and comm.rank == 0:  # the whole problem on one rank, against a checkpoint of several
        with pytest.raises(CollectiveError, match=f"written by {comm.size} ranks; this run has 1"):
            solve(A, b, "squared", "l1", 5.0, MPI.COMM_SELF, checkpoint=path, max_iter=4)
    comm.Barrier()


@pytest.mark.mpi
def test_bad_solver_arguments_raise_everywhere(comm):
    A, b = regression(17)
    A_local, b_local = shard(comm, A, b)
    with pytest.raises(CollectiveError, match="labels must be in"):
        solve(A_local, b_local, "logistic", "l1", 1.0, comm)
    with pytest.raises(CollectiveError, match="loss must be one of squared, logistic, huber"):
        solve(A_local, b_local, "hinge", "l1", 1.0, comm)
    with pytest.raises(CollectiveError, match="penalty must be one of"):
        solve(A_local, b_local, "squared", "l0", 1.0, comm)
    with pytest.raises(CollectiveError, match="l1_ratio must be in"):
        solve(A_local, b_local, "squared", "elastic_net", 1.0, comm, l1_ratio=0.0)
    with pytest.raises(CollectiveError, match="groups must give a group label"):
        solve(A_local, b_local, "squared", "group_lasso", 1.0, comm, groups=[0, 1])
    with pytest.raises(CollectiveError, match="lam_ratio needs penalty l1 or elastic_net"):
        solve(A_local, b_local, "squared", "group_lasso", None, comm, lam_ratio=0.5, groups=[0] * A.shape[1])
    with pytest.raises(CollectiveError, match="adaptive_rho must be one of"):
        solve(A_local, b_local, "squared", "l1", 1.0, comm, adaptive_rho="sometimes")


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["uneven", "empty"])
def test_kkt_residual_matches_an_independent_computation(comm, layout):
    A, b = regression(21)
    A_local, b_local = shard(comm, A, b, layout)
    lam = 0.3 * np.abs(A.T @ b).max()
    for settings in (dict(max_iter=3), dict(eps_abs=1e-10, eps_rel=1e-10)):
        result = solve(A_local, b_local, "squared", "l1", lam, comm, **settings)
        x = result.x
        step = x - A.T @ (A @ x - b)
        expected = np.abs(x - np.sign(step) * np.maximum(np.abs(step) - lam, 0.0)).max()
        assert result.info["kkt_residual"] == pytest.approx(expected, rel=1e-8, abs=1e-12)
        assert result.info["nonzeros"] == np.count_nonzero(x)
    assert result.info["kkt_residual"] < 1e-6
    A, y = classification(22)
    A_local, y_local = shard(comm, A, y, layout)
    fit = solve(A_local, y_local, "logistic", "l2", 2.0, comm, intercept=True, eps_abs=1e-10, eps_rel=1e-10)
    _, gradient = smooth_logistic(A, y, intercept=True)(fit.x)
    step = fit.x - gradient
    prox = np.append(step[:-1] / (1 + 2.0), step[-1])  # the ridge shrinkage, the intercept left free
    assert fit.info["kkt_residual"] == pytest.approx(np.abs(fit.x - prox).max(), rel=1e-6, abs=1e-12)
    assert fit.info["kkt_residual"] < 1e-6
