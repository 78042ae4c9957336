"""Soviet PAGE, Freya PAGE's synchronous baseline, against its rounds transcribed here.

The reference below is PAGE (Li et al. 2021) with each phase's work dealt out evenly, as the Freya PAGE
paper's baseline waits for every worker: worker i computes the j of its own block of [m] (the first m mod n
blocks one longer) or the differences l = i, i + n, ... of the S drawn at the phase's start, one after
another, and the phase ends once all are in.  An event loop of its own with exact (rational) times adds the
results in arrival order (ties by worker) and draws from the documented stream in the documented order
(after each step the coin, then a difference phase's S indices in one draw).
"""
import math
from fractions import Fraction

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.asyncsgd import async_sgd, get_problem, available_methods as methods
from mpiopt.asyncsgd.settings import AsyncSGDSettings
from mpiopt.asyncsgd.methods.soviet_page import shares, soviet_time
from mpiopt.core.random import random_stream

from test_asyncsgd_freya import ROWS, SEED, TAUS, page_parameters  # noqa: E402  (the Freya PAGE tests' problem and workers)

SELF = MPI.COMM_SELF


def transcribed_soviet(problem, taus, gamma, S, p, steps, seed):
    m, n = problem.n_samples, len(taus)
    rng = random_stream(seed, "asyncsgd-freya-page")
    h = [Fraction(tau) for tau in taus]
    x, y, g, t, full = problem.x0(), None, None, Fraction(0), True
    accepted, computed, ends = [0] * n, [0] * n, []
    for _ in range(steps):
        if full:
            size, extra = divmod(m, n)
            blocks, start = [], 0
            for i in range(n):
                blocks.append(list(range(start, start + size + (i < extra))))
                start += size + (i < extra)
            cost = h
        else:
            draws = [int(j) for j in rng.integers(m, size=S)]
            blocks = [draws[i::n] for i in range(n)]
            cost = [2 * v for v in h]
        events = sorted((t + (k + 1) * cost[w], w, j) for w in range(n) for k, j in enumerate(blocks[w]))
        total = np.zeros(problem.dim)
        for when, w, j in events:
            accepted[w] += 1
            computed[w] += 1 if full else 2
            total += problem.sample_grad(j, x) if full else problem.sample_grad(j, x) - problem.sample_grad(j, y)
        t = events[-1][0]
        ends.append(t)
        g = total / m if full else g + total / S
        y, x = x, x - gamma * g
        full = bool(rng.random() < p)
    return x, ends, accepted, computed


@pytest.mark.parametrize("batch, probability", [(None, None), (3, 0.5), (7, 0.2), (2, 1.0)])
def test_soviet_page_is_page_with_each_phase_dealt_out_evenly(batch, probability):
    problem = get_problem("least-squares", seed=SEED, **ROWS)
    S, p, gamma = page_parameters(problem, batch, probability)
    expected, ends, accepted, computed = transcribed_soviet(problem, TAUS, gamma, S, p, 12, SEED)
    result = async_sgd("least-squares", comm=SELF, problem_options=ROWS, seed=SEED, method="soviet-page",
                       batch=batch, probability=probability, tau=TAUS, n_workers=len(TAUS), epsilon=1e-6,
                       max_steps=12, stop_at_epsilon=False)
    np.testing.assert_array_equal(result.x, expected)
    assert result.steps == 12 and result.time == float(ends[-1])
    assert result.history["time"][1:] == [float(e) for e in ends]  # every step ends with its slowest share
    workers = result.info["workers"]
    assert workers["accepted"] == accepted and workers["discarded"] == [0] * len(TAUS)
    assert workers["computed"] == computed and result.gradients == sum(computed)
    parameters = result.info["parameters"]
    assert parameters["batch"] == S and parameters["probability"] == p and parameters["step_size"] == gamma


def test_more_workers_than_samples_leaves_the_rest_idle():
    result = async_sgd("least-squares", comm=SELF, problem_options={"rows": 3, "dim": 2}, method="soviet-page",
                       tau="sqrt", n_workers=6, batch=2, probability=0.5, max_steps=8, stop_at_epsilon=False)
    assert result.steps == 8 and result.info["workers"]["computed"][3:] == [0, 0, 0]
    assert list(shares(3, 6)) == [1, 1, 1, 0, 0, 0] and list(shares(7, 3)) == [3, 2, 2]


def test_the_predicted_time_waits_for_the_slowest_share():
    problem = get_problem("least-squares", seed=SEED, **ROWS)
    result = async_sgd("least-squares", comm=SELF, problem_options=ROWS, seed=SEED, method="soviet-page",
                       tau=TAUS, n_workers=len(TAUS), epsilon=1e-3, max_steps=1)
    S, p, gamma = (result.info["parameters"][k] for k in ("batch", "probability", "step_size"))
    K = math.ceil(2 * problem.Delta / (gamma * 1e-3))
    full = max(TAUS[i] * len(range(i, problem.n_samples, len(TAUS))) for i in range(len(TAUS)))
    difference = max(2 * TAUS[i] * len(range(i, S, len(TAUS))) for i in range(len(TAUS)))
    assert result.predicted["soviet-page"] == pytest.approx(full + K * (p * full + (1 - p) * difference), rel=1e-12)
    assert soviet_time(TAUS, problem.n_samples, S, p, K) == result.predicted["soviet-page"]
    freya = async_sgd("least-squares", comm=SELF, problem_options=ROWS, seed=SEED, method="freya-page",
                      tau=TAUS, n_workers=len(TAUS), epsilon=1e-3, max_steps=1)
    assert freya.predicted["freya-page"] < result.predicted["soviet-page"]  # the slow workers' shares cost


def test_freya_page_beats_soviet_page_with_heterogeneous_workers():
    common = dict(problem_options={"rows": 400, "dim": 10}, tau="sqrt", n_workers=10, max_time=30000,
                  epsilon=1e-4)
    freya = async_sgd("least-squares", comm=SELF, method="freya-page", **common)
    soviet = async_sgd("least-squares", comm=SELF, method="soviet-page", **common)
    assert freya.status == soviet.status == "converged"
    assert freya.time_to_epsilon < soviet.time_to_epsilon
    assert len(set(soviet.info["workers"]["accepted"])) == 1  # everyone did the same share


def test_soviet_page_needs_a_finite_sum():
    assert "soviet-page" not in methods(AsyncSGDSettings(), "quadratic")
    assert "soviet-page" in methods(AsyncSGDSettings(), "least-squares")

