"""Client-level DP (clipping, noise, accountant) and pairwise-masked secure aggregation."""
import importlib.util
import logging
import math

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq
from scipy.special import gammaln, logsumexp

from mpiopt.federated.privacy import DPAccountant, add_gaussian_noise, clip_update, privacy_problem
from mpiopt.federated.secure import (FRACTION_BITS, from_ring, mask_update, pair_seed, ring_sum, to_ring,
                                     unmask_sum)

needs_dp_accounting = pytest.mark.skipif(importlib.util.find_spec("dp_accounting") is None,
                                         reason="dp-accounting is not installed (pip install 'mpiopt[privacy]')")

SESSION_SEED, ROUND = 1234, 7


# ---- clipping and noise -------------------------------------------------------------------------------

def test_clip_update_scales_to_the_clip_norm_and_reports_the_norm():
    update = np.array([3.0, 4.0])
    clipped, norm = clip_update(update, 1.0)
    assert norm == pytest.approx(5.0)
    assert np.linalg.norm(clipped) == pytest.approx(1.0)
    np.testing.assert_allclose(clipped, update / 5.0)
    np.testing.assert_array_equal(update, [3.0, 4.0])  # the input is not modified


def test_clip_update_leaves_an_update_within_the_ball_unchanged():
    rng = np.random.default_rng(0)
    for _ in range(20):
        update = rng.standard_normal(50)
        clip_norm = rng.uniform(0.5, 15.0)
        clipped, norm = clip_update(update, clip_norm)
        assert np.linalg.norm(clipped) <= clip_norm * (1 + 1e-12)
        if norm <= clip_norm:
            np.testing.assert_array_equal(clipped, update)
    clipped, norm = clip_update(np.zeros(3), 1.0)
    assert norm == 0 and not clipped.any()


def test_add_gaussian_noise_has_std_noise_multiplier_times_clip_norm_and_is_the_same_on_every_call():
    aggregate = np.full(200_000, 3.0)
    noisy = add_gaussian_noise(aggregate, clip_norm=0.5, noise_multiplier=1.2, seed=5, round=3)
    noise = noisy - aggregate
    expected_std, n = 0.6, noise.size
    assert abs(noise.mean()) < 5 * expected_std / math.sqrt(n)
    # the sample variance's standard error is std^2 sqrt(2 / (n - 1))
    assert abs(noise.var(ddof=1) - expected_std ** 2) < 5 * expected_std ** 2 * math.sqrt(2 / (n - 1))
    assert stats.kstest(noise / expected_std, "norm").pvalue > 1e-3
    np.testing.assert_array_equal(noisy, add_gaussian_noise(aggregate, 0.5, 1.2, seed=5, round=3))
    assert not np.array_equal(noisy, add_gaussian_noise(aggregate, 0.5, 1.2, seed=5, round=4))


