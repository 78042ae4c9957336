"""Byzantine clients and the robust rules: each attack breaks FedAvg and not the rules below their breakdown.

References outside the code under test: the clean run of the same rule (the
loss an attack must not move much), each attack's formula computed here from
the honest updates the run gathered, and Baruch et al.'s z_max from scipy.
"""
import functools

import numpy as np
import pytest
from mpi4py import MPI
from scipy.stats import norm

from mpiopt.core.comm import CollectiveError
from mpiopt.core.random import random_stream
from mpiopt.data import load_dataset
from mpiopt.federated import ClientUpdate, Hook, partition, run_federated, split_clients
from mpiopt.federated.attacks import byzantine_clients, forge_updates, get_attack
from mpiopt.models import get_model

DATA = load_dataset("digits", MPI.COMM_SELF, test_fraction=0.25, seed=0)
PARTS = split_clients(DATA.X_train[:800], DATA.y_train[:800], partition("iid", DATA.y_train[:800], 20, 0))
COMMON = dict(rounds=10, fraction=1.0, lr=0.1)
ATTACKS = [("sign_flip", {"scale": 4.0}), ("gaussian", {"scale": 3.0}), ("constant", {"scale": 3.0}),
           ("alie", {"z": 10.0})]
RULES = [("median", None), ("trimmed_mean", {"beta": 0.25}), ("krum", {"num_malicious": 4}),
         ("multikrum", {"num_malicious": 4, "to_keep": 8}), ("bulyan", {"num_malicious": 4})]


def softmax():
    return get_model("softmax", n_features=64, n_classes=10, alpha=1e-3)


def run(strategy, options=None, **settings):
    return run_federated(softmax(), PARTS, strategy, MPI.COMM_SELF, strategy_options=options,
                         **dict(COMMON, **settings))


@functools.lru_cache(maxsize=None)
def clean_loss(index):
    """The loss of RULES[index] (-1: FedAvg) with no Byzantine client: the same run for every attack."""
    rule, options = RULES[index] if index >= 0 else ("fedavg", None)
    return run(rule, options).loss


@pytest.mark.parametrize("attack, attack_options", ATTACKS)
def test_each_attack_breaks_fedavg_and_not_the_robust_rules_at_20_percent(attack, attack_options):
    # 4 Byzantine clients of 20: below every rule's breakdown point (Bulyan's 4 f + 3 = 19 <= 20)
    attacked = run("fedavg", byzantine=0.2, attack=attack, attack_options=attack_options)
    assert attacked.loss > 1.8 * clean_loss(-1), (attack, attacked.loss, clean_loss(-1))
    for index, (rule, options) in enumerate(RULES):
        robust = run(rule, options, byzantine=0.2, attack=attack, attack_options=attack_options)
        assert robust.loss < 1.3 * clean_loss(index), (rule, attack, robust.loss, clean_loss(index))


def test_the_byzantine_clients_are_seeded_recorded_each_round_and_forged_after_the_gather():
    result = run("fedavg", byzantine=0.2, attack="sign_flip", attack_options={"scale": 2.0}, seed=5)
    chosen = sorted(random_stream(5, "byzantine").choice(20, size=4, replace=False).tolist())
    assert byzantine_clients(20, 0.2, 5).tolist() == chosen
    assert all(round_ == chosen for round_ in result.history["byzantine_clients"])
    none = run("fedavg", seed=5)
    assert all(round_ == [] for round_ in none.history["byzantine_clients"])


def honest_and_forged(attack, options, n=10, byzantine=(2, 7), seed=1):
    rng = np.random.default_rng(seed)
    updates = [ClientUpdate(client=k, delta=rng.standard_normal(6), weight=1.0, steps=1, loss=0.0) for k in range(n)]
    forged, ids = forge_updates(updates, get_attack(attack, **(options or {})), set(byzantine), 3, 9)
    assert ids == list(byzantine)
    honest = np.array([u.delta for u in updates if u.client not in byzantine])
    return updates, forged, honest


def test_each_forgery_is_its_formula():
    updates, forged, _ = honest_and_forged("sign_flip", {"scale": 2.5})
    assert np.array_equal(forged[2].delta, -2.5 * updates[2].delta) and forged[3] is updates[3]
    _, forged, _ = honest_and_forged("gaussian", {"scale": 0.5})
    assert np.array_equal(forged[7].delta, random_stream(9, "attack", 3, 7).normal(0.0, 0.5, 6))
    _, forged, _ = honest_and_forged("constant", {"scale": 1.5})
    assert np.array_equal(forged[2].delta, np.full(6, 1.5))
    _, forged, honest = honest_and_forged("alie", None)
    s = np.floor(10 / 2 + 1) - 2  # Baruch et al.: s = floor(n / 2 + 1) - f, z_max = Phi^-1((n - s) / n)
    z = norm.ppf((10 - s) / 10)
    np.testing.assert_allclose(forged[2].delta, honest.mean(axis=0) - z * honest.std(axis=0), rtol=1e-15)
    assert np.array_equal(forged[2].delta, forged[7].delta)  # coordinated: every attacker sends the same


