"""MindFlayer SGD against its round transcribed, its plan against brute force, and its point: heavy tails.

The reference loop draws the attempts' compute times from the simulator's stream of random times in start
order (every worker in turn, its B_i attempts one after another), gives up each attempt over its budget, sums
the gradients that finished, and steps with sum_i g_i / sum_i p_i B_i.
"""
import math

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.asyncsgd import async_sgd, get_problem, get_tau_model
from mpiopt.asyncsgd.methods.mindflayer import attempt_cost
from mpiopt.core.random import random_stream

SELF = MPI.COMM_SELF
SEED, N = 5, 6


def transcribed_run(rounds, model, budgets, p, B, problem, gamma):
    tau_rng = random_stream(SEED, "asyncsgd-tau")
    noise = [random_stream(SEED, "asyncsgd-gradient", i) for i in range(N)]
    x, end, kept = problem.x0(), 0.0, np.zeros(N, int)
    for _ in range(rounds):
        durations, done = [], [0] * N
        for i in range(N):
            if B[i] == 0:
                continue
            duration = 0.0
            for _ in range(B[i]):
                tau = float(model.draw(np.array([i + 1]), tau_rng)[0])
                if tau <= budgets[i]:
                    duration, done[i] = duration + tau, done[i] + 1
                else:
                    duration += budgets[i]
            durations.append(duration)
        total = np.zeros(problem.dim)
        for i in range(N):
            if B[i] == 0:
                continue
            g = np.zeros(problem.dim)
            for j in range(done[i]):
                g = problem.worker_grad(i, x, noise[i]) if j == 0 else g + problem.worker_grad(i, x, noise[i])
            total += g
        kept += done
        x = x - gamma * (total / np.sum(p * B))
        end += max(durations)
    return x, end, kept


@pytest.mark.parametrize("tau, options, quantile", [("lognormal", {"sigma": 1.5}, None), ("pareto", {}, 0.6),
                                                     ("exponential", {}, 0.8)])
def test_mindflayer_is_its_round_and_its_plan(tau, options, quantile):
    batch = 9
    result = async_sgd("quadratic", comm=SELF, problem_options={"dim": 5, "noise": 0.5}, method="mindflayer",
                       quantile=quantile, batch=batch, tau=tau, tau_options=options, n_workers=N, seed=SEED,
                       max_steps=10, stop_at_epsilon=False)
    parameters = result.info["parameters"]
    budgets, p, B = (np.array(parameters[k]) for k in ("budgets", "probabilities", "trials"))
    model = get_tau_model(tau, **options)
    numbers = np.arange(1, N + 1)
    if quantile is not None:
        np.testing.assert_allclose(p, quantile, rtol=1e-9)
    np.testing.assert_allclose(p, model.cdf(numbers, budgets), rtol=1e-12)
    # the plan: B_i = floor(t / c_i) for the smallest t at which sum p_i floor(t / c_i) reaches the batch
    costs = np.array([attempt_cost(model, i, t) for i, t in zip(numbers, budgets)])
    candidates = sorted({k * c for c in costs for k in range(1, batch * 50)})
    t = next(t for t in candidates if np.sum(p * np.floor(t / costs * (1 + 1e-12))) >= batch * (1 - 1e-12))
    np.testing.assert_array_equal(B, np.floor(t / costs * (1 + 1e-12)).astype(int))
    problem = get_problem("quadratic", dim=5, noise=0.5, seed=SEED)
    expected, end, kept = transcribed_run(10, model, budgets, p, B, problem, parameters["step_size"])
    np.testing.assert_array_equal(result.x, expected)
    assert result.time == pytest.approx(end, rel=1e-12)
    assert result.info["workers"]["accepted"] == kept.tolist() == result.info["workers"]["computed"]


@pytest.mark.parametrize("tau, options", [("lognormal", {"sigma": 1.5}), ("pareto", {}), ("exponential", {})])
def test_the_budgets_of_all_workers_at_once_are_each_workers_own_search(tau, options):
    """budgets() works on every worker at once; each worker's own search, written here: for every quantile q,
    t = the q-quantile, p = P(tau <= t), c = Simpson's rule for integral_0^t P(tau > s) ds on 4097 points,
    keep the first q of least c / p."""
    from mpiopt.asyncsgd.methods.mindflayer import QUANTILES, budgets
    model = get_tau_model(tau, **options)
    got = budgets(model, 7)
    weights = np.ones(4097)
    weights[1:-1:2], weights[2:-1:2] = 4, 2
    for i in range(1, 8):
        best = None
        for q in QUANTILES:
            t = float(model.quantile(np.array([i]), q)[0])
            p = float(model.cdf(np.array([i]), t)[0])
            s = np.linspace(0.0, t, 4097)
            c = float(t / 4096 / 3 * np.sum(weights * (1 - model.cdf(np.full(4097, i), s))))
            if best is None or c / p < best[2] / best[1]:
                best = (t, p, c)
        assert (got[0][i - 1], got[1][i - 1], got[2][i - 1]) == best


def test_an_attempts_expected_cost_is_its_closed_form():
    # exponential with mean sqrt(i): E min(tau, t) = m (1 - exp(-t/m))
    model = get_tau_model("exponential")
    for i, t in ((1, 0.7), (4, 3.0)):
        m = math.sqrt(i)
        assert attempt_cost(model, i, t) == pytest.approx(m * (1 - math.exp(-t / m)), rel=1e-10)


def test_under_heavy_tails_mindflayer_beats_rennala():
    common = dict(problem_options={"noise": 1.0, "dim": 20}, n_workers=16, tau="lognormal", tau_options={"sigma": 2.5},
                  max_gradients=400000, seed=1)
    mindflayer = async_sgd("quadratic", comm=SELF, method="mindflayer", **common)
    for extra in ({}, {"restart": False}):
        rennala = async_sgd("quadratic", comm=SELF, method="rennala", **common, **extra)
        assert mindflayer.status == rennala.status == "converged"
        assert mindflayer.time_to_epsilon < rennala.time_to_epsilon / 3
    assert mindflayer.predicted["mindflayer"] < mindflayer.predicted["rennala"]


def test_with_fixed_times_every_attempt_finishes():
    result = async_sgd("quadratic", comm=SELF, method="mindflayer", tau=[1.0, 2.0, 4.0], n_workers=3, batch=7,
                       max_steps=3, stop_at_epsilon=False)
    assert result.info["parameters"]["probabilities"] == [1.0, 1.0, 1.0]
    assert result.info["parameters"]["trials"] == [4, 2, 1]  # at t = 4: 4 + 2 + 1 = 7 gradients
    assert result.time == 12.0 and result.gradients == 21


@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(120)
def test_mindflayer_on_mpi_ranks_gives_the_simulators_iterates_with_fixed_times(comm):
    if comm.size < 2:
        pytest.skip("the mpi runtime needs a server and a worker")
    n = comm.size - 1
    common = dict(problem_options={"dim": 4, "noise": 0.3}, method="mindflayer", tau=[1.0, 1.5, 2.5][:n], batch=4,
                  max_steps=4, stop_at_epsilon=False, seed=2)
    simulated = async_sgd("quadratic", comm=SELF, n_workers=n, **common)
    run = async_sgd("quadratic", comm=comm, runtime="mpi", time_unit=0.005, **common)
    np.testing.assert_array_equal(run.x, simulated.x)
    assert run.info["workers"]["computed"] == simulated.info["workers"]["computed"]