def test_privacy_problem_names_the_invalid_setting():
    assert privacy_problem(1.0, 1.1, 1e-5, 0.01) is None
    assert privacy_problem(1.0, 0.0, 1e-5) is None
    assert "clip_norm must be a finite number > 0, got 0" in privacy_problem(0, 1.1, 1e-5)
    assert "noise_multiplier must be a finite number >= 0, got -1" in privacy_problem(1.0, -1, 1e-5)
    assert "delta must be in (0, 1), got 1" in privacy_problem(1.0, 1.1, 1)
    assert "sampling_rate must be in (0, 1], got 1.5" in privacy_problem(1.0, 1.1, 1e-5, 1.5)
    with pytest.raises(ValueError, match="clip_norm"):
        clip_update(np.ones(2), -1.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        add_gaussian_noise(np.ones(2), 1.0, float("nan"), seed=0, round=0)


# ---- accountant ---------------------------------------------------------------------------------------

def rdp_epsilon_integer_orders(noise_multiplier, sampling_rate, rounds, delta, max_order=256):
    """Independent reference: RDP of the Poisson-sampled Gaussian at integer orders (Mironov, Talwar, Zhang
    2019, Sec. 3.3: A_a = sum_k C(a, k) (1-q)^(a-k) q^k exp((k^2 - k) / (2 z^2))), composed over the rounds and
    converted with eps = T rdp + log(1 - 1/a) - (log delta + log a) / (a - 1) (Canonne, Kamath, Steinke 2020)."""
    best = math.inf
    for order in range(2, max_order + 1):
        k = np.arange(order + 1)
        log_terms = (gammaln(order + 1) - gammaln(k + 1) - gammaln(order - k + 1)
                     + (order - k) * math.log1p(-sampling_rate) + k * math.log(sampling_rate)
                     + (k * k - k) / (2 * noise_multiplier ** 2))
        rdp = logsumexp(log_terms) / (order - 1)
        best = min(best, rounds * rdp + math.log1p(-1 / order) - (math.log(delta) + math.log(order)) / (order - 1))
    return best


@needs_dp_accounting
@pytest.mark.parametrize("noise_multiplier, sampling_rate, rounds", [(1.1, 0.01, 1000), (4.0, 0.01, 10_000)])
def test_rdp_accountant_matches_an_independent_integer_order_rdp_computation(noise_multiplier, sampling_rate,
                                                                            rounds):
    epsilon = DPAccountant(noise_multiplier, sampling_rate, 1e-5).epsilon(rounds)
    reference = rdp_epsilon_integer_orders(noise_multiplier, sampling_rate, rounds, 1e-5)
    # dp-accounting also uses fractional orders, so it may only be (slightly) lower
    assert epsilon <= reference * (1 + 1e-9)
    assert epsilon == pytest.approx(reference, rel=0.02)


@needs_dp_accounting
def test_accountant_is_below_abadi_et_al_moments_accountant_value():
    # Abadi et al. 2016, Sec. 3.1: q = 0.01, sigma = 4, delta = 1e-5, T = 10000 gives epsilon ~ 1.26 with the
    # moments accountant; RDP with the tighter conversion and PLD must not be looser, nor far below
    rdp = DPAccountant(4.0, 0.01, 1e-5).epsilon(10_000)
    pld = DPAccountant(4.0, 0.01, 1e-5, method="pld").epsilon(10_000)
    assert 0.8 < pld <= rdp <= 1.26


@needs_dp_accounting
def test_pld_accountant_is_exact_for_the_unsampled_gaussian_mechanism():
    # q = 1: T rounds of noise z are the Gaussian mechanism with mu = sqrt(T) / z (Balle & Wang 2018's exact delta)
    noise_multiplier, rounds, delta = 2.0, 50, 1e-5
    mu = math.sqrt(rounds) / noise_multiplier
    exact = brentq(lambda eps: stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
                   - delta, 0, 100)
    assert DPAccountant(noise_multiplier, 1.0, delta, method="pld").epsilon(rounds) == pytest.approx(exact, rel=1e-3)
    assert DPAccountant(noise_multiplier, 1.0, delta).epsilon(rounds) >= exact


@needs_dp_accounting
def test_epsilon_grows_with_rounds_and_sampling_rate_and_falls_with_noise():
    accountant = DPAccountant(1.1, 0.01, 1e-5)
    by_rounds = [accountant.epsilon(rounds) for rounds in (0, 1, 10, 100, 1000)]
    assert by_rounds[0] == 0 and all(a < b for a, b in zip(by_rounds, by_rounds[1:]))
    assert accountant.epsilon(100) == DPAccountant(1.1, 0.01, 1e-5).epsilon(100)  # going back recomputes
    by_rate = [DPAccountant(1.1, rate, 1e-5).epsilon(100) for rate in (0.001, 0.01, 0.1)]
    assert by_rate[0] < by_rate[1] < by_rate[2]
    by_noise = [DPAccountant(noise, 0.01, 1e-5).epsilon(100) for noise in (0.8, 1.1, 2.0)]
    assert by_noise[0] > by_noise[1] > by_noise[2]
    assert DPAccountant(0.0, 0.01, 1e-5).epsilon(5) == math.inf


@needs_dp_accounting
def test_accountant_describes_a_round_and_rejects_bad_settings():
    line = DPAccountant(1.1, 0.01, 1e-5).describe(1000)
    assert line == "round 1000: (epsilon=1.712, delta=1e-05)-DP [rdp, z=1.1, Poisson q=0.01, add or remove one]"
    with pytest.raises(ValueError, match="sampling_rate must be in"):
        DPAccountant(1.1, 0.0, 1e-5)
    with pytest.raises(ValueError, match="method must be one of rdp, pld"):
        DPAccountant(1.1, 0.01, 1e-5, method="gdp")
    with pytest.raises(ValueError, match="rounds must be an integer >= 0"):
        DPAccountant(1.1, 0.01, 1e-5).epsilon(-1)


def dp_accounting_replace_one_epsilon(noise_multiplier, sample_size, population, rounds, delta):
    """dp-accounting called directly: m of K without replacement, replace one client (Wang, Balle,
    Kasiviswanathan 2019, Theorem 27).  Its RDP takes the noise over the sensitivity under the relation, and
    replacing one clipped update (norm <= S) moves the sum by up to 2 S: noise multiplier z / 2."""
    import dp_accounting
    import dp_accounting.rdp
    accountant = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.SampledWithoutReplacementDpEvent(
        population, sample_size, dp_accounting.GaussianDpEvent(noise_multiplier / 2)), rounds)
    return accountant.get_epsilon(delta)


