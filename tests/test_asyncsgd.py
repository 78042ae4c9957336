"""mpiopt.asyncsgd on the discrete-event simulator: the theory's times, the methods against each other and
against hand-written references, the event queue, the problems, the settings and the result.

References are independent of the package: a brute-force evaluation of the time formulas, a hand-written
SGD loop, and a tiny event simulation written here from the methods' rules (``reference_run``).  The MPI
runtime is tested in tests/test_asyncsgd_mpi.py.
"""
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.asyncsgd import (ALL, EventQueue, FixedTaus, TauModel, async_sgd, default_batch, default_step_size,
                             get_problem, get_tau_model, predicted_times)
from mpiopt.asyncsgd import available_methods as methods
from mpiopt.asyncsgd.problems import Quadratic, WorstCase
from mpiopt.asyncsgd.simulator import ZERO, add_time
from mpiopt.core.comm import CollectiveError
from mpiopt.core.random import random_stream

SELF = MPI.COMM_SELF


def run(problem="quadratic", problem_options=None, **settings):
    """A simulator run on this process only."""
    settings.setdefault("runtime", "simulator")
    options = {"dim": 4} if problem == "quadratic" and problem_options is None else problem_options
    return async_sgd(problem, comm=SELF, problem_options=options, **settings)


def trace_of(result):
    return [(int(w), int(k), bool(a)) for _, w, k, a in result.info["trace"]]


# -- theory: predicted times, batch and step sizes --------------------------------------------------------
def brute_force_times(taus, sigma2, epsilon, L, Delta):
    taus = sorted(float(t) for t in taus)
    n, K, S = len(taus), L * Delta / epsilon, sigma2 / epsilon
    per_m = []
    for m in range(1, n + 1):
        mean_rate = sum(1.0 / taus[i] for i in range(m)) / m
        per_m.append(K * (1 + S / m) / mean_rate)
    best = min(range(n), key=lambda i: per_m[i])
    asgd = K * (1 + S / n) / (sum(1.0 / t for t in taus) / n)
    return {"minibatch": taus[-1] * K * (1 + S / n), "asgd": asgd, "rennala": per_m[best], "m_star": best + 1}


@pytest.mark.parametrize("sigma2, ratios", [(1.0, (18.1, 9.3)), (10.0, (8.2, 4.2))])
def test_predicted_times_match_a_brute_force_evaluation_and_the_issues_numbers(sigma2, ratios):
    taus = np.sqrt(np.arange(1, 1001))
    shuffled = random_stream(3, "test-shuffle").permutation(taus)  # the order of the workers does not matter
    times = predicted_times(shuffled, sigma2, 1.0, 1.0, 1.0)
    reference = brute_force_times(taus, sigma2, 1.0, 1.0, 1.0)
    for name in ("minibatch", "asgd", "rennala"):
        assert times[name] == pytest.approx(reference[name], rel=1e-12)
    assert times["ringmaster"] == times["rennala"]
    assert times["m_star"] == reference["m_star"]
    assert times["minibatch/rennala"] == pytest.approx(ratios[0], abs=0.05)
    assert times["asgd/rennala"] == pytest.approx(ratios[1], abs=0.05)
    assert times["minibatch/rennala"] == pytest.approx(reference["minibatch"] / reference["rennala"], rel=1e-12)


def test_predicted_times_small_cases_by_hand():
    # one worker: every method takes tau K (1 + S)
    times = predicted_times([2.0], 3.0, 0.5, 2.0, 1.5)  # K = 6, S = 6
    for name in ("minibatch", "asgd", "rennala", "ringmaster"):
        assert times[name] == pytest.approx(2.0 * 6 * 7)
    assert times["m_star"] == 1
    # no noise: the optimum uses every worker when they are equal, and only the fastest otherwise when it dominates
    assert predicted_times([1.0] * 4, 0.0, 1.0, 1.0, 1.0)["m_star"] == 1  # ties: the first minimizer
    times = predicted_times([1.0, 100.0], 0.0, 1.0, 1.0, 1.0)
    assert times["m_star"] == 1 and times["rennala"] == pytest.approx(1.0)
    assert times["asgd"] == pytest.approx(2 / (1 + 1 / 100))
    # much noise: every worker helps
    assert predicted_times([1.0, 1.1, 1.2], 1e6, 1.0, 1.0, 1.0)["m_star"] == 3


@pytest.mark.parametrize("arguments", [
    ([], 1.0, 1.0, 1.0, 1.0), ([1.0, 0.0], 1.0, 1.0, 1.0, 1.0), ([1.0, -2.0], 1.0, 1.0, 1.0, 1.0),
    ([1.0, math.inf], 1.0, 1.0, 1.0, 1.0), ([1.0, math.nan], 1.0, 1.0, 1.0, 1.0),
    ([1.0], -1.0, 1.0, 1.0, 1.0), ([1.0], math.inf, 1.0, 1.0, 1.0), ([1.0], 1.0, 0.0, 1.0, 1.0),
    ([1.0], 1.0, -1.0, 1.0, 1.0), ([1.0], 1.0, 1.0, 0.0, 1.0), ([1.0], 1.0, 1.0, math.nan, 1.0),
    ([1.0], 1.0, 1.0, 1.0, -1.0), ([1.0], 1.0, 1.0, 1.0, math.inf)])
def test_predicted_times_refuse_invalid_inputs(arguments):
    with pytest.raises(ValueError):
        predicted_times(*arguments)


def test_default_batch_is_the_ceiling_of_sigma2_over_epsilon_forgiving_rounding():
    assert 2.37 / 0.237 > 10 and 10 * 0.241 / 0.241 > 10  # sigma2 = 10 epsilon, rounded up in floating point
    assert default_batch(2.37, 0.237) == 10
    assert default_batch(10 * 0.241, 0.241) == 10
    assert default_batch(0.7, 0.07) == 10
    assert default_batch(10.0, 1.0) == 10
    assert default_batch(10.5, 1.0) == 11
    assert default_batch(0.0, 1.0) == 1
    assert default_batch(0.3, 1.0) == 1
    assert default_batch(2.5, 0.5) == 5
    assert default_batch(2.6, 0.5) == 6


def test_default_step_sizes_are_the_docstrings_formulas():
    L, sigma2, eps, n = 2.0, 3.0, 0.1, 7
    S = sigma2 / eps  # 30: B = R = 30
    assert default_step_size("minibatch", n, L, sigma2, eps) == pytest.approx(
        min(1 / (2 * L), eps * n / (4 * L * sigma2)))
    assert default_step_size("rennala", n, L, sigma2, eps) == pytest.approx(
        min(1 / (2 * L), eps * 30 / (4 * L * sigma2)))
    assert default_step_size("rennala", n, L, sigma2, eps, batch=3) == pytest.approx(eps * 3 / (4 * L * sigma2))
    assert default_step_size("asgd", n, L, sigma2, eps) == pytest.approx(min(1 / (2 * n * L), eps / (4 * L * sigma2)))
    assert default_step_size("ringmaster", n, L, sigma2, eps) == pytest.approx(
        min(1 / (2 * math.ceil(S) * L), eps / (4 * L * sigma2)))
    assert default_step_size("ringmaster", n, L, 0.0, eps, threshold=4) == pytest.approx(1 / (8 * L))
    assert default_step_size("ringmaster", n, L, 0.0, eps, threshold=math.inf) == pytest.approx(1 / (2 * L))
    # no noise: only the smoothness bounds
    assert default_step_size("minibatch", n, L, 0.0, eps) == pytest.approx(1 / (2 * L))
    assert default_step_size("asgd", n, L, 0.0, eps) == pytest.approx(1 / (2 * n * L))
    with pytest.raises(ValueError):
        default_step_size("adam", n, L, sigma2, eps)


