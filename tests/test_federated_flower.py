"""The server optimizers and the robust aggregators against Flower's, fed the same client results.

Reference: tests/reference/flower_federated.json, Flower's own ``FedAdagrad``,
``FedAdam``, ``FedYogi``, ``FedMedian``, ``FedTrimmedAvg``, ``Krum`` (and
multi-Krum) and ``Bulyan`` (flwr 1.42.0) run on the clients' parameters
w_t + delta_k by tests/reference/flower_federated.py.  With flwr importable the
table is recomputed live as well.  Flower aggregates parameters and mpiopt
deltas, so the two agree to rounding (1e-12 relative), not bit for bit.

Besides full rounds: rounds with fewer reports than a robust rule asks for
(what each rule does then, beside Flower's, and the set-up refusal when no
round can have enough), and server-optimizer runs in which some rounds report
nothing (FedAdam's step count: Flower's server rounds or mpiopt's steps).
"""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.data import load_dataset
from mpiopt.federated import ClientUpdate, Hook, RunInfo, get_strategy, partition, run_federated, split_clients
from mpiopt.models import get_model

REFERENCE = Path(__file__).with_name("reference") / "flower_federated.json"
TABLE = json.loads(REFERENCE.read_text())
START = np.array(TABLE["inputs"]["start"])
ROUNDS = TABLE["inputs"]["rounds"]
SHORT, SPARSE = TABLE["inputs"]["short"], TABLE["inputs"]["sparse"]
# case: (strategy, options, input section, clients of each round (None: all))
CASES = {"fedadagrad": ("fedadagrad", {}), "fedadam": ("fedadam", {}), "fedyogi": ("fedyogi", {}),
         "fedadam_options": ("fedadam", {"eta": 0.3, "beta_1": 0.5, "beta_2": 0.9, "tau": 1e-3}),
         "median": ("median", {}), "trimmed_mean": ("trimmed_mean", {"beta": 0.2}),
         "krum": ("krum", {"num_malicious": 2}), "multikrum": ("multikrum", {"num_malicious": 2, "to_keep": 4}),
         "bulyan": ("bulyan", {"num_malicious": 2})}
CASES = {case: (*value, TABLE["inputs"], None) for case, value in CASES.items()}
# fewer reports than the rule asks for: floor(0.2 * 4) = 0 cut, n - f - 2 = -1, 9 reports for to_keep = 12
SHORT_CASES = {"median_short": ("median", {}, SHORT, 2),
               "trimmed_mean_short": ("trimmed_mean", {"beta": 0.2}, SHORT, 4),
               "krum_short": ("krum", {"num_malicious": 2}, SHORT, 3),
               "multikrum_short_keep_all": ("multikrum", {"num_malicious": 2, "to_keep": 12}, SHORT, None)}
# four of ten rounds without reports; Flower counts rounds, mpiopt's FedAdam steps unless step_count="rounds"
SPARSE_CASES = {"fedadam_sparse_rounds": ("fedadam", {"step_count": "rounds"}, SPARSE, None),
                "fedadam_sparse_steps": ("fedadam", {}, SPARSE, None),
                "fedadagrad_sparse_rounds": ("fedadagrad", {}, SPARSE, None),
                "fedadagrad_sparse_steps": ("fedadagrad", {}, SPARSE, None),
                "fedyogi_sparse_rounds": ("fedyogi", {}, SPARSE, None),
                "fedyogi_sparse_steps": ("fedyogi", {}, SPARSE, None)}
CASES.update(SHORT_CASES)
CASES.update(SPARSE_CASES)
STATEFUL = {"fedadagrad", "fedadam", "fedyogi", "fedadam_options", "multikrum_short_keep_all", *SPARSE_CASES}


def updates(round_, clients=None):
    return [ClientUpdate(client=k, delta=np.array(delta), weight=float(n), steps=1, loss=0.0)
            for k, (delta, n) in enumerate(zip(round_["deltas"][:clients], round_["examples"][:clients]))]