def worst_case_epsilon(noise_multiplier, sample_size, population, rounds, delta):
    """A lower bound on the true epsilon of m-of-K sampling without replacement under replace-one: the other
    clients all send -S e and the replaced client S e or -S e, so a round is the pair
    (q N(2S, (zS)^2) + (1 - q) N(0, (zS)^2), N(0, (zS)^2)) with q = m / K, in both orders (PLD, optimistic
    rounding on a coarse grid: a lower estimate of this pair's epsilon, about 3 % below it)."""
    from dp_accounting.pld import privacy_loss_distribution
    pld = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=noise_multiplier, sensitivity=2.0, sampling_prob=sample_size / population,
        pessimistic_estimate=False, value_discretization_interval=1e-2)
    return pld.self_compose(rounds).get_epsilon_for_delta(delta)


# the examples: K = 20, fraction 0.01 -> 1 client (rate 0.05); K = 30, fraction 0.05 -> round(1.5) = 2
@needs_dp_accounting
@pytest.mark.parametrize("sample_size, population", [(1, 20), (2, 30), (5, 5)])
def test_fixed_sample_accountant_is_dp_accountings_replace_one_without_replacement_and_not_below_the_worst_case(
        sample_size, population):
    noise, rounds, delta = 1.0, 100, 1e-5
    accountant = DPAccountant(noise, delta=delta, sample_size=sample_size, population=population)
    epsilon = accountant.epsilon(rounds)
    assert epsilon == dp_accounting_replace_one_epsilon(noise, sample_size, population, rounds, delta)
    worst_case = worst_case_epsilon(noise, sample_size, population, rounds, delta)
    assert epsilon >= worst_case
    assert accountant.sampling_rate == sample_size / population
    assert accountant.neighbouring == "replace one" and accountant.sampling == "without replacement"
    if sample_size < population:  # Poisson accounting at q = m / K (sensitivity S) is below what a data set reaches
        assert DPAccountant(noise, sample_size / population, delta).epsilon(rounds) < worst_case


# docs/federated.md's table (z = 1, T = 100, delta = 1e-5): the K = 20, fraction 0.01 (m = 1) and K = 30,
# fraction 0.05 (m = 2), fixed sampling (replace one) and Poisson sampling (add or remove one) at q = fraction and at
# q = m / K (as many clients a round on average as fixed sampling takes)
@needs_dp_accounting
@pytest.mark.parametrize("population, fraction, sample_size, fixed, poisson, poisson_at_m_over_k", [
    (20, 0.01, 1, 34.26, 1.214, 4.039), (30, 0.05, 2, 49.69, 4.039, 5.311)])
def test_the_documented_epsilons_of_both_samplings(population, fraction, sample_size, fixed, poisson,
                                                   poisson_at_m_over_k):
    rounds, delta = 100, 1e-5
    assert DPAccountant(1.0, delta=delta, sample_size=sample_size, population=population).epsilon(rounds) == \
        pytest.approx(fixed, abs=0.005)
    assert DPAccountant(1.0, fraction, delta).epsilon(rounds) == pytest.approx(poisson, abs=5e-4)
    assert DPAccountant(1.0, sample_size / population, delta).epsilon(rounds) == pytest.approx(poisson_at_m_over_k,
                                                                                                abs=5e-4)