def test_a_run_uses_the_theorys_parameters_when_none_are_given():
    problem = Quadratic(dim=3, noise=2.0, L=1.0)
    eps = 0.25  # S = 8
    for method, expected in [
            ("minibatch", {"step_size": min(0.5, eps * 5 / (4 * 2.0))}),
            ("rennala", {"step_size": min(0.5, eps * 8 / (4 * 2.0)), "batch": 8}),
            ("asgd", {"step_size": min(1 / 10, eps / 8)}),
            ("ringmaster", {"step_size": min(1 / 16, eps / 8), "threshold": 8})]:
        result = async_sgd(problem, comm=SELF, method=method, n_workers=5, epsilon=eps, max_steps=2)
        for name, value in expected.items():
            assert result.info["parameters"][name] == pytest.approx(value), (method, name)


# -- the methods against each other and against references --------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_rennala_with_equal_times_and_batch_n_is_minibatch_sgd_bit_for_bit(n):
    common = dict(n_workers=n, tau="constant", step_size=0.2, max_steps=30, stop_at_epsilon=False,
                  problem_options={"dim": 6, "noise": 0.5}, seed=11)
    minibatch = run(method="minibatch", **common)
    rennala = run(method="rennala", batch=n, **common)
    assert minibatch.steps == rennala.steps == 30
    assert np.array_equal(minibatch.x, rennala.x)
    assert minibatch.history["grad_norm2"] == rennala.history["grad_norm2"]
    assert minibatch.history["time"] == rennala.history["time"] == [float(k) for k in range(31)]
    assert minibatch.gradients == 30 * n and rennala.info["workers"]["accepted"] == [30] * n


def test_minibatch_sgd_by_hand():
    problem = WorstCase(dim=5, noise=1.0, L=2.0)
    n, gamma, steps, seed = 3, 0.3, 12, 4
    result = async_sgd(problem, comm=SELF, method="minibatch", n_workers=n, tau=[1.0, 2.0, 4.0], step_size=gamma,
                       max_steps=steps, stop_at_epsilon=False, seed=seed)
    streams = [random_stream(seed, "asyncsgd-gradient", w) for w in range(n)]
    x = problem.x0()
    for _ in range(steps):
        total = np.zeros(problem.dim)
        for w in range(n):  # arrival order: the fastest first
            total = total + problem.stochastic_grad(x, streams[w])
        x = x - gamma * (total / n)
    np.testing.assert_allclose(result.x, x, rtol=1e-13, atol=1e-15)
    assert result.time == 4.0 * steps  # every step waits for the slowest worker
    assert result.history["time"] == [4.0 * k for k in range(steps + 1)]


@pytest.mark.parametrize("method, extra", [("asgd", {"delay_adaptive": False}), ("asgd", {"delay_adaptive": True}),
                                           ("ringmaster", {"threshold": 1}),
                                           ("rennala", {"batch": 1}), ("minibatch", {})])
def test_one_worker_is_plain_sgd(method, extra):
    problem = Quadratic(dim=5, noise=0.7, L=1.0, mu=0.1)
    gamma, steps, seed = 0.4, 25, 9
    result = async_sgd(problem, comm=SELF, method=method, n_workers=1, tau="sqrt", step_size=gamma,
                       max_steps=steps, stop_at_epsilon=False, seed=seed, **extra)
    stream = random_stream(seed, "asyncsgd-gradient", 0)
    x, norms = problem.x0(), []
    norms.append(float(problem.grad(x) @ problem.grad(x)))
    for _ in range(steps):
        x = x - gamma * problem.stochastic_grad(x, stream)
        norms.append(float(problem.grad(x) @ problem.grad(x)))
    assert np.array_equal(result.x, x)
    assert result.history["grad_norm2"] == norms
    assert result.history["time"] == [float(k) for k in range(steps + 1)]  # tau_1 = sqrt(1)
    assert result.info["workers"] == {"computed": [steps], "accepted": [steps], "discarded": [0], "cancelled": [0]}


@pytest.mark.parametrize("n, tau", [(4, "sqrt"), (6, "exponential"), (3, "lognormal")])
def test_ringmaster_without_threshold_is_asynchronous_sgd_bit_for_bit(n, tau):
    common = dict(n_workers=n, tau=tau, step_size=0.05, max_steps=60, stop_at_epsilon=False, trace=True, seed=5,
                  problem_options={"dim": 4, "noise": 1.0})
    asgd = run(method="asgd", delay_adaptive=False, **common)
    ringmaster = run(method="ringmaster", threshold=math.inf, **common)
    assert np.array_equal(asgd.x, ringmaster.x)
    assert asgd.history == ringmaster.history
    assert asgd.info["trace"] == ringmaster.info["trace"]
    assert asgd.info["workers"] == ringmaster.info["workers"]
    assert sum(ringmaster.info["workers"]["discarded"]) == 0
    delays = [k_at for _, _, k_at, _ in asgd.info["trace"]]
    assert max(k - k_at for k, k_at in enumerate(delays)) > 0  # the gradients really were stale


def test_delay_adaptive_asgd_steps_by_min_gamma_and_one_over_2_L_delay():
    problem = Quadratic(dim=3, noise=1.0, L=1.0, mu=0.5)
    gamma, seed, taus = 0.8, 2, [1.0, 3.5, 5.2]  # gamma > 1 / (2 L): even a delay of 1 shortens the step
    result = async_sgd(problem, comm=SELF, method="asgd", n_workers=3, tau=taus, step_size=gamma, max_steps=40,
                       stop_at_epsilon=False, trace=True, seed=seed)
    streams = [random_stream(seed, "asyncsgd-gradient", w) for w in range(3)]
    x, points = problem.x0(), {}
    for k, (_, w, k_at, accepted) in enumerate(result.info["trace"]):
        points.setdefault(0, x)
        g = problem.stochastic_grad(points[k_at], streams[w])
        delay = k - k_at
        x = x - (min(gamma, 1 / (2 * problem.L * delay)) if delay > 0 else gamma) * g
        points[k + 1] = x
    delays = [k - k_at for k, (_, _, k_at, _) in enumerate(result.info["trace"])]
    assert {0, 1, 2} <= set(delays)
    np.testing.assert_allclose(result.x, x, rtol=1e-14, atol=1e-15)
    plain = async_sgd(problem, comm=SELF, method="asgd", n_workers=3, tau=taus, step_size=gamma, max_steps=40,
                      stop_at_epsilon=False, seed=seed, delay_adaptive=False)
    assert not np.allclose(plain.x, result.x)


def reference_run(taus, method, n_gradients=math.inf, threshold=None, stop_computations=False, batch=None,
                  restart=True, max_time=None):
    """An event simulation written from the methods' rules and the documented timing (fixed times).

    Each finishing time is kept exactly (a Fraction: the start, itself exact, plus the worker's time); events
    are served in the order of (that time rounded to a float, worker), and one whose rounded time is at most
    ``max_time`` counts.  Returns the trace [(time, worker, k_at, accepted)] and the per-worker counts."""
    n = len(taus)
    exact_taus = [Fraction(float(t)) for t in taus]
    now, k, collected = Fraction(0), 0, 0
    jobs = [None] * n  # (exact finish time, step it computes at) or None
    counts = {name: [0] * n for name in ("computed", "accepted", "discarded", "cancelled")}

    def start(w):
        if jobs[w] is not None:
            counts["cancelled"][w] += 1
        jobs[w] = (now + exact_taus[w], k)

    for w in range(n):
        start(w)
    trace = []
    while len(trace) < n_gradients:
        time, worker = min((float(jobs[w][0]), w) for w in range(n) if jobs[w] is not None)
        if max_time is not None and time > max_time:
            break
        now, k_at = jobs[worker]
        jobs[worker] = None
        counts["computed"][worker] += 1
        restart_all = False
        if method == "asgd":
            accepted = True
            k += 1
        elif method == "ringmaster":
            accepted = k - k_at < threshold
            k += accepted
        elif method == "rennala":
            accepted = k_at == k
            if accepted:
                collected += 1
                if collected == batch:
                    k, collected, restart_all = k + 1, 0, restart
        elif method == "minibatch":
            accepted = True
            collected += 1
            if collected == n:
                k, collected, restart_all = k + 1, 0, True
        counts["accepted" if accepted else "discarded"][worker] += 1
        if restart_all:
            for w in range(n):
                start(w)
        elif method != "minibatch":
            start(worker)
        if method == "ringmaster" and stop_computations:
            for w in range(n):  # a computation whose delay has reached R is stopped and restarted
                if jobs[w] is not None and k - jobs[w][1] >= threshold:
                    start(w)
        trace.append((time, worker, k_at, accepted))
    return trace, counts


