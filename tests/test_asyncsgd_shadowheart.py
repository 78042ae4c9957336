"""Shadowheart SGD against its definition and algorithm box, on the simulator and MPI ranks.

References outside the code under test: the equilibrium equation solved here by bisection on its own form
s = [sum_i 1/(2 tau omega + 4 tau h omega S / s + 2 h S)]^(-1), one worker's closed form, brute force over
every subset of a few workers, and the paper's round (b_i gradients, m_i Random-K messages, the weights
w_i, the normalised step) transcribed below and driven by a loop of its own.
"""
import itertools
import math

import numpy as np
import pytest
from mpi4py import MPI

from conftest import check_async_sgd_resumes_bit_for_bit
from mpiopt.asyncsgd import async_sgd, get_problem
from mpiopt.asyncsgd.methods.shadowheart import equilibrium_root, equilibrium_time
from mpiopt.core.comm import CollectiveError
from mpiopt.core.random import random_stream

SELF = MPI.COMM_SELF


def paper_root(h, tau, omega, noise):
    """s*(j) by bisection on s - [sum 1/(2 tau omega + 4 tau h omega S/s + 2 h S)]^(-1) = 0 (increasing in s)."""
    h, tau = np.asarray(h, float), np.asarray(tau, float)

    def gap(s):
        terms = 2 * tau * omega + 4 * tau * h * omega * noise / s + 2 * h * noise
        if np.any(terms == 0):
            return s  # the bracket is 0: s* = 0
        return s - 1 / np.sum(1 / terms)

    lo, hi = 1e-300, 1.0
    while gap(hi) < 0:
        hi *= 2
    for _ in range(2000):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return hi


def brute_force_time(h, tau, omega, noise):
    """min over every nonempty subset of max{max_i max(h_i, tau_i), s*(subset)}."""
    n, best = len(h), math.inf
    for size in range(1, n + 1):
        for subset in itertools.combinations(range(n), size):
            sub = list(subset)
            best = min(best, max(max(max(h[i], tau[i]) for i in sub),
                                 paper_root(np.take(h, sub), np.take(tau, sub), omega, noise)))
    return best


CASES = [(seed, n, omega, noise) for seed, n in [(0, 1), (1, 3), (2, 5), (3, 7)]
         for omega, noise in [(9.0, 10.0), (99.0, 1.0), (0.5, 100.0), (3.0, 0.0), (0.0, 5.0)]]


@pytest.mark.parametrize("seed, n, omega, noise", CASES)
def test_the_equilibrium_time_is_the_papers_definition(seed, n, omega, noise):
    rng = np.random.default_rng(seed)
    h, tau = rng.uniform(0.1, 1.0, n), rng.uniform(0.01, 2.0, n)
    assert equilibrium_root(h, tau, omega, noise) == pytest.approx(paper_root(h, tau, omega, noise), rel=1e-12)
    t_star, j_star = equilibrium_time(h, tau, omega, noise)
    assert (t_star, j_star) == equilibrium_time(h, tau, omega, noise, exhaustive=True)
    assert t_star == pytest.approx(brute_force_time(h, tau, omega, noise), rel=1e-12)
    assert 1 <= j_star <= n


def test_one_worker_and_the_degenerate_equations_in_closed_form():
    h, tau, omega, noise = 0.7, 0.3, 4.0, 10.0
    a, c = 2 * tau * omega + 2 * h * noise, 4 * tau * h * omega * noise
    assert equilibrium_root([h], [tau], omega, noise) == pytest.approx((a + math.sqrt(a * a + 4 * c)) / 2, rel=1e-15)
    h, tau = np.array([0.2, 0.5, 0.9]), np.array([0.4, 0.1, 0.3])
    # no noise: s* = [sum 1/(2 tau omega)]^(-1); no compression: [sum 1/(2 h S)]^(-1); neither: 0
    assert equilibrium_root(h, tau, 3.0, 0.0) == pytest.approx(1 / np.sum(1 / (6 * tau)), rel=1e-15)
    assert equilibrium_root(h, tau, 0.0, 7.0) == pytest.approx(1 / np.sum(1 / (14 * h)), rel=1e-15)
    assert equilibrium_root(h, tau, 0.0, 0.0) == 0.0
    assert equilibrium_time(h, tau, 0.0, 0.0) == (0.4, 1)  # the smallest max(h, tau)


def test_the_binary_search_over_j_matches_every_j_on_many_workers():
    rng = np.random.default_rng(5)
    for n in (50, 400):
        h, tau = rng.uniform(0.1, 1, n), np.sqrt(np.arange(1, n + 1)) / 30
        for noise in (1.0, 10.0, 100.0):
            assert equilibrium_time(h, tau, 29.0, noise) == equilibrium_time(h, tau, 29.0, noise, exhaustive=True)


