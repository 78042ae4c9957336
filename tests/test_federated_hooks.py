"""DPHook (DP-FedAvg) and SecureAggregationHook in ``run_federated``: clipping, noise, epsilon per round,
masked uploads whose sum is exact, dropouts after masking, the same model at any rank count, the CLI.

MPI tests run at any rank count (the serial pass at one rank, ``mpiexec -n K python -m pytest --only-mpi``
at K); references are a single-process run (COMM_SELF), the run without the hook, privacy.DPAccountant
and privacy.add_gaussian_noise.
"""
import csv
import importlib.util
import json
import math

import numpy as np
import pytest
from mpi4py import MPI
from scipy import stats

from conftest import run_mpi
from mpiopt.core.comm import CollectiveError
from mpiopt.core.random import random_stream
from mpiopt.data import load_dataset
from mpiopt.federated import DPHook, Hook, SecureAggregationHook, partition, run_federated, split_clients
from mpiopt.federated.privacy import DPAccountant, add_gaussian_noise
from mpiopt.models import get_model

needs_dp_accounting = pytest.mark.skipif(importlib.util.find_spec("dp_accounting") is None,
                                         reason="dp-accounting is not installed (pip install 'mpiopt[privacy]')")

DATA = load_dataset("digits", MPI.COMM_SELF)
X, Y = DATA.X_train[:600], DATA.y_train[:600]
PARTS = split_clients(X, Y, partition("quantity", Y, 12, 3))  # unequal n_k: the weights matter
COMMON = dict(fraction=0.5, rounds=4, lr=0.05, seed=2)
CLIP, NOISE, DELTA = 0.5, 1.1, 1e-5
FIXED_POINT_TOLERANCE = 1e-8  # each round is off by at most 2^-33 per coordinate, well below this


def softmax():
    return get_model("softmax", n_features=64, n_classes=10, alpha=1e-3)


class Recorder(Hook):
    """A hook that keeps the updates it is given, on the client's rank (after the hooks before it)."""

    def __init__(self):
        self.updates = {}

    def transform_update(self, update, client, round):
        self.updates[(round, client)] = update
        return update


# -- DP-FedAvg --------------------------------------------------------------------------------------------
@needs_dp_accounting
def test_dp_clips_every_update_and_adds_the_seeded_noise_to_the_sum_over_the_expected_count():
    recorder, dp = Recorder(), DPHook(CLIP, NOISE, DELTA, seed=9)
    start = softmax().init_params(2)
    result = run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF, hooks=[dp, recorder], fraction=0.5, rounds=1,
                           lr=0.5, seed=2)
    clipped = [update.delta for update in recorder.updates.values()]
    assert len(clipped) == 6 and max(dp.clipped_norms.values()) > CLIP  # some updates were clipped
    assert all(np.linalg.norm(delta) <= CLIP * (1 + 1e-12) for delta in clipped)
    sampled = 6  # 0.5 of the 12 clients
    noise = (result.params - start) * sampled - np.sum(clipped, axis=0)
    np.testing.assert_allclose(noise, add_gaussian_noise(np.zeros_like(start), CLIP, NOISE, 9, 0), atol=1e-12)
    std, n = NOISE * CLIP, noise.size
    assert abs(noise.mean()) < 5 * std / math.sqrt(n)
    assert abs(noise.var(ddof=1) - std ** 2) < 5 * std ** 2 * math.sqrt(2 / (n - 1))


@needs_dp_accounting
@pytest.mark.mpi
@pytest.mark.many_ranks  # the clients' ranks change with the rank count
@pytest.mark.timeout(60)
@pytest.mark.parametrize("client_sampling", ["fixed", "poisson"])
def test_dp_epsilon_per_round_is_the_accountants_and_the_model_is_the_same_at_any_rank_count(comm, client_sampling):
    options = dict(COMMON, dropout=0.2, stragglers=0.3, fraction=0.25, client_sampling=client_sampling)
    result = run_federated(softmax(), PARTS, "fedprox", comm, hooks=[DPHook(CLIP, NOISE, DELTA, seed=4)], **options)
    single = run_federated(softmax(), PARTS, "fedprox", MPI.COMM_SELF, hooks=[DPHook(CLIP, NOISE, DELTA, seed=4)],
                           **options)
    assert np.array_equal(result.params, single.params)
    accountant = (DPAccountant(NOISE, delta=DELTA, sample_size=3, population=12) if client_sampling == "fixed"
                  else DPAccountant(NOISE, 0.25, DELTA))  # 0.25 of 12 without replacement, or each with q = 0.25
    assert result.history["epsilon"] == [accountant.epsilon(rounds) for rounds in range(1, 5)]
    assert all(a < b for a, b in zip(result.history["epsilon"], result.history["epsilon"][1:]))
    assert sum(result.history["dropped"]) + sum(result.history["stragglers"]) > 0  # they still count as rounds