def iterate_from_trace(problem, result, method, gamma, batch=1, seed=0):
    """The final point from a run's trace alone, by the methods' rules: each arrival's gradient is
    grad f at the point of the step it was computed at plus the noise of its worker's own stream (drawn
    for every arrival, used or not); the one-gradient methods step with each accepted one, the batch
    methods with the mean of ``batch`` accepted ones in arrival order."""
    points, streams, total, count = [problem.x0()], {}, np.zeros(problem.dim), 0
    scale = math.sqrt(problem.sigma2 / problem.dim)
    for _, worker, k_at, accepted in result.info["trace"]:
        stream = streams.setdefault(worker, random_stream(seed, "asyncsgd-gradient", worker))
        g = problem.grad(points[k_at]) + scale * stream.standard_normal(problem.dim)
        if not accepted:
            continue
        if method in ("asgd", "ringmaster"):
            points.append(points[-1] - gamma * g)
            continue
        total += g
        count += 1
        if count == batch:
            points.append(points[-1] - gamma * (total / batch))
            total, count = np.zeros(problem.dim), 0
    return points[-1]


@pytest.mark.parametrize("problem", [WorstCase(dim=5, noise=0.3), Quadratic(dim=3, noise=2.0)])
@pytest.mark.parametrize("tau", ["sqrt", "ringmaster"])
@pytest.mark.parametrize("method, extra", [
    ("asgd", {"delay_adaptive": False}), ("ringmaster", {"threshold": 2}),
    ("ringmaster", {"threshold": 2, "stop_computations": True}), ("rennala", {"batch": 3}),
    ("rennala", {"batch": 3, "restart": False}), ("minibatch", {})])
def test_iterates_are_the_gradients_of_the_trace_bit_for_bit(problem, tau, method, extra):
    """Workers at one point (a synchronous step's, Ringmaster's restarts) and the point just evaluated:
    the simulator computes grad f once for them, and every gradient still has the bits of its own."""
    assert problem.gradient_noise() is not None
    n = 6
    result = async_sgd(problem, comm=SELF, method=method, n_workers=n, tau=tau, step_size=0.05, seed=3,
                       max_steps=None, max_gradients=300, stop_at_epsilon=False, trace=True, **extra)
    batch = {"minibatch": n, "rennala": 3}.get(method, 1)
    expected = iterate_from_trace(problem, result, method, 0.05, batch=batch, seed=3)
    assert result.steps > 10 and result.x.tobytes() == expected.tobytes()


def test_only_gaussian_noise_problems_give_their_noise_apart():
    assert WorstCase(dim=4, mask=0.5).gradient_noise() is None  # its coin comes before the noise
    assert get_problem("heterogeneous-quadratic", workers=3).gradient_noise() is None  # f_i of its own
    assert get_problem("least-squares", rows=10, dim=2).gradient_noise() is None


STALENESS_CASES = [
    ("ringmaster", {"threshold": 1}), ("ringmaster", {"threshold": 2}), ("ringmaster", {"threshold": 3}),
    ("ringmaster", {"threshold": 1, "stop_computations": True}),
    ("ringmaster", {"threshold": 2, "stop_computations": True}),
    ("rennala", {"batch": 2, "restart": False}), ("rennala", {"batch": 3, "restart": False}),
    ("rennala", {"batch": 2, "restart": True}), ("rennala", {"batch": 4, "restart": True}),
    ("asgd", {}), ("minibatch", {})]


@pytest.mark.parametrize("taus", [(1.0, 2.5, 3.7), (1.0, 1.0, 2.0, 0.6), (0.7, 1.9, 2.3, 5.1, 1.3)])
@pytest.mark.parametrize("method, extra", STALENESS_CASES)
def test_stale_gradients_are_discarded_and_computations_cancelled_as_the_rules_say(taus, method, extra):
    n_gradients = 45
    result = run(method=method, n_workers=len(taus), tau=list(taus), step_size=0.01, max_steps=None,
                 max_gradients=n_gradients, stop_at_epsilon=False, trace=True, **extra)
    trace, counts = reference_run(list(taus), method, n_gradients, **extra)
    assert [tuple(event) for event in result.info["trace"]] == trace
    assert result.info["workers"] == counts
    assert result.gradients == n_gradients and result.time == trace[-1][0]
    assert result.steps == sum(counts["accepted"]) // (extra.get("batch", 1) if method == "rennala" else
                                                        len(taus) if method == "minibatch" else 1)


@pytest.mark.parametrize("method, extra", STALENESS_CASES)
@pytest.mark.parametrize("taus, max_time", [((1.0, 2.0, 3.0, 4.0), 12.0), ((1.0, 2.0, 4.0, 4.0), 8.0),
                                            ((0.5, 1.5, 0.75), 4.5), ((2.0, 3.0), 6.0), ((1.0, 2.0, 4.0, 4.0), 7.0)])
def test_an_event_at_exactly_max_time_counts_for_every_worker(taus, max_time, method, extra):
    result = run(method=method, n_workers=len(taus), tau=list(taus), step_size=0.01, max_steps=None,
                 max_time=max_time, stop_at_epsilon=False, trace=True, **extra)
    trace, counts = reference_run(list(taus), method, max_time=max_time, **extra)
    assert [tuple(event) for event in result.info["trace"]] == trace
    assert result.info["workers"] == counts
    assert result.status == "time_limit" and result.info["stop"] == "max_time" and result.time == max_time


def test_the_issues_max_time_cases():
    asgd = run(method="asgd", n_workers=4, tau=[1.0, 2.0, 3.0, 4.0], max_time=12, max_steps=None,
               stop_at_epsilon=False, step_size=0.01)
    assert asgd.info["workers"]["computed"] == [12, 6, 4, 3]
    for max_time in (8, 8.000001):
        minibatch = run(method="minibatch", n_workers=4, tau=[1.0, 2.0, 4.0, 4.0], max_time=max_time,
                        max_steps=None, stop_at_epsilon=False, step_size=0.01)
        assert minibatch.steps == 2 and minibatch.status == "time_limit" and minibatch.time == max_time
        assert minibatch.info["stop"] == "max_time"


# Times whose exact sums are equal but whose repeated float sums are not (10 x 0.1 and 5 x 0.2 are both
# 1.0000000000000000555), and times that differ by an ulp but become equal after a restart at a later time
# (8 + 3.0000000000000004 rounds to 11.0): both are ties, served by the lower worker.
TIE_CASES = [((0.2, 0.1), "asgd", {}), ((0.3, 0.1, 0.2), "asgd", {}),
             ((3.0000000000000004, 3.0, 8.0), "minibatch", {}),
             ((3.0000000000000004, 3.0), "rennala", {"batch": 2, "restart": True}),
             ((3.0000000000000004, 3.0, 8.0), "rennala", {"batch": 3, "restart": True}),
             ((0.30000000000000004, 0.1, 0.7), "ringmaster", {"threshold": 3}),
             ((0.30000000000000004, 0.1, 0.7), "ringmaster", {"threshold": 4, "stop_computations": True})]


@pytest.mark.parametrize("taus, method, extra", TIE_CASES)
def test_ties_go_to_the_lower_worker_whatever_sums_and_restarts_led_to_them(taus, method, extra):
    result = run(method=method, n_workers=len(taus), tau=list(taus), step_size=0.01, max_steps=None,
                 max_gradients=60, stop_at_epsilon=False, trace=True, **extra)
    trace, counts = reference_run(list(taus), method, 60, **extra)
    assert [tuple(event) for event in result.info["trace"]] == trace
    assert result.info["workers"] == counts
    times = [event[0] for event in trace]
    assert len(set(times)) < len(times)  # the case has ties


