"""What a penalty provides beyond its prox is declared (``capabilities``), and the declarations do not lie.

Each built-in penalty's declared capabilities are checked against what it computes, with independent
references: a declared dual's conjugate against Fenchel-Young (equality at a prox pair, the inequality at
random points, so an out-of-domain scaling shows), declared dual levels against the prox's zeros, declared
coordinate parts and soft-thresholding against the closed forms.  A penalty that declares nothing, a user's
subclass included, gets none of them.
"""
import math

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.admm import solve
from mpiopt.admm.gap import certificate_of
from mpiopt.admm.penalties import (CAPABILITIES, DUAL, L1, PROX_NEWTON, SCREENING, SOFT_THRESHOLD, Penalty,
                                   capabilities_of)
from mpiopt.admm.solver import Problem
from mpiopt.core import registry

N = 8
GROUPS = np.array([0, 0, 1, 1, 1, 2, 3, 3])
SAMPLES = {  # a penalty of each built-in kind, from options every one of them takes
    "l1": [{"lam": 0.7}], "l2": [{"lam": 0.7}],
    "elastic_net": [{"lam": 0.7, "l1_ratio": 0.3}, {"lam": 0.7, "l1_ratio": 1.0}],
    "group_lasso": [{"lam": 0.7, "groups": GROUPS}], "box": [{"lower": -0.5, "upper": 1.0}],
    "nonnegative": [{}], "none": [{}],
}
METHOD_OF = {DUAL: "dual_scale", SCREENING: "dual_levels", PROX_NEWTON: "coordinate_parts",
             SOFT_THRESHOLD: "threshold"}


def builtins():
    """(name, penalty) for every sample of every built-in penalty."""
    return [(name, registry.lookup("penalty", name).from_options(options))
            for name, samples in SAMPLES.items() for options in samples]


def soft(v, kappa):
    return np.sign(v) * np.maximum(np.abs(v) - kappa, 0.0)


def test_the_samples_cover_every_builtin_penalty():
    assert set(SAMPLES) == set(registry.names("penalty"))


@pytest.mark.parametrize("name", list(SAMPLES))
def test_a_builtin_declares_known_capabilities_and_defines_what_it_declares(name):
    kind = registry.lookup("penalty", name)
    assert isinstance(kind.capabilities, frozenset) and kind.capabilities <= CAPABILITIES
    assert SCREENING not in kind.capabilities or DUAL in kind.capabilities, "screening needs the gap"
    for capability, method in METHOD_OF.items():
        defined = getattr(kind, method) is not getattr(Penalty, method)
        assert defined == (capability in kind.capabilities), (name, capability)


@pytest.mark.parametrize("name, penalty", builtins())
def test_a_declared_dual_gives_the_conjugate_fenchel_young_checks(name, penalty):
    if DUAL not in penalty.capabilities:
        assert not penalty.certifiable()
        return
    rng = np.random.default_rng(0)
    for _ in range(20):
        w = 3.0 * rng.standard_normal(N)
        z = penalty.prox(w, 1.0)  # w - z is a subgradient at z: g(z) + g*(w - z) = (w - z)^T z
        u = w - z
        assert penalty.dual_scale(u) == pytest.approx(1.0, abs=1e-12)
        assert penalty.conjugate(u) == pytest.approx(float(u @ z) - penalty.value(z), abs=1e-10)
    trials = [t * rng.standard_normal(N) for t in (0.1, 1.0, 10.0, 1e3) for _ in range(200)]
    trials += [t * np.eye(N)[k] * sign for t in (1e2, 1e4) for k in range(N) for sign in (1, -1)]
    for _ in range(20):
        v = 5.0 * rng.standard_normal(N)
        scale = penalty.dual_scale(v)
        assert 0.0 < scale <= 1.0
        u = scale * v
        conjugate = penalty.conjugate(u)
        assert math.isfinite(conjugate)
        for z in trials:  # g*(u) >= u^T z - g(z) everywhere: u in the domain, conjugate not too small
            assert float(u @ z) - penalty.value(z) <= conjugate + 1e-9 * (1 + np.abs(z).sum()), name
        if scale < 1.0:  # the largest such scale: a little more leaves the domain (along a column or group)
            beyond = (scale * (1 + 1e-6)) * v
            along = [1e6 * np.where(np.isin(np.arange(N), penalty.whole(np.array([k]))), beyond, 0.0)
                     for k in range(N)]
            assert max(float(beyond @ z) - penalty.value(z) for z in along) > penalty.conjugate(beyond) + 1e-3


