"""Malenia SGD against its algorithm box, on heterogeneous data (worker i holds f_i).

The reference is the paper's step transcribed below and driven by an event loop of its own, with exact
(rational) times: every worker computes gradients of its f_i at x_k one after another, the server collects
until every B_i >= 1 and (1/n sum 1/B_i)^(-1) >= S/n, steps with the mean of the workers' means and restarts
them all.
"""
from fractions import Fraction

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.asyncsgd import async_sgd, get_problem
from mpiopt.asyncsgd.methods.malenia import malenia_batch, malenia_time
from mpiopt.core.comm import CollectiveError
from mpiopt.core.random import random_stream

SELF = MPI.COMM_SELF
TAUS = [1.0, 1.5, 2.25, 3.0, 5.0]
SEED = 3


def transcribed_run(steps, taus, problem, S, gamma):
    n = len(taus)
    noise = [random_stream(SEED, "asyncsgd-gradient", i) for i in range(n)]
    x, t, taus_exact, counts_total = problem.x0(), Fraction(0), [Fraction(tau) for tau in taus], np.zeros(n, int)
    for _ in range(steps):
        B, sums = [0] * n, [np.zeros(problem.dim) for _ in range(n)]
        while not (min(B) >= 1 and n / sum(1.0 / b for b in B) >= S / n):
            finish = [(t + (B[i] + 1) * taus_exact[i], i) for i in range(n)]
            when, i = min(finish)
            sums[i] += problem.worker_grad(i, x, noise[i])
            B[i] += 1
        t = when
        counts_total += B
        direction = np.zeros(problem.dim)
        for i in range(n):
            direction += sums[i] / B[i]
        x = x - gamma * (direction / n)
    return x, float(t), counts_total


@pytest.mark.parametrize("S", [5, 12, None])
def test_malenia_is_its_algorithm_box(S):
    options = {"dim": 6, "noise": 0.5, "workers": len(TAUS), "spread": 2.0}
    problem = get_problem("heterogeneous-quadratic", seed=SEED, **options)
    epsilon = 0.05
    batch = S or malenia_batch(problem.sigma2, epsilon, len(TAUS))
    expected, end, counts = transcribed_run(8, TAUS, problem, batch, 1 / (2 * problem.L))
    result = async_sgd("heterogeneous-quadratic", comm=SELF, problem_options=options, seed=SEED, method="malenia",
                       batch=S, tau=TAUS, n_workers=len(TAUS), epsilon=epsilon, max_steps=8, stop_at_epsilon=False)
    np.testing.assert_array_equal(result.x, expected)
    assert result.steps == 8 and result.time == end
    assert result.info["workers"]["accepted"] == counts.tolist()
    assert result.info["parameters"]["batch"] == batch
    L, Delta = problem.L, problem.Delta
    assert result.predicted["malenia"] == pytest.approx(
        L * Delta / epsilon * (max(TAUS) + np.mean(TAUS) * batch / len(TAUS)), rel=1e-12)
    assert malenia_time(TAUS, problem.sigma2, epsilon, L, Delta, batch) == result.predicted["malenia"]


def test_on_heterogeneous_data_malenia_converges_where_rennala_and_asgd_stall():
    options = {"dim": 20, "noise": 0.1, "workers": 8, "spread": 1.0}
    common = dict(problem_options=options, n_workers=8, tau="sqrt", seed=1, max_gradients=60000)
    malenia = async_sgd("heterogeneous-quadratic", comm=SELF, method="malenia", **common)
    assert malenia.status == "converged"
    for method in ("rennala", "asgd"):  # the fast workers' f_i pull them away from the minimizer of f
        stalled = async_sgd("heterogeneous-quadratic", comm=SELF, method=method, **common)
        assert stalled.status == "finished" and stalled.time_to_epsilon is None
    problem = get_problem("heterogeneous-quadratic", seed=1, **options)
    assert problem.zeta2 > 0 and problem.loss(problem.centre) == pytest.approx(problem.f_low, abs=1e-12)
    np.testing.assert_allclose(problem.grad(np.ones(20)),
                               np.mean([problem.worker_grad(i, np.ones(20), None) for i in range(8)], axis=0)
                               if problem.sigma2 == 0 else problem.eigenvalues * (1 - problem.centre))


def test_a_heterogeneous_problem_needs_one_worker_per_function():
    with pytest.raises(CollectiveError, match="has 8 functions f_i, one per worker, but the run has 5 workers"):
        async_sgd("heterogeneous-quadratic", comm=SELF, method="malenia", n_workers=5, max_steps=2)
