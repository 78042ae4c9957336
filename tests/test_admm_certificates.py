"""Certificates as a capability of the pieces: the Huber loss and the group lasso get duality gaps,
gap-safe screening and working sets through their own dual methods, with no case of theirs in gap.py.

References written here, not taken from mpiopt: the Fenchel dual of each pair from its definition (the
conjugates of the Huber loss and of the group norm, the feasibility of the dual point checked), and the
optimal objective P* of each problem from an accelerated proximal-gradient loop of this file's own
(FISTA with restarts, run to its fixed point), against which the gap must be a true upper bound.
"""
import functools
import math

import numpy as np
import pytest
from mpi4py import MPI

from conftest import shard_bounds
from mpiopt.admm import solve
from mpiopt.admm.gap import certificate_of, dual_point, screen, column_norms
from mpiopt.admm.penalties import L1, ElasticNet, GroupLasso
from mpiopt.admm.solver import Problem

DELTA = 0.7
GROUPS = np.repeat(np.arange(6), 2)  # 12 columns in 6 groups of 2
CASES = {  # name: (loss, penalty name, its options, the loss's options)
    "huber_l1": ("huber", "l1", {}, {"delta": DELTA}),
    "huber_elastic_net": ("huber", "elastic_net", {"l1_ratio": 0.6}, {"delta": DELTA}),
    "squared_group": ("squared", "group_lasso", {"groups": GROUPS}, {}),
    "logistic_group": ("logistic", "group_lasso", {"groups": GROUPS}, {}),
    "huber_group": ("huber", "group_lasso", {"groups": GROUPS}, {"delta": DELTA}),
}
LAM = {"huber": 4.0, "squared": 16.0, "logistic": 2.0}


