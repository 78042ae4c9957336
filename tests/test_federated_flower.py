"""The server optimizers and the robust aggregators against Flower's, fed the same client results.

Reference: tests/reference/flower_federated.json, Flower's own ``FedAdagrad``,
``FedAdam``, ``FedYogi``, ``FedMedian``, ``FedTrimmedAvg``, ``Krum`` (and
multi-Krum) and ``Bulyan`` (flwr 1.42.0) run on the clients' parameters
w_t + delta_k by tests/reference/flower_federated.py.  With flwr importable the
table is recomputed live as well.  Flower aggregates parameters and mpiopt
deltas, so the two agree to rounding (1e-12 relative), not bit for bit.
"""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from mpiopt.federated import ClientUpdate, RunInfo, get_strategy

REFERENCE = Path(__file__).with_name("reference") / "flower_federated.json"
TABLE = json.loads(REFERENCE.read_text())
START = np.array(TABLE["inputs"]["start"])
ROUNDS = TABLE["inputs"]["rounds"]
CASES = {"fedadagrad": ("fedadagrad", {}), "fedadam": ("fedadam", {}), "fedyogi": ("fedyogi", {}),
         "fedadam_options": ("fedadam", {"eta": 0.3, "beta_1": 0.5, "beta_2": 0.9, "tau": 1e-3}),
         "median": ("median", {}), "trimmed_mean": ("trimmed_mean", {"beta": 0.2}),
         "krum": ("krum", {"num_malicious": 2}), "multikrum": ("multikrum", {"num_malicious": 2, "to_keep": 4}),
         "bulyan": ("bulyan", {"num_malicious": 2})}
STATEFUL = {"fedadagrad", "fedadam", "fedyogi", "fedadam_options"}


def updates(round_):
    return [ClientUpdate(client=k, delta=np.array(delta), weight=float(n), steps=1, loss=0.0)
            for k, (delta, n) in enumerate(zip(round_["deltas"], round_["examples"]))]


def mpiopt_path(case):
    name, options = CASES[case]
    strategy = get_strategy(name, **options)
    assert strategy.setup(RunInfo(len(ROUNDS[0]["examples"]), tuple(ROUNDS[0]["examples"]), START.size, START,
                                  None)) is None
    params, path = START.copy(), []
    for round_ in ROUNDS:
        base = params if case in STATEFUL else START
        new = strategy.server_update(base, strategy.aggregate_fit(updates(round_)))
        path.append(new)
        params = new
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
    live = flower_federated.flower_outputs(TABLE["inputs"])
    for case, path in live.items():
        np.testing.assert_array_equal(np.array(path), np.array(TABLE["outputs"][case]), err_msg=case)