def replace_one_epsilon(noise_multiplier, sample_size, population, rounds, delta):
    """dp-accounting called directly: m of K sampled without replacement, replace one client; its RDP takes the
    noise over the sensitivity, which is 2 S for a sum of clipped updates under replace-one."""
    import dp_accounting
    import dp_accounting.rdp
    accountant = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        population, sample_size, dp_accounting.GaussianDpEvent(noise_multiplier / 2)), rounds)
    return accountant.get_epsilon(delta)


# fraction K below 1 (the K = 20, C = 0.01: 1 client, rate 0.05), non-integer above 1 (K = 30, C = 0.05:
# round(1.5) = 2; K = 14, C = 0.3: round(4.2) = 4)
@needs_dp_accounting
@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("n_clients, fraction, sampled", [(20, 0.01, 1), (30, 0.05, 2), (14, 0.3, 4)])
def test_dp_accounts_and_scales_by_the_number_of_clients_really_sampled(comm, n_clients, fraction, sampled):
    parts = split_clients(X, Y, partition("iid", Y, n_clients, 1))
    recorder, dp = Recorder(), DPHook(CLIP, 1.0, DELTA, seed=3)
    start = softmax().init_params(0)
    result = run_federated(softmax(), parts, "fedavg", comm, hooks=[dp, recorder], fraction=fraction, rounds=1,
                           lr=0.5, seed=0)
    assert result.history["sampled"] == [sampled]
    # the update is (the sum of the clipped updates + the noise) / (the clients sampled), on every rank
    mine = [update.delta for update in recorder.updates.values()]
    clipped_sum = np.sum(comm.allgather(np.sum(mine, axis=0) if mine else np.zeros_like(start)), axis=0)
    noise = add_gaussian_noise(np.zeros_like(start), CLIP, 1.0, 3, 0)
    np.testing.assert_allclose(result.params - start, (clipped_sum + noise) / sampled, rtol=0, atol=1e-12)
    assert result.history["epsilon"] == [replace_one_epsilon(1.0, sampled, n_clients, 1, DELTA)]
    assert dp.sampled == sampled


def poisson_epsilon(noise_multiplier, sampling_rate, rounds, delta):
    """dp-accounting called directly: each client in a round with probability q (Poisson), add or remove one
    client, so the sum of clipped updates has sensitivity S and the noise multiplier is z."""
    import dp_accounting
    import dp_accounting.rdp
    accountant = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        sampling_rate, dp_accounting.GaussianDpEvent(noise_multiplier)), rounds)
    return accountant.get_epsilon(delta)


class Directions(Hook):
    """A hook after DPHook that keeps each round's server direction Delta, rounds without clients included."""
    transforms_empty_rounds = True

    def __init__(self):
        self.deltas = []

    def transform_aggregate(self, delta, round, updates):
        self.deltas.append(delta.copy())
        return delta