def data(loss, m=60, n=12, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    truth = np.where(rng.random(n) < 0.5, rng.standard_normal(n), 0.0)
    b = A @ truth + 0.3 * rng.standard_normal(m) + 0.5
    b[::7] += 6.0 * rng.standard_normal(len(b[::7]))  # outliers: the Huber loss's linear zone is used
    if loss == "logistic":
        b = np.where(b > 0.5, 1.0, -1.0)
    return A, b


def penalty_of(name, options, lam):
    if name == "l1":
        return L1(lam)
    if name == "elastic_net":
        return ElasticNet(lam, options["l1_ratio"])
    return GroupLasso(lam, options["groups"])


# --- the test's own definitions ---------------------------------------------------------------------------

def phi(loss, margin, b):
    if loss == "squared":
        return 0.5 * float(np.sum((margin - b) ** 2))
    if loss == "logistic":
        return float(np.logaddexp(0.0, -b * margin).sum())
    r = np.abs(margin - b)
    return float(np.where(r <= DELTA, 0.5 * r * r, DELTA * (r - 0.5 * DELTA)).sum())


def phi_grad(loss, margin, b):
    if loss == "squared":
        return margin - b
    if loss == "logistic":
        return -b / (1.0 + np.exp(b * margin))
    return np.clip(margin - b, -DELTA, DELTA)


def penalty_value(name, options, lam, w):
    if name == "l1":
        return lam * np.abs(w).sum()
    if name == "elastic_net":
        r = options["l1_ratio"]
        return lam * (r * np.abs(w).sum() + 0.5 * (1 - r) * w @ w)
    return lam * sum(math.sqrt(2) * np.linalg.norm(w[GROUPS == g]) for g in range(6))


def penalty_prox(name, options, lam, v, step):
    if name == "l1":
        return np.sign(v) * np.maximum(np.abs(v) - lam * step, 0.0)
    if name == "elastic_net":
        r = options["l1_ratio"]
        return np.sign(v) * np.maximum(np.abs(v) - lam * r * step, 0.0) / (1 + lam * (1 - r) * step)
    out = v.copy()
    for g in range(6):
        block = v[GROUPS == g]
        norm, t = np.linalg.norm(block), lam * math.sqrt(2) * step
        out[GROUPS == g] = 0.0 if norm <= t else block * (1 - t / norm)
    return out


def objective(loss, name, options, lam, A, b, w, intercept):
    margin = A @ w[:-1] + w[-1] if intercept else A @ w
    return phi(loss, margin, b) + penalty_value(name, options, lam, w[:-1] if intercept else w)


def reference_optimum(loss, name, options, lam, A, b, intercept, iterations=5000):
    """P* and w* by FISTA with gradient restarts on the test's own definitions."""
    A_aug = np.hstack([A, np.ones((A.shape[0], 1))]) if intercept else A
    curvature = 0.25 if loss == "logistic" else 1.0
    step = 1.0 / (curvature * np.linalg.norm(A_aug, 2) ** 2)
    w = y = np.zeros(A_aug.shape[1])
    t = 1.0
    for _ in range(iterations):
        v = y - step * (A_aug.T @ phi_grad(loss, A_aug @ y, b))
        new = v.copy()
        if intercept:
            new[:-1] = penalty_prox(name, options, lam, v[:-1], step)
        else:
            new = penalty_prox(name, options, lam, v, step)
        if (y - new) @ (new - w) > 0:  # restart
            t = 1.0
        t_next = 0.5 * (1 + math.sqrt(1 + 4 * t * t))
        y = new + (t - 1) / t_next * (new - w)
        w, t = new, t_next
    return objective(loss, name, options, lam, A, b, w, intercept), w


@functools.lru_cache(maxsize=None)
def optimum_of(case, intercept):
    """(P*, w*) of a case on the whole data set (the same for every layout and rank count)."""
    loss, name, options, _ = CASES[case]
    A, b = data(loss)
    targets = np.where(b > 0, 1.0, -1.0) if loss == "logistic" else b
    return reference_optimum(loss, name, options, LAM[loss], A, targets, intercept)


def reference_dual(loss, name, options, lam, A, b, theta, intercept):
    """D(theta) = -sum_j phi*(-theta_j) - g*(A^T theta) from the definitions; -inf outside the domain."""
    v = A.T @ theta
    if intercept and abs(theta.sum()) > 1e-9 * max(1.0, np.abs(theta).sum()):
        return -math.inf
    if name == "l1":
        conjugate = 0.0 if np.abs(v).max() <= lam * (1 + 1e-12) else math.inf
    elif name == "elastic_net":
        r = options["l1_ratio"]
        conjugate = float(np.sum(np.maximum(np.abs(v) - lam * r, 0) ** 2)) / (2 * lam * (1 - r))
    else:  # the group norm's conjugate: the indicator of max_g ||v_g|| / w_g <= lam
        levels = [np.linalg.norm(v[GROUPS == g]) / math.sqrt(2) for g in range(6)]
        conjugate = 0.0 if max(levels) <= lam * (1 + 1e-12) else math.inf
    if loss == "logistic":
        p = b * theta
        if np.any(p < -1e-15) or np.any(p > 1 + 1e-15):
            return -math.inf
        p = np.clip(p, 1e-300, 1.0)
        q = np.clip(1 - p, 1e-300, 1.0)
        return float(-np.sum(p * np.log(p) + q * np.log(q))) - conjugate
    if loss == "huber" and np.abs(theta).max() > DELTA * (1 + 1e-12):
        return -math.inf  # phi*(u) = u b + u^2 / 2 on |u| <= delta, +inf beyond
    return float(theta @ b - 0.5 * theta @ theta) - conjugate


def gathered(comm, theta):
    return np.concatenate(comm.allgather(np.zeros(0) if theta is None else np.asarray(theta)))


def setup_case(case, intercept, comm=MPI.COMM_SELF, layout="even", seed=0):
    loss, name, options, loss_options = CASES[case]
    A, b = data(loss, seed=seed)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    problem = Problem(A[start:stop], b[start:stop], loss, comm, intercept=intercept, loss_options=loss_options)
    penalty = penalty_of(name, options, LAM[loss])
    engine_penalty = penalty.leaving_free(1) if intercept else penalty
    targets = np.where(b > 0, 1.0, -1.0) if loss == "logistic" else b
    return loss, name, options, loss_options, A, targets, problem, penalty, engine_penalty


# --- tests -------------------------------------------------------------------------------------------------

@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["even", "uneven", "empty"])
@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_the_dual_is_the_definitions_and_the_gap_bounds_the_suboptimality(comm, case, intercept, layout):
    loss, name, options, _, A, b, problem, penalty, engine_penalty = setup_case(case, intercept, comm, layout)
    lam = LAM[loss]
    assert certificate_of(problem.shard, engine_penalty) is not None
    best, _ = optimum_of(case, intercept)
    rng = np.random.default_rng(1)
    for scale in (0.0, 0.05, 0.3, 1.0):
        z = scale * rng.standard_normal(problem.shard.n)
        gap, theta = dual_point(problem.shard, engine_penalty, z, comm)
        theta = gathered(comm, theta)
        reference = reference_dual(loss, name, options, lam, A, b, theta, intercept)
        assert math.isfinite(reference), "the dual point is not feasible"
        assert gap.dual == pytest.approx(reference, rel=1e-10, abs=1e-10)
        assert gap.primal == pytest.approx(objective(loss, name, options, lam, A, b, z, intercept), rel=1e-12)
        assert gap.dual <= best * (1 + 1e-12) + 1e-12  # weak duality: D(theta) <= P*
        assert gap.gap >= (gap.primal - best) * (1 - 1e-9) - 1e-12  # a true upper bound on P(z) - P*


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["even", "uneven", "empty"])
@pytest.mark.parametrize("working_set", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_the_solvers_reach_the_reference_optimum_with_a_certificate(comm, case, working_set, layout):
    loss, name, options, loss_options, A, b, _, _, _ = setup_case(case, True, comm, layout)
    lam = LAM[loss]
    best, _ = optimum_of(case, True)
    start, stop = shard_bounds(A.shape[0], comm, layout)
    result = solve(A[start:stop], b[start:stop], loss, name, lam=lam, comm=comm, intercept=True,
                   working_set=working_set, gap_tol=1e-9, eps_abs=1e-10, eps_rel=1e-10, max_iter=20000,
                   **options, **loss_options)
    assert result.gap is not None and result.relative_gap <= 1e-8
    assert result.objective - best <= result.gap * (1 + 1e-6) + 1e-9 * abs(best)  # within the certificate
    assert result.objective >= best - 1e-9 * abs(best)
    assert (result.info.get("working_set", False) is True) == working_set


@pytest.mark.parametrize("case", list(CASES))
def test_screening_never_removes_a_coefficient_nonzero_at_the_optimum(case):
    loss, name, options, _, A, b, problem, penalty, engine_penalty = setup_case(case, False)
    _, optimum = optimum_of(case, False)
    norms = column_norms(problem.shard, MPI.COMM_SELF)
    assert norms == pytest.approx(np.linalg.norm(A, axis=0), rel=1e-12)
    screened_somewhere = False
    for t in (0.0, 0.5, 0.9, 0.99, 1.0):
        kept, _ = screen(problem.shard, engine_penalty, t * optimum, MPI.COMM_SELF, norms)
        assert kept[np.abs(optimum) > 1e-8].all()
        if name == "group_lasso":  # a group is kept or screened as a whole
            assert all(len(set(kept[GROUPS == g])) == 1 for g in range(6))
        screened_somewhere |= not kept.all()
    assert screened_somewhere, "the test never screens: it could not fail"


def test_a_group_lasso_with_unpenalized_columns_has_no_certificate():
    A, b = data("squared")
    problem = Problem(A, b, "squared", MPI.COMM_SELF)
    labels = GROUPS.copy()
    labels[0] = -1
    assert certificate_of(problem.shard, GroupLasso(1.0, labels)) is None
    assert certificate_of(problem.shard, GroupLasso(1.0, GROUPS)) is not None
    result = solve(A, b, "squared", "group_lasso", lam=1.0, groups=labels, gap_tol=1e-6, max_iter=200)
    assert result.gap is None and "gap" not in result.history


def test_a_restricted_group_lasso_keeps_whole_groups():
    penalty = GroupLasso(2.0, GROUPS)
    assert penalty.whole(np.array([3, 8])).tolist() == [2, 3, 8, 9]
    restricted = penalty.on_columns(np.array([2, 3, 8, 9]))
    assert restricted.weights == [math.sqrt(2), math.sqrt(2)]
    w = np.array([1.0, -2.0, 0.5, 0.25])
    assert restricted.value(w) == pytest.approx(2.0 * math.sqrt(2) * (math.sqrt(5) + math.sqrt(0.3125)))
    with pytest.raises(ValueError, match="whole groups"):
        penalty.on_columns(np.array([2, 8, 9]))


def test_a_users_penalty_that_bounds_its_dual_gets_the_certificate_and_a_subclass_must_say_so_again():
    class ScaledL1(L1):  # a user's penalty: lam * scale * ||z||_1, the lasso's function: it says so again
        capabilities = L1.capabilities

        def __init__(self, lam, scale):
            super().__init__(lam * scale)

    class CappedL1(L1):  # a prox of its own and no declaration: no certificate
        def prox(self, v, step):
            return np.clip(L1.prox(self, v, step), -1.0, 1.0)

    class Undeclared(L1):  # the lasso's function, but undeclared: nothing beyond prox and value
        pass

    A, b = data("huber")
    problem = Problem(A, b, "huber", MPI.COMM_SELF, loss_options={"delta": DELTA})
    assert certificate_of(problem.shard, CappedL1(1.0)) is None
    assert certificate_of(problem.shard, Undeclared(1.0)) is None
    z = np.random.default_rng(3).standard_normal(12)
    mine, _ = dual_point(problem.shard, ScaledL1(2.0, 1.5), z, MPI.COMM_SELF)
    builtin, _ = dual_point(problem.shard, L1(3.0), z, MPI.COMM_SELF)
    assert (mine.primal, mine.dual, mine.scale) == (builtin.primal, builtin.dual, builtin.scale)
    result = solve(A, b, "huber", ScaledL1(2.0, 1.5), delta=DELTA, gap_tol=1e-8, eps_abs=1e-10, eps_rel=1e-10,
                   working_set=True)
    assert result.relative_gap <= 1e-8 and result.info["working_set"] is True


def test_working_sets_are_the_default_where_measured_faster():
    """On by default for the group lasso (and L1 / elastic net) with the squared and logistic losses; for the
    Huber loss only when asked (slower than the full solver at tight tolerances: docs/admm.md)."""
    A, b = data("huber")
    groups = dict(groups=GROUPS)
    assert solve(A, b, "squared", "group_lasso", lam=16.0, **groups).info.get("working_set") is True
    assert solve(A, b, "huber", "l1", lam=4.0, delta=DELTA).info.get("working_set") is not True
    assert solve(A, b, "huber", "l1", lam=4.0, delta=DELTA, working_set=True).info.get("working_set") is True


@pytest.mark.parametrize("loss", ["squared", "logistic", "huber"])
def test_an_elastic_net_with_l1_ratio_one_is_certified_as_the_lasso(loss):
    """l1_ratio = 1 leaves no L2 part: the dual point must be scaled into ||A^T theta||_inf <= lam as L1's is
    (a finite gap, the lasso's), not taken as it is (an infinite conjugate)."""
    A, b = data(loss)
    problem = Problem(A, b, loss, MPI.COMM_SELF, loss_options={"delta": DELTA} if loss == "huber" else None)
    z = np.random.default_rng(4).standard_normal(12)
    net, _ = dual_point(problem.shard, ElasticNet(3.0, 1.0), z, MPI.COMM_SELF)
    lasso, _ = dual_point(problem.shard, L1(3.0), z, MPI.COMM_SELF)
    assert net.scale < 1.0 and math.isfinite(net.gap)
    assert (net.primal, net.dual, net.gap, net.scale) == (lasso.primal, lasso.dual, lasso.gap, lasso.scale)