def test_ties_after_a_restart_of_every_worker():
    """8 + 3.0000000000000004 and 8 + 3.0 are both 11.0: the lower worker first, not the faster one."""
    result = run(method="minibatch", n_workers=3, tau=[3.0000000000000004, 3.0, 8.0], max_steps=2,
                 stop_at_epsilon=False, trace=True, step_size=0.01)
    assert [tuple(event[:2]) for event in result.info["trace"]] == [
        (3.0, 1), (3.0000000000000004, 0), (8.0, 2), (11.0, 0), (11.0, 1), (16.0, 2)]


def test_equal_exact_times_are_equal_in_the_simulator():
    """Worker 1 (0.1) finishes its 10th gradient when worker 0 (0.2) finishes its 5th: the same time, 1.0."""
    result = run(method="asgd", n_workers=2, tau=[0.2, 0.1], max_gradients=15, max_steps=None,
                 stop_at_epsilon=False, trace=True, step_size=0.01)
    arrivals = [tuple(event[:2]) for event in result.info["trace"]]
    assert arrivals[-2:] == [(1.0, 0), (1.0, 1)]
    at_one = run(method="asgd", n_workers=2, tau=[0.2, 0.1], max_time=1.0, max_steps=None, stop_at_epsilon=False,
                 step_size=0.01)
    assert at_one.info["workers"]["computed"] == [5, 10]


def test_the_reference_cases_exercise_discards_and_cancellations():
    """The cases above are not vacuous: discards without stops, cancellations with stops and restarts."""
    taus = [1.0, 2.5, 3.7]
    assert sum(reference_run(taus, "ringmaster", 45, threshold=2)[1]["discarded"]) > 0
    stopped = reference_run(taus, "ringmaster", 45, threshold=2, stop_computations=True)[1]
    assert sum(stopped["cancelled"]) > 0 and sum(stopped["discarded"]) == 0
    assert sum(reference_run(taus, "rennala", 45, batch=2, restart=False)[1]["discarded"]) > 0
    restarted = reference_run(taus, "rennala", 45, batch=2, restart=True)[1]
    assert sum(restarted["cancelled"]) > 0 and sum(restarted["discarded"]) == 0
    # Rennala with restarts: the slow workers are cancelled at every step and never finish
    result = run(method="rennala", batch=2, n_workers=3, tau=taus, max_steps=10, stop_at_epsilon=False)
    assert result.info["workers"]["computed"] == [20, 0, 0]
    assert result.info["workers"]["cancelled"] == [0, 10, 10]


def test_ringmaster_with_stops_keeps_every_delay_below_the_threshold():
    for R in (1, 2, 4):
        result = run(method="ringmaster", threshold=R, stop_computations=True, n_workers=12, tau="exponential",
                     step_size=0.01, max_steps=200, stop_at_epsilon=False, trace=True)
        delays = []
        steps = 0
        for _, _, k_at, accepted in result.info["trace"]:
            delays.append(steps - k_at)
            steps += accepted
        assert max(delays) == R - 1
        assert sum(result.info["workers"]["discarded"]) == 0 and sum(result.info["workers"]["cancelled"]) > 0
        unstopped = run(method="ringmaster", threshold=R, n_workers=12, tau="exponential", step_size=0.01,
                        max_steps=200, stop_at_epsilon=False)
        assert sum(unstopped.info["workers"]["discarded"]) > 0 and sum(unstopped.info["workers"]["cancelled"]) == 0


def reference_random_rennala(n, batch, n_gradients, seed, tau_model):
    """Rennala with restarts and random times: the simulator's documented tau stream, drawn in event order,
    and its documented timing (exact sums, served by (time rounded to a float, worker))."""
    rng = random_stream(seed, "asyncsgd-tau")
    numbers = np.arange(1, n + 1)
    k, collected = 0, 0

    def exact(start, taus):  # (rounded, exact) finishing times
        return [(float(start + Fraction(float(t))), start + Fraction(float(t))) for t in taus]

    finish = exact(Fraction(0), tau_model.draw(numbers, rng))
    started = [0] * n
    trace = []
    while len(trace) < n_gradients:
        time, worker = min((finish[w][0], w) for w in range(n) if finish[w] is not None)
        now, k_at = finish[worker][1], started[worker]
        finish[worker] = None
        collected += 1
        trace.append((time, worker, k_at, True))
        if collected == batch:
            k, collected = k + 1, 0
            finish = exact(now, tau_model.draw(numbers, rng))
            started = [k] * n
        else:
            finish[worker] = exact(now, tau_model.draw(numbers[worker:worker + 1], rng))[0]
            started[worker] = k
    return trace


@pytest.mark.parametrize("n, batch", [(150, 7), (70, 70), (200, 300)])
def test_random_times_with_many_workers_follow_the_event_order(n, batch):
    """Simultaneous restarts of more than a chunk of workers (the partially sorted bulk) against a plain loop."""
    result = run(method="rennala", batch=batch, n_workers=n, tau="exponential", max_steps=None, max_gradients=700,
                 stop_at_epsilon=False, trace=True, seed=13, step_size=0.01, problem_options={"dim": 2})
    reference = reference_random_rennala(n, batch, 700, 13, get_tau_model("exponential"))
    assert [tuple(event) for event in result.info["trace"]] == reference


# -- the event queue and the simulator ---------------------------------------------------------------------
def popped(queue):
    (hi, _), worker = queue.pop()
    return hi, worker


def test_event_queue_orders_by_time_then_worker_and_skips_cancelled_jobs():
    queue = EventQueue(4)
    assert queue.peek() is None
    assert queue.start(2, ZERO, 1.0) is False
    assert queue.start(0, ZERO, 3.0) is False
    assert queue.start(1, ZERO, 1.0) is False
    assert queue.start(3, ZERO, 0.5) is False
    assert queue.start(3, ZERO, 2.0) is True  # restarted: its job at 0.5 is cancelled
    assert queue.pending(3) and queue.peek() == (1.0, 1)
    assert popped(queue) == (1.0, 1) and not queue.pending(1)
    assert popped(queue) == (1.0, 2)
    assert queue.start(0, (1.0, 0.0), 0.5) is True
    assert [popped(queue), popped(queue)] == [(1.5, 0), (2.0, 3)]
    assert queue.peek() is None and not any(queue.pending(w) for w in range(4))


def test_event_queue_bulk_restarts_with_fixed_order_mix_with_single_restarts():
    means = np.array([2.0, 1.0, 2.0, 1.0, 3.0])
    queue = EventQueue(5, means)
    assert queue.start_all((10.0, 0.0)) == 0
    assert popped(queue) == (11.0, 1)
    assert queue.start(1, (11.0, 0.0), 1.0) is False   # ties with the bulk's workers 0 and 2: the lower number first
    assert queue.start(4, (10.0, 0.0), 1.0) is True    # cancels its bulk entry at 13
    assert [popped(queue) for _ in range(5)] == [(11.0, 3), (11.0, 4), (12.0, 0), (12.0, 1), (12.0, 2)]
    assert queue.peek() is None
    assert queue.start_all((20.0, 0.0)) == 0
    queue.start(0, (20.0, 0.0), 1.0)
    assert queue.start_all((30.0, 0.0)) == 5  # every worker was busy
    assert [popped(queue)[0] for _ in range(5)] == [31.0, 31.0, 32.0, 32.0, 33.0]


def exact_order(start, taus):
    """(float nearest start + tau, worker) in order, from exact fractions; ``start`` is (hi, lo)."""
    begin = Fraction(start[0]) + Fraction(start[1])
    return sorted((float(begin + Fraction(float(t))), w) for w, t in enumerate(taus))