# q K below 1 (0.2: most rounds sample no client), non-integer above 1 (1.5, 4.2)
@needs_dp_accounting
@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("n_clients, fraction", [(20, 0.01), (30, 0.05), (14, 0.3)])
def test_dp_with_poisson_sampling_accounts_at_q_add_or_remove_and_divides_by_q_k(comm, n_clients, fraction):
    parts = split_clients(X, Y, partition("iid", Y, n_clients, 1))
    recorder, dp, directions, rounds = Recorder(), DPHook(CLIP, 1.0, DELTA, seed=3), Directions(), 3
    start = softmax().init_params(0)
    result = run_federated(softmax(), parts, "fedavg", comm, hooks=[dp, recorder, directions], fraction=fraction,
                           client_sampling="poisson", rounds=rounds, lr=0.5, seed=0)
    assert result.history["epsilon"] == [poisson_epsilon(1.0, fraction, t, DELTA) for t in range(1, rounds + 1)]
    assert dp.denominator == fraction * n_clients and dp.accountant.neighbouring == "add or remove one"
    # each round's Delta is (the sum of the clipped updates + the round's seeded noise) / (q K), on every rank,
    # whoever was sampled (none, in most rounds at q K = 0.2)
    params = start
    for round, delta in enumerate(directions.deltas):
        mine = [update.delta for (t, _), update in recorder.updates.items() if t == round]
        clipped_sum = np.sum(comm.allgather(np.sum(mine, axis=0) if mine else np.zeros_like(start)), axis=0)
        noise = 1.0 * CLIP * random_stream(3, "dp-noise", round).standard_normal(start.size)
        np.testing.assert_allclose(delta, (clipped_sum + noise) / (fraction * n_clients), rtol=0, atol=1e-12)
        params = params + delta
    assert len(directions.deltas) == rounds and np.array_equal(result.params, params)
    reporting = [sum(1 for (t, _) in recorder.updates if t == round) for round in range(rounds)]
    assert [sum(counts) for counts in zip(*comm.allgather(reporting))] == result.history["sampled"]
    if fraction * n_clients > 1:
        assert sum(result.history["sampled"]) > 0


@needs_dp_accounting
def test_dp_with_poisson_sampling_adds_the_noise_in_a_round_that_sampled_no_client_as_algorithm_1_does():
    # McMahan et al. 2018, Algorithm 1: theta_{t+1} = theta_t + Delta_{t+1} + N(0, sigma^2 I), sigma = z S / (q W)
    # with W = K (unit weights), whatever the round's sample C^t is, so an empty round moves the model by the noise
    options = dict(fraction=0.001, client_sampling="poisson", rounds=3, lr=0.05, seed=9)
    plain = run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF, **options)
    private = run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF, hooks=[DPHook(CLIP, NOISE, DELTA, seed=4)],
                            **options)
    start = softmax().init_params(9)
    assert private.history["sampled"] == [0, 0, 0] and plain.history["sampled"] == [0, 0, 0]
    assert np.array_equal(plain.params, start)
    assert plain.history["note"] == ["no client was sampled; the model is kept"] * 3
    expected = start
    for round in range(3):
        expected = expected + NOISE * CLIP * random_stream(4, "dp-noise", round).standard_normal(start.size) / (
            0.001 * len(PARTS))
    np.testing.assert_allclose(private.params, expected, rtol=0, atol=1e-9)
    assert private.history["note"] == ["no client was sampled; the model takes DPHook's step alone"] * 3
    assert private.history["epsilon"] == [poisson_epsilon(NOISE, 0.001, t, DELTA) for t in (1, 2, 3)]
    assert private.history["loss"] == [None] * 3


@needs_dp_accounting
def test_dp_and_secure_aggregation_refuse_fednova_on_every_rank():
    for hook in (DPHook(CLIP, NOISE, DELTA), SecureAggregationHook(1)):
        with pytest.raises(CollectiveError, match="fednova does not"):
            run_federated(softmax(), PARTS, "fednova", MPI.COMM_SELF, hooks=[hook], **COMMON)
    with pytest.raises(CollectiveError, match="at most one hook"):
        run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF, hooks=[SecureAggregationHook(1)] * 2, **COMMON)
    with pytest.raises(CollectiveError, match="transforms updates after .* put it before"):
        run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF,
                      hooks=[SecureAggregationHook(1), DPHook(CLIP, NOISE, DELTA)], **COMMON)