def mpiopt_path(case, strategy=None):
    """The models after each round, the strategy called as the runner calls it: ``begin_round`` every round,
    ``aggregate_fit`` and ``server_update`` only in a round with reports (none in the section's ``empty``)."""
    name, options, section, clients = CASES[case]
    strategy = strategy or get_strategy(name, **options)
    start, rounds = np.array(section["start"]), section["rounds"]
    population = 20  # more than any round reports: a short round is the round's shortfall, not the run's
    assert strategy.setup(RunInfo(population, (10,) * population, start.size, start, None)) is None
    params, path = start.copy(), []
    for index, round_ in enumerate(rounds):
        strategy.begin_round(index)
        base = params if case in STATEFUL else start
        if index not in section.get("empty", ()):
            params = strategy.server_update(base, strategy.aggregate_fit(updates(round_, clients)))
        path.append(params)
    return np.array(path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_equal_to_flower_on_the_same_client_results(case):
    expected = np.array(TABLE["outputs"][case])
    np.testing.assert_allclose(mpiopt_path(case), expected, rtol=1e-12, atol=1e-14)


def test_the_robust_rules_leave_the_outliers_out_and_the_mean_does_not():
    # the table's first two clients are outliers (3 sigma against 0.1): FedAvg follows them, the robust rules not
    deltas = np.array(ROUNDS[0]["deltas"])
    honest = np.abs(deltas[2:]).max()
    mean = get_strategy("fedavg").aggregate_fit(updates(ROUNDS[0]))
    assert np.abs(mean).max() > honest
    for case in ("median", "trimmed_mean", "krum", "multikrum", "bulyan"):
        assert np.abs(mpiopt_path(case)[0] - START).max() <= honest, case
    assert not any(np.allclose(mpiopt_path("krum")[0] - START, deltas[k]) for k in (0, 1))


@pytest.mark.parametrize("case", sorted(SHORT_CASES))
def test_a_rule_short_of_reports_says_what_it_does_and_does_it_beside_flower(case):
    name, options, section, clients = CASES[case]
    reports = clients or len(section["rounds"][0]["examples"])
    expected = {"median_short": None,
                "trimmed_mean_short": "4 reports, fewer than 5 (floor(beta n) >= 1 with beta = 0.2): trimmed_mean "
                                      "cuts none of them and takes their plain mean, as Flower's FedTrimmedAvg",
                "krum_short": "3 reports, fewer than 5 (n - f - 2 >= 1 with f = 2): krum scores each by its "
                              "max(1, n - f - 2) = 1 nearest others, as Flower's Krum",
                "multikrum_short_keep_all": "9 reports, fewer than 12 (n >= to_keep = 12): multikrum averages all 9"}[case]
    assert get_strategy(name, **options).shortfall(reports) == expected
    np.testing.assert_allclose(mpiopt_path(case), np.array(TABLE["outputs"][case]), rtol=1e-12, atol=1e-14)


def test_multikrum_short_of_to_keep_averages_all_and_not_flowers_wrapped_slice():
    # Flower 1.42 keeps argsort(scores)[::-1][n - to_keep:]: for n < to_keep < 2 n the slice wraps around and keeps
    # to_keep - n updates (3 of 9 here); mpiopt averages all n, which is Flower's own to_keep = n
    ours = mpiopt_path("multikrum_short_keep_all")
    wrapped = np.array(TABLE["outputs"]["multikrum_short"])
    start = np.array(SHORT["start"])
    assert np.linalg.norm(ours[-1] - wrapped[-1]) > 0.5 * np.linalg.norm(wrapped[-1] - start)


def test_bulyan_short_of_reports_raises_as_flowers_does():
    assert TABLE["outputs"]["errors"]["bulyan_short"].startswith("ValueError: The Bulyan aggregation requires")
    bulyan = get_strategy("bulyan", num_malicious=2)
    assert bulyan.shortfall(9) is None  # not a fallback: the round is refused
    with pytest.raises(ValueError, match=r"bulyan needs n >= 4 f \+ 3 reporting clients: 9 reported, f = 2"):
        bulyan.aggregate_fit(updates(SHORT["rounds"][0]))


@pytest.mark.parametrize("name, options, need, words", [
    ("trimmed_mean", {"beta": 0.2}, 5, "floor(beta n) >= 1 with beta = 0.2"),
    ("krum", {"num_malicious": 2}, 5, "n - f - 2 >= 1 with f = 2"),
    ("multikrum", {"num_malicious": 2, "to_keep": 12}, 12, "n >= to_keep = 12"),
    ("bulyan", {"num_malicious": 2}, 11, "n >= 4 f + 3 with f = 2")])
def test_a_rule_no_round_can_satisfy_is_refused_at_setup(name, options, need, words):
    # 10 of 100 clients a round (fixed sampling, fraction 0.1): one short of what each rule needs here
    from mpiopt.federated import FederatedSettings
    strategy = get_strategy(name, **options)

    def problem(clients, **settings):
        return strategy.setup(RunInfo(clients, (5,) * clients, 3, np.zeros(3), FederatedSettings(**settings)))
    assert problem((need - 1) * 10, fraction=0.1) == (
        f"{name} needs at least {need} reporting clients a round ({words}), and a round has at most {need - 1} "
        f"({need - 1} of the {(need - 1) * 10} clients sampled, fraction 0.1): sample more clients or relax the "
        "rule's options")
    assert problem(need * 10, fraction=0.1) is None
    assert problem(need - 1, client_sampling="poisson", fraction=0.5).endswith(
        f"a round has at most {need - 1} (all {need - 1} clients): sample more clients or relax the rule's options")
    assert problem(need, client_sampling="poisson", fraction=0.01) is None


def test_fedadam_counts_steps_by_default_and_rounds_as_flower_on_request():
    # the two counts are the documented choice: 10 rounds, 4 without reports, a few per cent apart
    steps, rounds = mpiopt_path("fedadam_sparse_steps"), mpiopt_path("fedadam_sparse_rounds")
    start = np.array(SPARSE["start"])
    apart = np.linalg.norm(steps[-1] - rounds[-1]) / np.linalg.norm(rounds[-1] - start)
    assert 0.01 < apart < 0.2, apart
    full = {count: get_strategy("fedadam", step_count=count) for count in ("steps", "rounds")}
    paths = {}
    for count, strategy in full.items():
        params = START.copy()
        for index, round_ in enumerate(ROUNDS):
            strategy.begin_round(index)
            params = strategy.server_update(params, strategy.aggregate_fit(updates(round_)))
        paths[count] = params
    assert np.array_equal(paths["steps"], paths["rounds"])  # every round reports: the same t


def test_bulyan_refuses_fewer_than_4f_plus_3_updates():
    with pytest.raises(ValueError, match=r"bulyan needs n >= 4 f \+ 3 reporting clients: 11 reported, f = 3"):
        get_strategy("bulyan", num_malicious=3).aggregate_fit(updates(ROUNDS[0]))


def test_the_frozen_table_is_what_flower_computes():
    pytest.importorskip("flwr")
    sys.path.insert(0, str(REFERENCE.parent))
    try:
        import flower_federated
    finally:
        sys.path.pop(0)
    assert flower_federated.all_inputs() == TABLE["inputs"]
    live = flower_federated.flower_outputs(TABLE["inputs"])
    assert live.pop("errors") == TABLE["outputs"]["errors"]
    assert sorted(live) == sorted(case for case in TABLE["outputs"] if case != "errors")
    for case, path in live.items():
        np.testing.assert_array_equal(np.array(path), np.array(TABLE["outputs"][case]), err_msg=case)


class DeltaRecorder(Hook):
    """Keeps each round's aggregated Delta as the server optimizer receives it (none in a round without reports)."""

    def __init__(self):
        self.deltas = {}

    def transform_aggregate(self, delta, round, updates):
        self.deltas[round] = delta.copy()
        return delta


def flower_fedadam_replay(start, deltas, rounds, count):
    """Flower's FedAdam fed, round by round, one result whose parameters are w_t + Delta (no result in an empty
    round), numbered by its server round ("rounds") or by the rounds that reported ("steps")."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import FedAdam
    flower, current, reported = FedAdam(initial_parameters=ndarrays_to_parameters([start])), start.copy(), 0
    for index in range(rounds):
        received = [] if index not in deltas else [
            (None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([current + deltas[index]]), 1, {}))]
        reported += bool(received)
        params, _ = flower.aggregate_fit(index + 1 if count == "rounds" else reported, received, [])
        current = current if params is None else parameters_to_ndarrays(params)[0]
    return current


@pytest.mark.parametrize("count", ["steps", "rounds"])
def test_fedadam_in_a_run_with_empty_rounds_counts_what_step_count_says(count):
    # 8 rounds of 2 sampled clients with dropout 0.6 (seed 3): rounds 2 and 5 have no report
    data = load_dataset("digits", MPI.COMM_SELF)
    clients = split_clients(data.X_train[:300], data.y_train[:300], partition("iid", data.y_train[:300], 10, 0))
    model, recorder = get_model("softmax", n_features=64, n_classes=10), DeltaRecorder()
    result = run_federated(model, clients, "fedadam", MPI.COMM_SELF, strategy_options={"step_count": count},
                           hooks=[recorder], rounds=8, fraction=0.2, dropout=0.6, seed=3, lr=0.05)
    assert sorted(set(range(8)) - set(recorder.deltas)) == [1, 4]
    assert [index for index, n in enumerate(result.history["participants"]) if n == 0] == [1, 4]
    # the run calls the strategy as mpiopt_path does: begin_round every round, a step only with reports
    strategy, params = get_strategy("fedadam", step_count=count), model.init_params(3)
    start = params.copy()
    for index in range(8):
        strategy.begin_round(index)
        if index in recorder.deltas:
            params = strategy.server_update(params, recorder.deltas[index])
    assert np.array_equal(result.params, params)
    other = run_federated(model, clients, "fedadam", MPI.COMM_SELF, rounds=8, fraction=0.2, dropout=0.6, seed=3,
                          lr=0.05, strategy_options={"step_count": "rounds" if count == "steps" else "steps"})
    assert not np.allclose(other.params, result.params, rtol=1e-6, atol=0)
    try:
        import flwr  # noqa: F401
    except ImportError:
        return
    np.testing.assert_allclose(result.params, flower_fedadam_replay(start, recorder.deltas, 8, count),
                               rtol=1e-10, atol=1e-12)