# -- the algorithm box, transcribed ---------------------------------------------------------------------------
COMPUTE = [0.5, 1.0, 1.7, 3.0, 0.8]
UPLOAD = [0.05, 0.2, 0.1, 0.4, 40.0]  # per coordinate; worker 5's link is too slow to take part at K = 3
DIM, K, SEED, EPS = 12, 3, 11, 0.05


def transcribed_run(rounds, compute, upload, noise_var, step_size=None):
    """Shadowheart's rounds as the paper writes them, with the test's own equilibrium time."""
    problem = get_problem("quadratic", dim=DIM, noise=noise_var, seed=SEED)
    h, tau = np.array(compute), K * np.array(upload)
    omega, S = DIM / K - 1, problem.sigma2 / EPS
    t_star = brute_force_time(h, tau, omega, S)
    b, m = np.floor(t_star / h).astype(int), np.floor(t_star / tau).astype(int)
    taking = (b > 0) & (m > 0)
    b, m = np.where(taking, b, 0), np.where(taking, m, 0)
    w = np.where(taking, 1 / (b * omega + omega * S + m * S), 0.0)
    gamma = step_size or 1 / (2 * problem.L)
    noise = [random_stream(SEED, "asyncsgd-gradient", i) for i in range(len(h))]
    x, time = problem.x0(), []
    for k in range(rounds):
        total = np.zeros(DIM)
        for i in np.flatnonzero(taking):
            g = problem.stochastic_grad(x, noise[i])
            for _ in range(b[i] - 1):
                g = g + problem.stochastic_grad(x, noise[i])
            sent = np.zeros(DIM)
            for j in range(m[i]):
                idx = np.sort(random_stream(SEED, "randomk", f"asyncsgd-w{i}-k{k}", j).choice(DIM, K, replace=False))
                sent[idx] += g[idx] * (DIM / K)
            total += w[i] * sent
        x = x - gamma * (total / np.sum(w * m * b))
        time.append(max(b[i] * h[i] + m[i] * tau[i] for i in np.flatnonzero(taking)))
    return x, math.fsum(time), b, m, t_star


@pytest.mark.parametrize("noise_var", [1.0, 0.05])
def test_shadowheart_is_its_algorithm_box(noise_var):
    rounds = 15
    expected, end, b, m, t_star = transcribed_run(rounds, COMPUTE, UPLOAD, noise_var)
    assert b[-1] * m[-1] == 0 and np.count_nonzero(b * m) >= 3  # the slow link sits out, not the fast ones
    result = async_sgd("quadratic", comm=SELF, problem_options={"dim": DIM, "noise": noise_var}, seed=SEED,
                       method="shadowheart", coordinates=K, tau=COMPUTE, upload=UPLOAD, n_workers=5, epsilon=EPS,
                       max_steps=rounds, stop_at_epsilon=False)
    np.testing.assert_array_equal(result.x, expected)
    assert result.steps == rounds and result.time == pytest.approx(end, rel=1e-13)
    assert result.info["parameters"]["t_star"] == pytest.approx(t_star, rel=1e-12)
    assert result.info["workers"]["accepted"] == list(b * rounds)
    assert result.info["workers"]["computed"][-1] == 0 and result.gradients == int(np.sum(b)) * rounds
    L, Delta = result.info["problem"]["L"], result.info["problem"]["Delta"]
    assert result.predicted["shadowheart"] == pytest.approx(t_star * L * Delta / EPS, rel=1e-12)
    assert result.predicted["t_star"] == pytest.approx(t_star, rel=1e-12)


def test_shadowheart_beats_minibatch_when_sending_is_slow():
    """A slow link makes the dense methods pay d coordinates a step; Shadowheart sends K of them."""
    common = dict(problem_options={"dim": 50, "noise": 0.01}, n_workers=8, tau="sqrt", upload="sqrt",
                  upload_scale=0.1, epsilon=1e-3, seed=2, max_gradients=400000)
    shadowheart = async_sgd("worst-case", comm=SELF, method="shadowheart", **common)
    minibatch = async_sgd("worst-case", comm=SELF, method="minibatch", **common)
    assert shadowheart.status == minibatch.status == "converged"
    assert shadowheart.time_to_epsilon < minibatch.time_to_epsilon
    # the baselines' predicted times include their dense round trips: the predicted ordering is the same
    assert shadowheart.predicted["shadowheart"] < minibatch.predicted["minibatch"]