# -- secure aggregation -----------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.many_ranks  # the clients' ranks change with the rank count
@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", ["fedavg", "fedprox"])
def test_secure_aggregation_gives_the_unmasked_model_at_any_rank_count_with_drops_after_masking(comm, strategy):
    options = dict(COMMON, dropout=0.2, stragglers=0.3)
    plain = run_federated(softmax(), PARTS, strategy, MPI.COMM_SELF, **options)
    secure = run_federated(softmax(), PARTS, strategy, comm, hooks=[SecureAggregationHook(11)], **options)
    np.testing.assert_allclose(secure.params, plain.params, rtol=0, atol=FIXED_POINT_TOLERANCE)
    assert secure.history["participants"] == plain.history["participants"]

    hook = SecureAggregationHook(11, drop_after_masking=0.3)
    dropping = run_federated(softmax(), PARTS, strategy, comm, hooks=[hook], **options)
    single = run_federated(softmax(), PARTS, strategy, MPI.COMM_SELF, hooks=[SecureAggregationHook(11, 32, 0.3)],
                           **options)
    assert np.array_equal(dropping.params, single.params)
    assert sum(dropping.history["dropped"]) > sum(plain.history["dropped"])  # some dropped after masking

    class WithoutTheLateDrops(Hook):  # the reference: the same clients never sent, no masks to recover
        def transform_update(self, update, client, round):
            return None if (round, client) in late else update

    late = {(round, k) for round in range(options["rounds"]) for k in range(len(PARTS))
            if random_stream(11, "drop-after-masking", round, k).random() < 0.3}
    reference = run_federated(softmax(), PARTS, strategy, MPI.COMM_SELF, hooks=[WithoutTheLateDrops()], **options)
    np.testing.assert_allclose(dropping.params, reference.params, rtol=0, atol=FIXED_POINT_TOLERANCE)


def test_what_the_aggregator_sees_of_each_update_is_uniform_and_uncorrelated_while_the_sum_is_exact():
    recorder, hook = Recorder(), SecureAggregationHook(5, drop_after_masking=0.2)
    options = dict(COMMON, rounds=1, fraction=1.0)
    start = softmax().init_params(2)
    result = run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF, hooks=[recorder, hook], **options)
    plain = {client: update.weight * update.delta for (_, client), update in recorder.updates.items()}
    assert hook.dropped_after_masking and len(hook.seen) >= 2
    d = start.size
    for client, words in hook.seen.items():
        uniform = words.astype(np.float64) / 2.0 ** 64
        assert stats.kstest(uniform, "uniform").pvalue > 1e-4
        correlation = np.corrcoef(uniform, plain[client])[0, 1]
        assert abs(correlation) < 5 / math.sqrt(d), (client, correlation)
    arrived = [client for client in plain if client in hook.seen]
    weights = {client: recorder.updates[(0, client)].weight for client in arrived}
    exact = np.sum([plain[k] for k in arrived], axis=0) / sum(weights.values())
    assert np.max(np.abs((result.params - start) - exact)) < len(arrived) * 2.0 ** -33


# -- the CLI ----------------------------------------------------------------------------------------------
@needs_dp_accounting
def test_cli_federated_with_dp_and_secure_aggregation_at_two_ranks_logs_epsilon_each_round(tmp_path):
    output, table = tmp_path / "fed.json", tmp_path / "fed.csv"
    completed = run_mpi(2, "-m", "mpiopt", "federated", "--clients", "12", "--fraction", "0.25", "--rounds", "3",
                        "--dp-clip", "0.5", "--dp-noise", "1.1", "--dp-delta", "1e-5", "--secure",
                        "--drop-after-masking", "0.2", "--output", str(output), "--csv", str(table))
    assert completed.returncode == 0, completed.stderr
    header = [line for line in completed.stdout.splitlines() if line.split()[:1] == ["round"]]
    assert len(header) == 1 and header[0].split()[-1] == "epsilon"
    assert "_compute_log_a_frac" not in completed.stdout + completed.stderr
    accountant = DPAccountant(1.1, delta=1e-5, sample_size=3, population=12)
    expected = [accountant.epsilon(rounds) for rounds in (1, 2, 3)]
    assert json.loads(output.read_text())["history"]["epsilon"] == pytest.approx(expected, rel=1e-12)
    assert [float(row["epsilon"]) for row in csv.DictReader(open(table))] == pytest.approx(expected, rel=1e-9)
    bad = run_mpi(2, "-m", "mpiopt", "federated", "--clients", "12", "--rounds", "1", "--drop-after-masking",
                  "0.2", "--output", str(tmp_path / "bad.json"))
    assert bad.returncode == 2 and bad.stderr.count("--drop-after-masking goes with --secure") == 1, bad.stderr