@pytest.mark.parametrize("name, penalty", builtins())
def test_declared_dual_levels_are_the_prox_zeros_and_cover_the_columns(name, penalty):
    if SCREENING not in penalty.capabilities:
        return
    rng = np.random.default_rng(1)
    A = rng.standard_normal((30, N))
    norms = np.sqrt((A * A).sum(axis=0))
    for _ in range(50):
        w = 2.0 * rng.standard_normal(N)
        level, bound, spread = (np.broadcast_to(part, (N,)) for part in penalty.dual_levels(w, norms))
        zero = penalty.prox(w, 1.0) == 0.0  # 0 in the prox iff w in the subdifferential at 0
        assert np.array_equal(zero, level <= bound), name
    members = [np.flatnonzero(GROUPS == label) for label in np.unique(GROUPS)] if name == "group_lasso" \
        else [[k] for k in range(N)]
    for index in members:  # the sphere test needs spread >= ||A_g||_2 (||a_k|| for one column)
        assert np.all(spread[index] >= np.linalg.norm(A[:, index], 2) - 1e-12)


@pytest.mark.parametrize("name, penalty", builtins())
def test_declared_coordinate_parts_and_soft_thresholding_are_the_penalty(name, penalty):
    rng = np.random.default_rng(2)
    w, step = 2.0 * rng.standard_normal(N), 0.37
    parts = penalty.coordinate_parts()
    assert (parts is not None) == (PROX_NEWTON in penalty.capabilities)
    if parts is not None:
        l1, l2 = parts
        assert penalty.value(w) == pytest.approx(l1 * np.abs(w).sum() + 0.5 * l2 * float(w @ w), rel=1e-14)
        assert np.allclose(penalty.prox(w, step), soft(w, l1 * step) / (1 + l2 * step), rtol=1e-14, atol=0)
    fused = penalty.threshold(step)
    assert (fused is not None) == (SOFT_THRESHOLD in penalty.capabilities)
    if fused is not None:
        kappa, free = fused
        assert free == 0 and np.array_equal(penalty.prox(w, step), soft(w, kappa))
        kappa, free = penalty.leaving_free(1).threshold(step)
        assert free == 1 and np.array_equal(penalty.leaving_free(1).prox(w, step)[:-1], soft(w[:-1], kappa))


def test_a_subclass_that_does_not_declare_gets_nothing_beyond_prox_and_value():
    class Mine(L1):  # the lasso's function, but undeclared
        pass

    class Declared(L1):
        capabilities = L1.capabilities

    penalty = Mine(0.5)
    assert Mine.capabilities == frozenset() and capabilities_of(penalty.leaving_free(1)) == frozenset()
    assert penalty.threshold(0.1) is None and penalty.coordinate_parts() is None and not penalty.certifiable()
    assert Declared(0.5).threshold(0.1) == (0.05, 0) and Declared(0.5).certifiable()
    assert capabilities_of(object()) == frozenset()  # a duck-typed penalty declares nothing
    with pytest.raises(TypeError, match="unknown capabilities dual_gap"):
        type("Wrong", (Penalty,), {"capabilities": frozenset({"dual_gap"})})

    rng = np.random.default_rng(3)
    A = rng.standard_normal((60, 5))
    b = A @ np.array([1.0, 0.0, -2.0, 0.0, 0.5]) + 0.1 * rng.standard_normal(60)
    problem = Problem(A, b, "squared", MPI.COMM_SELF)
    assert certificate_of(problem.shard, penalty) is None
    assert certificate_of(problem.shard, Declared(0.5)) is not None
    mine = solve(A, b, "squared", Mine(2.0), comm=MPI.COMM_SELF, gap_tol=1e-8, screening=True, eps_abs=1e-12,
                 eps_rel=1e-12, max_iter=20000)
    declared = solve(A, b, "squared", Declared(2.0), comm=MPI.COMM_SELF, gap_tol=1e-8, eps_abs=1e-12,
                     eps_rel=1e-12)
    assert mine.gap is None and mine.info.get("working_set") is not True and "screened" not in mine.info
    assert declared.info.get("working_set") is True and declared.relative_gap <= 1e-8
    assert np.allclose(mine.x, declared.x, atol=1e-7)


def test_the_penalty_none_has_no_certificate_and_solves():
    rng = np.random.default_rng(4)
    A = rng.standard_normal((40, 4))
    b = A @ np.array([1.0, -1.0, 0.5, 2.0])
    result = solve(A, b, "squared", "none", None, MPI.COMM_SELF, eps_abs=1e-12, eps_rel=1e-12)
    assert result.gap is None and np.allclose(result.x, np.linalg.lstsq(A, b, rcond=None)[0], atol=1e-8)