@pytest.mark.parametrize("start", [ZERO, (1.0, 0.0), (1e3, 0.0), (2.0 ** 40 + 0.5, 0.0),
                                   add_time(add_time((1e3, 0.0), 0.1), 1e-14)])
def test_event_queue_bulk_of_fixed_times_that_round_together_goes_by_worker(start):
    """Times an ulp apart (and equal ones) become equal at a late start: every chunk is in (time, worker)
    order, with ties across the chunks' edges."""
    rng = np.random.default_rng(7)
    base = np.array([1.0, 3.0, 3.0000000000000004, 2.9999999999999996, 5.000000000000001, 5.0])
    taus = rng.permutation(np.concatenate([np.repeat(base, 40), rng.uniform(1, 6, 100)]))
    queue = EventQueue(taus.size, taus)
    queue.start_all(start)
    assert [popped(queue) for _ in range(taus.size)] == exact_order(start, taus)
    assert queue.peek() is None


@pytest.mark.parametrize("start", [ZERO, (1e3, 0.0), add_time(add_time((1e3, 0.0), 0.1), 1e-14)])
def test_event_queue_small_chunks_of_fixed_times_that_round_together_go_by_worker(start):
    """Triples of times an ulp apart at the front, where a bulk's first chunks are a few workers each: at a
    late start each triple rounds to one time and goes by worker, whatever the triple's order of times."""
    rng = np.random.default_rng(11)
    taus = rng.permutation(np.concatenate([np.nextafter(t, [0.0, t, 9.0]) for t in np.arange(1.0, 11.0)]))
    queue = EventQueue(taus.size, taus)
    for _ in range(2):  # a restart while the bulk is partly used
        queue.start_all(start)
        assert popped(queue) == exact_order(start, taus)[0]
    queue.start_all(start)
    assert [popped(queue) for _ in range(taus.size)] == exact_order(start, taus)
    assert queue.peek() is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_event_queue_bulk_of_random_times_pops_in_time_order(seed):
    rng = np.random.default_rng(seed)
    n = 300
    times = rng.exponential(size=n)
    queue = EventQueue(n)
    queue.start_all(ZERO, times.copy())
    cancelled = set(rng.choice(n, 40, replace=False).tolist())
    for w in sorted(cancelled):
        queue.start(w, ZERO, 0.5 + w / 1000)
    expected = sorted([(float(times[w]), w) for w in range(n) if w not in cancelled] +
                      [(0.5 + w / 1000, w) for w in cancelled])
    assert [popped(queue) for _ in range(n)] == expected
    assert queue.peek() is None


def test_event_queue_bulk_of_random_times_breaks_ties_by_worker_across_chunks():
    times = np.tile([1.0, 2.0], 100)
    queue = EventQueue(times.size)
    queue.start_all((7.0, 0.0), times.copy())
    assert [popped(queue) for _ in range(times.size)] == sorted((7.0 + t, w) for w, t in enumerate(times))


def test_times_are_the_exact_sums_rounded_once():
    """Chains of additions against fractions: the simulator's time is the float nearest the exact sum."""
    rng = np.random.default_rng(3)
    for taus in (rng.uniform(0, 1, 3000), np.sqrt(np.arange(1, 3001)), np.full(3000, 0.1), rng.exponential(size=3000)):
        at, exact = ZERO, Fraction(0)
        for tau in taus:
            at, exact = add_time(at, float(tau)), exact + Fraction(float(tau))
            assert at[0] == float(exact) and Fraction(at[0]) + Fraction(at[1]) == exact
    assert sum([0.1] * 10) == 0.9999999999999999  # repeated float sums drift; the exact sum rounds to 1.0
    at = ZERO
    for _ in range(10):
        at = add_time(at, 0.1)
    assert at[0] == 1.0 == add_time(add_time(add_time(add_time(add_time(ZERO, 0.2), 0.2), 0.2), 0.2), 0.2)[0]


class WholeExponentialTimes(TauModel):
    """Random times rounded up to whole units: ties between workers are common."""

    name, variate = "whole-exponential", "exponential"

    def mean(self, workers):
        return np.ones(np.shape(workers)) * 1.58

    def times(self, workers, standard):
        return np.ceil(np.asarray(standard) + 1e-9)



def test_simulated_ties_of_random_times_go_to_the_lower_worker():
    result = run(method="minibatch", n_workers=100, tau=WholeExponentialTimes(), max_steps=3,
                 stop_at_epsilon=False, trace=True, step_size=0.1)
    trace = result.info["trace"]
    assert all((a[0], a[1]) < (b[0], b[1]) for a, b in zip(trace, trace[1:]))


@pytest.mark.parametrize("model", ["exponential", "lognormal", "ringmaster"])
def test_random_time_models_have_the_mean_of_each_worker(model):
    tau = get_tau_model(model)
    assert not tau.fixed
    rng = random_stream(0, "test-tau")
    for i in (1, 4, 50):
        draws = tau.draw(np.full(40000, i), rng)
        assert np.all(draws > 0)
        assert draws.mean() == pytest.approx(float(tau.mean(np.array([i]))[0]), rel=0.03)
    expected = {"exponential": np.sqrt(7.0), "lognormal": np.sqrt(7.0),
                "ringmaster": 1 + np.sqrt(7.0) + np.sqrt(16 / np.pi)}[model]
    assert float(tau.mean(np.array([7]))[0]) == pytest.approx(expected)


def test_fixed_time_models():
    assert get_tau_model("constant").mean(np.arange(1, 4)).tolist() == [1, 1, 1]
    assert get_tau_model("sqrt").mean(np.arange(1, 5)).tolist() == pytest.approx([1, np.sqrt(2), np.sqrt(3), 2])
    assert get_tau_model("linear").mean(np.arange(1, 4)).tolist() == [1, 2, 3]
    fixed = get_tau_model([3.0, 1.0, 2.0])
    assert isinstance(fixed, FixedTaus) and fixed.fixed
    assert fixed.mean(np.array([1, 3])).tolist() == [3.0, 2.0]
    assert fixed.draw(np.array([2]), None).tolist() == [1.0]
    with pytest.raises(ValueError):
        fixed.mean(np.array([4]))
    for bad in ([], [1.0, 0.0], [1.0, -1.0], [math.inf], [math.nan]):
        with pytest.raises(ValueError):
            FixedTaus(bad)
    assert not get_tau_model("real").fixed
    assert get_tau_model(fixed) is fixed


def test_simulated_workers_finish_at_the_rate_of_their_mean_time():
    """Asynchronous SGD restarts a worker as it finishes: worker i (from 1) computes about T / mean_i gradients."""
    T = 3000.0
    result = run(method="asgd", n_workers=3, tau="exponential", max_time=T, max_steps=None, stop_at_epsilon=False,
                 step_size=1e-3, eval_every=10**6, seed=1, problem_options={"dim": 1, "noise": 0.0})
    assert result.status == "time_limit" and result.info["stop"] == "max_time" and result.time == T
    computed = np.array(result.info["workers"]["computed"])
    np.testing.assert_allclose(computed, T / np.sqrt([1, 2, 3]), rtol=0.08)
    assert result.info["tau_means"] == pytest.approx(np.sqrt([1, 2, 3]).tolist())


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    common = dict(method="ringmaster", n_workers=5, tau="lognormal", max_steps=50, stop_at_epsilon=False,
                  trace=True, step_size=0.05)
    first, again, other = run(seed=3, **common), run(seed=3, **common), run(seed=4, **common)
    assert np.array_equal(first.x, again.x) and first.info["trace"] == again.info["trace"]
    assert first.history == again.history
    assert not np.array_equal(first.x, other.x) and first.info["trace"] != other.info["trace"]
    # fixed times: only the gradient noise changes with the seed
    fixed = dict(common, tau="sqrt")
    a, b = run(seed=3, **fixed), run(seed=4, **fixed)
    assert [e[:3] for e in a.info["trace"]] == [e[:3] for e in b.info["trace"]]
    assert not np.array_equal(a.x, b.x)