@pytest.mark.mpi
@pytest.mark.many_ranks  # the Byzantine clients are spread over the ranks
@pytest.mark.timeout(120)
def test_an_attacked_robust_run_with_dropouts_is_the_same_at_any_rank_count(comm):
    options = dict(COMMON, byzantine=0.2, attack="gaussian", dropout=0.2, seed=2,
                   strategy_options={"num_malicious": 4})
    result = run_federated(softmax(), PARTS, "krum", comm, **options)
    alone = run_federated(softmax(), PARTS, "krum", MPI.COMM_SELF, **options)
    assert np.array_equal(result.params, alone.params)
    assert result.history["byzantine_clients"] == alone.history["byzantine_clients"]
    assert sum(result.history["dropped"]) > 0


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_what_cannot_compose_is_refused_in_one_line_on_every_rank(comm):
    from mpiopt.federated import DPHook, SecureAggregationHook
    cases = [
        (dict(strategy="median", hooks=[SecureAggregationHook(1)]),
         "SecureAggregationHook(fraction_bits=32, drop_after_masking=0.0) needs a strategy that averages the "
         "client updates; median does not"),
        (dict(strategy="fedavg", hooks=[SecureAggregationHook(1)], byzantine=0.2),
         "cannot run with Byzantine clients: their forged deltas replace the uploads in the clear"),
        (dict(strategy="fedavg", hooks=[SecureAggregationHook(1)], compressor="qsgd8"),
         "cannot run with compressed uploads (qsgd8): a masked update cannot be compressed"),
        (dict(strategy="scaffold", hooks=[SecureAggregationHook(1)]),
         "cannot run with scaffold: it uploads per-client state in the clear"),
    ]
    try:
        import dp_accounting  # noqa: F401
        cases += [
            (dict(strategy="scaffold", hooks=[DPHook(1.0, 1.0)]),
             "cannot run with scaffold: it uploads per-client state in the clear"),
            (dict(strategy="fedavg", hooks=[DPHook(1.0, 1.0)], compressor="topk"),
             "compressing a clipped update changes its norm, so the sensitivity bound would not hold"),
        ]
    except ImportError:
        pass
    for settings, message in cases:
        strategy = settings.pop("strategy")
        with pytest.raises(CollectiveError) as raised:
            run_federated(softmax(), PARTS, strategy, comm, rounds=1, **settings)
        assert message in str(raised.value), str(raised.value)
        assert comm.allgather(str(raised.value)) == [str(raised.value)] * comm.size
        assert "\n" not in str(raised.value)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_rule_no_round_can_satisfy_is_refused_before_the_first_round_on_every_rank(comm):
    # 10 of the 20 clients a round: Bulyan with f = 4 needs 19, multi-Krum with to_keep = 12 needs 12
    cases = [("bulyan", {"num_malicious": 4}, "bulyan needs at least 19 reporting clients a round "
              "(n >= 4 f + 3 with f = 4), and a round has at most 10 (10 of the 20 clients sampled, fraction 0.5)"),
             ("multikrum", {"num_malicious": 2, "to_keep": 12}, "multikrum needs at least 12 reporting clients a "
              "round (n >= to_keep = 12), and a round has at most 10")]
    for strategy, options, message in cases:
        with pytest.raises(CollectiveError) as raised:
            run_federated(softmax(), PARTS, strategy, comm, strategy_options=options, rounds=1, fraction=0.5,
                          log_stream=None)
        assert message in str(raised.value), str(raised.value)
        assert "round 0" not in str(raised.value) and "\n" not in str(raised.value)
        assert comm.allgather(str(raised.value)) == [str(raised.value)] * comm.size


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_bulyan_with_too_few_reports_in_a_round_fails_on_every_rank_alike(comm):
    # every client sampled (20 >= 19), but dropouts leave round 0 short: refused there, as Flower's Bulyan raises
    with pytest.raises(CollectiveError, match=r"round 0: bulyan needs n >= 4 f \+ 3 reporting clients") as raised:
        run_federated(softmax(), PARTS, "bulyan", comm, strategy_options={"num_malicious": 4}, rounds=1,
                      fraction=1.0, dropout=0.3)
    assert comm.allgather(str(raised.value)) == [str(raised.value)] * comm.size


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_round_short_of_reports_is_warned_once_on_rank_0_and_noted_in_each_such_round(comm):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_federated(softmax(), PARTS, "multikrum", comm, strategy_options={"num_malicious": 2,
                               "to_keep": 8}, rounds=4, fraction=0.5, dropout=0.4, lr=0.1)
    short = [index for index, reports in enumerate(result.history["participants"]) if reports < 8]
    assert short, result.history["participants"]
    messages = [str(warning.message) for warning in caught if issubclass(warning.category, RuntimeWarning)]
    first = result.history["participants"][short[0]]
    assert messages == ([f"round {short[0] + 1}: {first} reports, fewer than 8 (n >= to_keep = 8): multikrum "
                         f"averages all {first} (warned once per run; each such round's note says so)"]
                        if comm.rank == 0 else [])
    assert [index for index, note in enumerate(result.history["note"]) if note] == short
    assert all(result.history["note"][index].endswith(f"multikrum averages all {result.history['participants'][index]}")
               for index in short)


class Silent(Hook):
    pass


def test_dp_composes_with_fedadam_and_robust_rules_with_dropouts():
    pytest.importorskip("dp_accounting")
    from mpiopt.federated import DPHook
    private = run("fedadam", {"eta": 0.01}, hooks=[DPHook(1.0, 0.5, seed=1), Silent()], client_sampling="poisson",
                  fraction=0.5)
    assert np.isfinite(private.params).all() and private.history["epsilon"][-1] > 0
    dropped = run("trimmed_mean", {"beta": 0.2}, dropout=0.3)
    assert sum(dropped.history["dropped"]) > 0 and np.isfinite(dropped.params).all()