def test_shadowheart_without_upload_times_is_refused_with_the_reason():
    with pytest.raises(CollectiveError, match="needs upload times per coordinate"):
        async_sgd("quadratic", comm=SELF, method="shadowheart", n_workers=3, max_steps=2)
    with pytest.raises(CollectiveError, match="coordinates K = 20 is more than d = 10"):
        async_sgd("quadratic", comm=SELF, problem_options={"dim": 10}, method="shadowheart", coordinates=20,
                  upload="constant", n_workers=3, max_steps=2)
    with pytest.raises(CollectiveError, match="communication times must be fixed"):
        async_sgd("quadratic", comm=SELF, method="shadowheart", upload="exponential", n_workers=3, max_steps=2)


def test_a_checkpointed_shadowheart_run_resumes_bit_for_bit(tmp_path):
    check_async_sgd_resumes_bit_for_bit(
        tmp_path, "quadratic", get_problem("quadratic", dim=DIM, noise=1.0, seed=SEED), "stochastic_grad", 200,
        problem_options={"dim": DIM, "noise": 1.0}, seed=SEED, method="shadowheart", coordinates=K,
        tau="lognormal", upload=UPLOAD, n_workers=5, epsilon=EPS, stop_at_epsilon=False, max_steps=30)


# -- on MPI ranks: the messages travel, the same iterates ------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(120)
def test_shadowheart_on_mpi_ranks_gives_the_simulators_iterates(comm):
    if comm.size < 2:
        pytest.skip("the mpi runtime needs a server and a worker")
    n = comm.size - 1
    compute = COMPUTE[:n]
    upload = UPLOAD[:n - 1] + [10000.0] if n > 1 else UPLOAD[:1]  # the last link is 10^4 times slower
    common = dict(problem_options={"dim": DIM, "noise": 1.0}, seed=SEED, method="shadowheart", coordinates=K,
                  tau=compute, upload=upload, epsilon=EPS, max_steps=6, stop_at_epsilon=False)
    simulated = async_sgd("quadratic", comm=SELF, n_workers=n, **common)
    run = async_sgd("quadratic", comm=comm, runtime="mpi", time_unit=0.002, **common)
    assert run.steps == simulated.steps == 6
    np.testing.assert_array_equal(run.x, simulated.x)
    assert run.info["workers"]["accepted"] == simulated.info["workers"]["accepted"]
    if n > 1:
        assert run.info["workers"]["computed"][-1] == 0  # the slow link never takes part: nobody waits for it


# -- the compressed baselines: Minibatch SGD with Random-K or QSGD uploads ------------------------------------
@pytest.mark.parametrize("compressor", ["randomk", "qsgd8", "qsgd4"])
def test_compressed_minibatch_is_minibatch_with_its_uploads_compressed(compressor):
    from mpiopt.compression import get_compressor
    n, rounds, d = 4, 6, 40
    compute, upload = [1.0, 1.25, 1.5, 2.0], [0.01, 0.02, 0.03, 0.04]
    result = async_sgd("quadratic", comm=SELF, problem_options={"dim": d, "noise": 0.5}, seed=SEED, method="minibatch",
                       compressor=compressor, coordinates=5, tau=compute, upload=upload, n_workers=n,
                       max_steps=rounds, stop_at_epsilon=False)
    problem = get_problem("quadratic", dim=d, noise=0.5, seed=SEED)
    noise = [random_stream(SEED, "asyncsgd-gradient", i) for i in range(n)]
    x, gamma, end = problem.x0(), result.info["parameters"]["step_size"], 0.0
    for k in range(rounds):
        total = np.zeros(d)
        for i in range(n):  # they finish in worker order
            g = problem.stochastic_grad(x, noise[i])
            if compressor == "randomk":
                idx = np.sort(random_stream(SEED, "randomk", f"asyncsgd-w{i}-k{k}", 0).choice(d, 5, replace=False))
                decoded, words = np.zeros(d), 5
                decoded[idx] += g[idx] * (d / 5)
            else:
                quantizer = get_compressor("qsgd", bits=int(compressor[-1]), seed=SEED, worker=i)
                payload, ctx = quantizer.compress(g, name=f"asyncsgd-k{k}", step=0)
                decoded, words = quantizer.decompress(payload, ctx), ctx.payload_bytes / 8
            total += decoded
        x = x - gamma * (total / n)
        end += max(compute[i] + upload[i] * words for i in range(n))  # K values, or the QSGD payload's words
    np.testing.assert_array_equal(result.x, x)
    assert result.time == pytest.approx(end, rel=1e-12)
    assert result.info["parameters"]["compressor"] == compressor