def test_reaching_epsilon_stops_the_run_at_the_first_evaluation_below_it():
    epsilon = 1e-4
    result = run(method="rennala", n_workers=4, tau="sqrt", epsilon=epsilon, batch=2, step_size=0.5,
                 problem_options={"dim": 5, "noise": 0.0, "mu": 0.2}, eval_every=3)
    norms, times = result.history["grad_norm2"], result.history["time"]
    assert result.status == "converged" and norms[-1] <= epsilon and all(v > epsilon for v in norms[:-1])
    assert result.info["stop"] == "epsilon"
    assert result.time_to_epsilon == times[-1] == result.time
    assert result.steps % 3 == 0 and result.history["step"] == list(range(0, result.steps + 1, 3))
    # not stopping: the run goes on, and time_to_epsilon stays the first time below epsilon
    longer = run(method="rennala", n_workers=4, tau="sqrt", epsilon=epsilon, batch=2, step_size=0.5,
                 problem_options={"dim": 5, "noise": 0.0, "mu": 0.2}, eval_every=3, stop_at_epsilon=False,
                 max_steps=result.steps + 30)
    assert longer.status == "finished" and longer.time_to_epsilon == result.time_to_epsilon
    assert longer.info["stop"] == "max_steps"
    assert longer.steps == result.steps + 30


def test_the_limits_end_the_run_with_their_status():
    common = dict(method="asgd", n_workers=1, tau=[1.0], stop_at_epsilon=False, step_size=0.1)
    at = run(max_time=5.5, max_steps=None, **common)
    assert at.status == "time_limit" and at.time == 5.5 and at.gradients == 5 and at.steps == 5
    assert at.info["stop"] == "max_time"
    exact = run(max_time=5.0, max_steps=None, **common)
    assert exact.status == "time_limit" and exact.time == 5.0 and exact.gradients == 5
    assert exact.info["stop"] == "max_time"
    gradients = run(method="rennala", batch=3, n_workers=2, tau=[1.0, 1.5], max_gradients=10, max_steps=None,
                    stop_at_epsilon=False, step_size=0.1)
    assert gradients.status == "finished" and gradients.info["stop"] == "max_gradients" and gradients.gradients == 10
    steps = run(method="minibatch", n_workers=3, tau=[1.0, 2.0, 4.0], max_steps=7, stop_at_epsilon=False,
                step_size=0.1)
    assert steps.status == "finished" and steps.steps == 7 and steps.time == 28.0 and steps.gradients == 21
    assert steps.info["stop"] == "max_steps"
    nothing = run(max_steps=0, **common)
    assert nothing.status == "finished" and nothing.steps == 0 and nothing.gradients == 0
    assert nothing.info["stop"] == "max_steps"
    assert nothing.history["step"] == [0]
    waiting = run(method="minibatch", n_workers=3, tau=[1.0, 2.0, 100.0], max_time=50, stop_at_epsilon=False)
    assert waiting.status == "time_limit" and waiting.info["stop"] == "max_time" and waiting.steps == 0
    assert waiting.info["workers"]["computed"] == [1, 1, 0]


def test_a_method_that_leaves_every_worker_idle_is_reported():
    from mpiopt.core.registry import register, unregister
    from mpiopt.asyncsgd import Method

    class Stalls(Method):
        name = "stalls"

        def arrive(self, worker, grad, k_at):
            self.accepted[worker] += 1
            return ()

    register("asyncsgd-method", "stalls", Stalls)
    try:
        assert "stalls" in methods()
        with pytest.raises(CollectiveError, match="no worker is computing"):
            run(method="stalls", n_workers=2, tau="constant", stop_at_epsilon=False, step_size=0.1)
    finally:
        unregister("asyncsgd-method", "stalls")
    assert ALL == "all"