@needs_dp_accounting
def test_fixed_sample_pld_is_the_exact_gaussian_of_sensitivity_two_s_when_every_client_is_sampled_else_refused():
    # m = K: T rounds are the Gaussian mechanism with mu = 2 sqrt(T) / z (Balle & Wang 2018's exact delta)
    noise, rounds, delta = 4.0, 50, 1e-5
    mu = 2 * math.sqrt(rounds) / noise
    exact = brentq(lambda eps: stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
                   - delta, 0, 200)
    pld = DPAccountant(noise, delta=delta, sample_size=4, population=4, method="pld")
    assert pld.epsilon(rounds) == pytest.approx(exact, rel=1e-3)
    assert DPAccountant(noise, delta=delta, sample_size=4, population=4).epsilon(rounds) >= exact
    with pytest.raises(ValueError, match="cannot account 1 of 4 clients sampled without replacement"):
        DPAccountant(noise, delta=delta, sample_size=1, population=4, method="pld")
    with pytest.raises(ValueError, match="sample_size must be an integer in"):
        DPAccountant(noise, delta=delta, sample_size=5, population=4)
    with pytest.raises(ValueError, match="not both"):
        DPAccountant(noise, 0.25, delta, sample_size=1, population=4)
    line = DPAccountant(1.0, delta=1e-5, sample_size=1, population=20).describe(100)
    assert line.endswith("[rdp, z=1, 1 of 20 clients without replacement, replace one]")


@needs_dp_accounting
def test_accountant_keeps_dp_accountings_unconverged_order_warnings_out_and_lets_other_records_through(caplog):
    from mpiopt.federated.privacy import _quiet_unconverged_orders
    with caplog.at_level(logging.WARNING):
        epsilon = DPAccountant(1.0, 0.1, 1e-5).epsilon(30)  # q = 0.1, z = 1: fractional orders 1.1-1.5 fail
        with _quiet_unconverged_orders():
            logging.getLogger("absl").warning("another absl warning")
            logging.getLogger("absl").error("_compute_log_a_frac is not the start of this error")
    assert math.isfinite(epsilon)
    messages = [record.getMessage() for record in caplog.records]
    assert not any(message.startswith("_compute_log_a_frac failed to converge") for message in messages), messages
    assert "another absl warning" in messages and "_compute_log_a_frac is not the start of this error" in messages