def test_no_runtime_names_a_method():
    """The set-up, the loop, the runtimes, the settings and the command line read what a method declares
    (predicted_time, routed, reference, uses_jobs, unavailable), never its name: the only registered name
    among their string constants is the settings' default method."""
    import ast
    import inspect
    from mpiopt.asyncsgd import api, checkpoint, engine, mpi, routes, runner, settings, simulator
    from mpiopt.asyncsgd.settings import AsyncSGDSettings
    from mpiopt.cli import asyncsgd as cli
    registered = set(methods())
    for module in (api, checkpoint, engine, mpi, routes, runner, settings, simulator, cli):
        constants = {node.value for node in ast.walk(ast.parse(inspect.getsource(module)))
                     if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        named = constants & registered - ({AsyncSGDSettings.method} if module is settings else set())
        assert not named, f"{module.__name__} names {sorted(named)}"


def test_a_registered_method_adds_its_predicted_time_to_every_run():
    """Every run's predicted times are the theory's table, then what each registered method adds
    (Method.predicted_time, whichever method runs), then the running method's own."""
    from mpiopt.core.registry import register, unregister
    from mpiopt.asyncsgd import Method

    class Clocked(Method):
        name = "clocked"

        @classmethod
        def predicted_time(cls, problem, timing, epsilon):
            return {"clocked": float(timing.n_workers), "rennala": -1.0}

        def predicted(self, problem, timing, epsilon):
            return {"clocked_own": 1.0}

        def arrive(self, worker, grad, k_at):
            self.accepted[worker] += 1
            self._step(grad, self.step_size)
            return [worker]

    baseline = run(method="rennala", n_workers=3, tau="sqrt", max_steps=2).predicted
    register("asyncsgd-method", "clocked", Clocked)
    try:
        other = run(method="rennala", n_workers=3, tau="sqrt", max_steps=2).predicted
        own = run(method="clocked", n_workers=3, tau="sqrt", max_steps=2).predicted
    finally:
        unregister("asyncsgd-method", "clocked")
    assert other == {**baseline, "clocked": 3.0, "rennala": -1.0} and "clocked_own" not in other
    assert own == {**other, "clocked_own": 1.0} and list(own)[-1] == "clocked_own"
    assert "fragile" not in baseline and "amelie" not in baseline  # theirs need a graph


def test_the_methods_declare_what_the_runtimes_read():
    """The graph methods' vectors travel on the pivot's tree (routed), and the comparison divides by Rennala's
    times (reference): declared by the methods, read by mpi.py / routes.py and the command line."""
    from mpiopt.core.registry import lookup
    assert {name for name in methods() if lookup("asyncsgd-method", name).routed} == {"fragile", "amelie"}
    assert [name for name in methods() if lookup("asyncsgd-method", name).reference] == ["rennala"]

# -- the problems ------------------------------------------------------------------------------------------
def directional_check(problem, x, rng, directions=4, h=1e-5):
    g = problem.grad(x)
    for _ in range(directions):
        v = rng.standard_normal(problem.dim)
        v /= np.linalg.norm(v)
        numeric = (problem.loss(x + h * v) - problem.loss(x - h * v)) / (2 * h)
        assert numeric == pytest.approx(float(g @ v), rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("problem", [Quadratic(dim=7, noise=1.0, L=3.0, mu=0.01), WorstCase(dim=9, noise=2.0, L=2.0)])
def test_quadratic_gradients_and_noise(problem):
    from scipy.optimize import check_grad
    rng = random_stream(0, "test-points")
    for _ in range(3):
        x = rng.standard_normal(problem.dim)
        assert check_grad(problem.loss, problem.grad, x) <= 1e-6 * max(1.0, np.linalg.norm(problem.grad(x)))
    x = rng.standard_normal(problem.dim)
    full = problem.grad(x)
    noise_rng = random_stream(1, "test-noise")
    draws = np.array([problem.stochastic_grad(x, noise_rng) for _ in range(20000)])
    assert np.all(np.abs(draws.mean(axis=0) - full) <= 5 * math.sqrt(problem.sigma2 / problem.dim / 20000))
    assert np.mean(np.sum((draws - full) ** 2, axis=1)) == pytest.approx(problem.sigma2, rel=0.03)
    # L is the Lipschitz constant of the gradient: the largest Hessian eigenvalue
    hessian = np.array([problem.grad(e) - problem.grad(np.zeros(problem.dim)) for e in np.eye(problem.dim)])
    assert np.max(np.abs(np.linalg.eigvalsh(hessian))) <= problem.L * (1 + 1e-12)


def test_no_noise_gives_the_exact_gradient():
    for problem in (Quadratic(dim=4, noise=0.0), WorstCase(dim=4, noise=0)):
        x = np.arange(4.0)
        assert np.array_equal(problem.stochastic_grad(x, random_stream(0, "x")), problem.grad(x))
        assert problem.sigma2 == 0.0


@pytest.mark.parametrize("dim", [1, 2, 10, 50])
def test_worst_case_f_low_is_the_true_minimum(dim):
    problem = WorstCase(dim=dim, noise=1.0, L=3.0)
    A = 2 * np.eye(dim) - np.eye(dim, k=1) - np.eye(dim, k=-1)
    x_star = np.linalg.solve(A, np.eye(dim)[0])
    assert problem.f_low == pytest.approx(problem.loss(x_star), rel=1e-12)
    assert np.linalg.norm(problem.grad(x_star)) <= 1e-12
    assert problem.Delta == pytest.approx(-problem.f_low)  # x0 = 0, f(0) = 0
    assert np.array_equal(problem.x0(), np.zeros(dim))
    assert np.max(np.linalg.eigvalsh(problem.L / 4 * A)) <= problem.L


@pytest.mark.parametrize("options", [{"dim": 0}, {"dim": 2.5}, {"dim": True}, {"noise": -1.0}, {"noise": math.inf},
                                     {"L": 0.0}, {"mu": 2.0}])
def test_invalid_problem_options_are_refused(options):
    with pytest.raises(ValueError):
        get_problem("quadratic", **options)
    with pytest.raises(CollectiveError, match="cannot set up the problem"):
        run(problem_options=options, max_steps=1)


@pytest.fixture(scope="module")
def logistic():
    pytest.importorskip("sklearn")
    return get_problem("logistic", seed=0, comm=SELF, batch_size=4)


def test_logistic_gradients_are_right_and_the_stochastic_ones_unbiased(logistic):
    from scipy.optimize import check_grad, minimize
    problem = logistic
    rng = random_stream(0, "test-logistic")
    for x in (problem.x0(), 0.3 * rng.standard_normal(problem.dim)):
        assert check_grad(problem.loss, problem.grad, x) <= 1e-5 * max(1.0, np.linalg.norm(problem.grad(x)))
    x = 0.3 * rng.standard_normal(problem.dim)
    # the full gradient is the mean of the one-row gradients (rows are drawn uniformly, so E g = grad f)
    rows = problem.y.size
    per_row = np.array([problem.model.loss_and_grad(x, problem.X[i:i + 1], problem.y[i:i + 1])[1]
                        for i in range(rows)])
    np.testing.assert_allclose(per_row.mean(axis=0), problem.grad(x), rtol=1e-10, atol=1e-12)
    draws = np.array([problem.stochastic_grad(x, rng) for _ in range(6000)])
    spread = np.sqrt(per_row.var(axis=0) / (4 * 6000))
    assert np.all(np.abs(draws.mean(axis=0) - problem.grad(x)) <= 5 * spread + 1e-12)
    # sigma2 estimates E||g - grad f||^2 at x0: with 4 rows drawn with replacement, the one-row variance / 4
    x0 = problem.x0()
    exact = np.mean(np.sum((np.array([problem.model.loss_and_grad(x0, problem.X[i:i + 1], problem.y[i:i + 1])[1]
                                      for i in range(rows)]) - problem.grad(x0)) ** 2, axis=1)) / 4
    assert problem.sigma2 == pytest.approx(exact, rel=0.5)
    # f_low is the minimum
    solution = minimize(lambda w: (problem.loss(w), problem.grad(w)), x0, jac=True, method="BFGS",
                        options={"gtol": 1e-10})
    assert problem.f_low == pytest.approx(solution.fun, rel=1e-7, abs=1e-9)
    assert problem.f_low <= problem.loss(solution.x) + 1e-12
    # L bounds the Hessian at any point (finite-difference Hessians)
    for point in (x0, x, solution.x):
        h = 1e-6
        hessian = np.array([(problem.grad(point + h * e) - problem.grad(point - h * e)) / (2 * h)
                            for e in np.eye(problem.dim)])
        assert np.max(np.abs(np.linalg.eigvalsh((hessian + hessian.T) / 2))) <= problem.L * (1 + 1e-4)


def test_mlp_gradients_are_right_and_the_stochastic_ones_unbiased():
    pytest.importorskip("sklearn")
    problem = get_problem("mlp", seed=0, comm=SELF, hidden=(8,), batch_size=2)
    rng = random_stream(0, "test-mlp")
    x = problem.x0() + 0.05 * rng.standard_normal(problem.dim)
    directional_check(problem, x, rng)
    rows = problem.y.size
    per_row = np.array([problem.model.loss_and_grad(x, problem.X[i:i + 1], problem.y[i:i + 1])[1]
                        for i in range(rows)])
    np.testing.assert_allclose(per_row.mean(axis=0), problem.grad(x), rtol=1e-9, atol=1e-12)
    draws = np.array([problem.stochastic_grad(x, rng) for _ in range(3000)])
    spread = np.sqrt(per_row.var(axis=0) / (2 * 3000))
    assert np.all(np.abs(draws.mean(axis=0) - problem.grad(x)) <= 6 * spread + 1e-12)
    assert problem.L > 0 and problem.sigma2 > 0 and problem.options["L_estimated"]
    result = async_sgd(problem, comm=SELF, method="ringmaster", n_workers=4, max_steps=20, stop_at_epsilon=False)
    assert result.steps == 20 and result.history["loss"][-1] < result.history["loss"][0]


def test_problems_draw_only_from_the_stream_they_are_given(logistic):
    for problem in (Quadratic(dim=3), WorstCase(dim=3), logistic):
        x = problem.x0() + 0.1
        a = problem.stochastic_grad(x, random_stream(5, "s"))
        b = problem.stochastic_grad(x, random_stream(5, "s"))
        c = problem.stochastic_grad(x, random_stream(6, "s"))
        assert np.array_equal(a, b) and not np.array_equal(a, c)


# -- settings ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("settings, message", [
    ({"step_sise": 0.1}, "unknown async-sgd setting(s) 'step_sise'"),
    ({"method": "adam"}, "method must be one of"),
    ({"runtime": "gpu"}, "runtime must be one of simulator, mpi"),
    ({"n_workers": 0}, "n_workers must be None or an integer >= 1"),
    ({"n_workers": 2.0}, "n_workers must be None or an integer >= 1"),
    ({"tau": "quadratic"}, "tau must be one of"),
    ({"tau": "real"}, "tau 'real' (real computing time) needs the mpi runtime"),
    ({"epsilon": 0}, "epsilon must be None or a number > 0"),
    ({"epsilon": math.nan}, "epsilon must be None or a number > 0"),
    ({"step_size": -0.1}, "step_size must be None or a number > 0"),
    ({"batch": 0}, "batch must be None or an integer >= 1"),
    ({"batch": 2.5}, "batch must be None or an integer >= 1"),
    ({"threshold": 0}, "threshold must be None, an integer >= 1 or inf"),
    ({"threshold": 1.5}, "threshold must be None, an integer >= 1 or inf"),
    ({"stop_computations": 1}, "stop_computations must be True or False"),
    ({"delay_adaptive": "no"}, "delay_adaptive must be True or False"),
    ({"restart": None}, "restart must be True or False"),
    ({"max_steps": -1}, "max_steps must be None or an integer >= 0"),
    ({"max_gradients": 1.5}, "max_gradients must be None or an integer >= 0"),
    ({"max_time": 0}, "max_time must be None or a number > 0"),
    ({"eval_every": 0}, "eval_every must be an integer >= 1"),
    ({"seed": -1}, "seed must be an integer >= 0"),
    ({"time_unit": 0}, "time_unit must be a number > 0"),
    ({"idle_timeout": -1}, "idle_timeout must be a number > 0"),
    ({"log_every": 0}, "log_every must be an integer >= 1"),
    ({"tau": [1.0, -1.0]}, "cannot set up the problem: fixed compute times must be finite and > 0"),
    ({"tau": [1.0, 2.0], "n_workers": 3}, "fixed compute times given for 2 workers only"),
])
def test_bad_settings_raise_a_collective_error_naming_the_problem(settings, message):
    with pytest.raises(CollectiveError) as raised:
        run(**settings)
    assert message in str(raised.value)
    assert list(raised.value.problems) == [0]


def test_times_given_as_a_numpy_array_are_accepted_like_a_list():
    as_list = run(method="asgd", n_workers=2, tau=[1.0, 2.0], max_steps=5, stop_at_epsilon=False, step_size=0.1)
    as_array = run(method="asgd", n_workers=2, tau=np.array([1.0, 2.0]), max_steps=5, stop_at_epsilon=False,
                   step_size=0.1)
    assert np.array_equal(as_list.x, as_array.x) and as_array.info["tau"] == "fixed(1, 2)"


def test_an_unknown_problem_and_the_mpi_runtime_at_one_rank_are_refused():
    with pytest.raises(CollectiveError, match="cannot set up the problem"):
        async_sgd("rosenbrock", comm=SELF)
    with pytest.raises(CollectiveError, match="the mpi runtime needs at least 2 ranks"):
        async_sgd("quadratic", comm=SELF, runtime="mpi")


def test_a_failing_setup_in_the_simulator_is_a_collective_error():
    class NoL(Quadratic):
        def __init__(self):
            super().__init__(dim=3)
            self.L = 0.0

    with pytest.raises(CollectiveError, match="simulation failed"):
        async_sgd(NoL(), comm=SELF, method="asgd", delay_adaptive=True, step_size=0.1, max_steps=3)


@pytest.mark.parametrize("problem", ["logistic", "mlp"])
def test_a_data_set_with_nan_is_refused_before_its_problem_is_estimated(problem):
    """The data problems estimate L, f* and sigma^2 from their data: NaN is refused before, by name."""
    from mpiopt.core.registry import register, unregister

    def with_nan():
        X, y = np.random.default_rng(0).standard_normal((40, 4)), np.arange(40) % 2
        X[3, 2] = np.nan
        return X, y

    register("dataset", "with-nan", with_nan)
    try:
        with pytest.raises(CollectiveError) as raised:
            run(problem, problem_options={"dataset": "with-nan"}, method="asgd", max_steps=3)
    finally:
        unregister("dataset", "with-nan")
    # load_dataset refuses it first (the problem's own check covers data given directly: test_asyncsgd_mpi)
    assert raised.value.problems == {
        0: "cannot set up the problem: rank 0: data set 'with-nan': features contains NaN or inf"}


def test_every_registered_method_runs_with_its_defaults():
    assert set(methods()) >= {"minibatch", "asgd", "rennala", "ringmaster"}
    for method in ("minibatch", "asgd", "rennala", "ringmaster"):
        result = async_sgd("worst-case", comm=SELF, problem_options={"dim": 10, "noise": 1e-4}, method=method,
                           n_workers=6, tau="sqrt", max_steps=200)
        assert result.info["method"] == method and result.info["n_workers"] == 6
        assert result.history["loss"][-1] < result.history["loss"][0]
        assert result.predicted["ringmaster"] == result.predicted["rennala"]
    default = async_sgd(comm=SELF, max_steps=3)
    assert default.info["n_workers"] == 8 and default.info["method"] == "rennala"


# -- the result -------------------------------------------------------------------------------------------------
def test_result_is_json_serializable_and_plots(tmp_path):
    result = run(method="ringmaster", threshold=math.inf, n_workers=3, tau=[1.0, 2.0, 3.0], max_steps=20,
                 stop_at_epsilon=False, trace=True)
    payload = result.to_dict()
    text = json.dumps(payload)
    back = json.loads(text)
    assert back["x"] == pytest.approx(result.x.tolist())
    assert back["info"]["parameters"]["threshold"] == "inf" and back["info"]["settings"]["threshold"] == "inf"
    assert back["info"]["tau"] == "fixed(1, 2, 3)" and back["info"]["settings"]["tau"] == "[1.0, 2.0, 3.0]"
    assert back["status"] == "finished" and back["info"]["stop"] == "max_steps" and back["steps"] == 20
    assert len(back["info"]["trace"]) == result.gradients
    result.save_json(tmp_path / "result.json")
    assert json.loads((tmp_path / "result.json").read_text())["gradients"] == result.gradients
    assert "ringmaster" in str(result) and "max_steps" in str(result)
    pytest.importorskip("matplotlib")
    result.plot(tmp_path / "run.png")
    assert (tmp_path / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_result_history_columns_have_equal_lengths_and_count_consistently():
    result = run(method="rennala", batch=3, restart=False, n_workers=5, tau="exponential", max_steps=40,
                 stop_at_epsilon=False, eval_every=4)
    h = result.history
    assert len({len(column) for column in h.values()}) == 1
    assert h["step"] == list(range(0, 41, 4)) and h["time"] == sorted(h["time"])
    workers = result.info["workers"]
    assert sum(workers["computed"]) == result.gradients
    assert [a + d for a, d in zip(workers["accepted"], workers["discarded"])] == workers["computed"]
    assert sum(workers["accepted"]) == 3 * result.steps


def test_the_shared_loop_drives_any_executor_by_its_contract():
    """engine.drive over a scripted executor: ASGD's steps replayed by hand, a stale arrival skipped, the
    run ended by TIME_UP, and a pause() request ending a session early."""
    from mpiopt.asyncsgd.engine import TIME_UP, drive
    from mpiopt.asyncsgd.runner import Recorder, build_method
    from mpiopt.asyncsgd.settings import AsyncSGDSettings

    problem = Quadratic(dim=3, noise=0.0)
    settings = AsyncSGDSettings(method="asgd", n_workers=2, step_size=0.1, stop_at_epsilon=False)

    class Scripted:
        def __init__(self, method, script, pause_at=None):
            self.method, self.script, self.pause_at = method, list(script), pause_at
            self.gradients, self.computed, self.time, self.started = 0, np.zeros(2, dtype=np.int64), 0.0, []

        def assign(self, plan):
            self.started.extend(range(2) if plan is ALL else plan)

        def clock(self):
            return self.time

        def pause(self):
            return "checkpoint" if self.method.k == self.pause_at else None

        def next_arrival(self):
            item = self.script.pop(0)
            if item is None or item is TIME_UP:
                return item
            worker, self.time = item
            return worker, self.time, self.method.k, problem.grad(self.method.x), 1

    def run(script, pause_at=None):
        method = build_method(settings, problem, 2, 1e-9)
        recorder = Recorder(problem, method, settings, 1e-9, log=False)
        executor = Scripted(method, script, pause_at)
        executor.assign(method.start())
        return method, recorder, executor, drive(executor, recorder)

    method, recorder, executor, ended = run([(0, 1.0), None, (1, 2.0), (0, 2.5), TIME_UP])
    x = problem.x0()
    for _ in range(3):  # the script's arrivals all carry the current step: three plain gradient steps
        x = x - 0.1 * problem.grad(x)
    np.testing.assert_array_equal(method.x, x)
    assert ended is None and recorder.stopped_by == "max_time" and method.k == 3
    assert executor.gradients == 3 and executor.computed.tolist() == [2, 1]
    assert executor.started == [0, 1, 0, 1, 0], "ASGD restarts each arriving worker"
    assert not executor.script, "the loop ran the script to its end"
    method, recorder, executor, ended = run([(0, 1.0), (1, 2.0), (0, 3.0)], pause_at=2)
    assert ended == "checkpoint" and method.k == 2 and len(executor.script) == 1