def test_accountant_without_dp_accounting_names_the_extra(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_dp_accounting(name, *args, **kwargs):
        if name.startswith("dp_accounting"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dp_accounting)
    with pytest.raises(ImportError, match=r"mpiopt\[privacy\]"):
        DPAccountant(1.1, 0.01, 1e-5)


# ---- secure aggregation -------------------------------------------------------------------------------

def client_updates(clients, size=1000, seed=0):
    rng = np.random.default_rng(seed)
    return {client: rng.standard_normal(size) * rng.uniform(0.01, 100) for client in clients}


def test_to_ring_round_trips_within_half_a_quantization_step_and_refuses_values_out_of_range():
    values = np.random.default_rng(1).standard_normal(1000) * 1e3
    assert np.max(np.abs(from_ring(to_ring(values)) - values)) <= 2.0 ** -(FRACTION_BITS + 1)
    np.testing.assert_array_equal(from_ring(to_ring([-1.5, 0.0, 2.25])), [-1.5, 0.0, 2.25])
    with pytest.raises(ValueError, match="does not fit the ring"):
        to_ring([2.0 ** 31])


def test_pair_seed_is_symmetric_deterministic_and_differs_by_round_and_pair():
    assert pair_seed(SESSION_SEED, ROUND, 3, 8) == pair_seed(SESSION_SEED, ROUND, 8, 3)
    assert pair_seed(SESSION_SEED, ROUND, 3, 8) != pair_seed(SESSION_SEED, ROUND + 1, 3, 8)
    assert pair_seed(SESSION_SEED, ROUND, 3, 8) != pair_seed(SESSION_SEED, ROUND, 3, 9)
    with pytest.raises(ValueError, match="two different clients"):
        pair_seed(SESSION_SEED, ROUND, 4, 4)


def test_masks_cancel_exactly_in_the_sum_of_all_masked_updates():
    participants = [0, 2, 3, 5, 9]
    updates = client_updates(participants)
    masked = {client: mask_update(updates[client], client, participants, SESSION_SEED, ROUND)
              for client in participants}
    masked_total = ring_sum(masked.values())
    np.testing.assert_array_equal(masked_total, ring_sum(to_ring(update) for update in updates.values()))
    total = unmask_sum(masked_total, participants, [], SESSION_SEED, ROUND)
    exact = np.sum(list(updates.values()), axis=0)
    tolerance = len(participants) * 2.0 ** -(FRACTION_BITS + 1) + 1e-12 * np.abs(exact).max()
    assert np.max(np.abs(total - exact)) <= tolerance


@pytest.mark.parametrize("dropped", [[5], [0, 9], [2, 3, 9]])
def test_unmask_sum_recovers_the_exact_sum_of_survivors_after_dropouts(dropped):
    participants = [0, 2, 3, 5, 9, 11]
    updates = client_updates(participants, seed=len(dropped))
    masked = {client: mask_update(updates[client], client, participants, SESSION_SEED, ROUND)
              for client in participants}
    survivors = [client for client in participants if client not in dropped]
    arrived = ring_sum(masked[client] for client in survivors)
    total = unmask_sum(arrived, survivors, dropped, SESSION_SEED, ROUND)
    exact_ring = ring_sum(to_ring(updates[client]) for client in survivors)
    np.testing.assert_array_equal(total, from_ring(exact_ring))  # exact on the ring
    np.testing.assert_allclose(total, np.sum([updates[client] for client in survivors], axis=0),
                               rtol=1e-12, atol=len(survivors) * 2.0 ** -(FRACTION_BITS + 1))
    # without the recovery the uncancelled masks make the sum garbage
    assert np.max(np.abs(from_ring(arrived) - from_ring(exact_ring))) > 1e6


def test_a_single_masked_update_is_uniform_on_the_ring_and_uncorrelated_with_the_update():
    participants = [1, 4, 6]
    size = 20_000
    update = np.linspace(-50.0, 50.0, size) + np.random.default_rng(2).standard_normal(size)
    masked = mask_update(update, 4, participants, SESSION_SEED, ROUND)
    as_unit = masked.astype(np.float64) / 2.0 ** 64
    assert stats.kstest(as_unit, "uniform").pvalue > 1e-3
    # Pearson correlation of n independent pairs has standard error ~ 1 / sqrt(n)
    assert abs(np.corrcoef(update, as_unit)[0, 1]) < 4 / math.sqrt(size)
    assert abs(stats.spearmanr(update, as_unit).statistic) < 4 / math.sqrt(size)
    # the same coordinate across many sessions: the masked value does not follow the update
    values = np.linspace(-10, 10, 2000)
    masked_values = np.array([mask_update(values[seed:seed + 1], 4, participants, seed, ROUND)[0]
                              for seed in range(values.size)], dtype=np.float64) / 2.0 ** 64
    assert abs(np.corrcoef(values, masked_values)[0, 1]) < 4 / math.sqrt(values.size)
    assert stats.kstest(masked_values, "uniform").pvalue > 1e-3


def test_masking_is_deterministic_given_the_seeds_and_changes_with_the_round():
    participants = [0, 1, 2]
    update = np.arange(10.0)
    first = mask_update(update, 1, participants, SESSION_SEED, ROUND)
    np.testing.assert_array_equal(first, mask_update(update, 1, participants, SESSION_SEED, ROUND))
    assert not np.any(first == mask_update(update, 1, participants, SESSION_SEED, ROUND + 1))
    assert not np.any(first == mask_update(update, 1, participants, SESSION_SEED + 1, ROUND))


def test_masking_rejects_bad_participants_and_values_that_could_wrap():
    with pytest.raises(ValueError, match="not among the participants"):
        mask_update(np.ones(3), 7, [0, 1], SESSION_SEED, ROUND)
    with pytest.raises(ValueError, match="at least two participants"):
        mask_update(np.ones(3), 0, [0], SESSION_SEED, ROUND)
    with pytest.raises(ValueError, match="so that their sum does not wrap"):
        mask_update(np.full(3, 2.0 ** 30), 0, [0, 1, 2], SESSION_SEED, ROUND)
    with pytest.raises(ValueError, match="both as survivors and as dropped"):
        unmask_sum(np.zeros(3, dtype=np.uint64), [0, 1], [1], SESSION_SEED, ROUND)
