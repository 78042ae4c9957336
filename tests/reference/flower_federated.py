"""Writes flower_federated.json: Flower's server optimizers and robust aggregators on fixed client results.

Besides the full rounds: rounds with fewer reports than a robust rule asks
for (``short``: the first few of 9 clients), in which Flower's Bulyan raises
(recorded under ``errors``), and ten server-optimizer rounds of which four
report nothing (``sparse``: Flower calls ``aggregate_fit`` with no results,
which returns None and leaves the model and the moments as they were),
numbered by Flower's server round and, for the other count, by the rounds
that reported.

Run with flwr installed (``pip install flwr``; made with flwr 1.42.0):
``python tests/reference/flower_federated.py``.  The inputs are in the file
too, so the test needs neither flwr nor this script; with flwr importable,
tests/test_federated_flower.py also recomputes the outputs live.
"""
import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("flower_federated.json")


def inputs(seed=3, clients=11, rounds=3, size=17):
    """Per round, the clients' parameters w_t + delta_k and their num_examples; the starting point."""
    rng = np.random.default_rng(seed)
    start = rng.standard_normal(size)
    rounds_ = []
    for _ in range(rounds):
        deltas = 0.1 * rng.standard_normal((clients, size))
        deltas[:2] += 3.0 * rng.standard_normal((2, size))   # two outliers: the robust rules must leave them out
        rounds_.append({"deltas": deltas.tolist(), "examples": rng.integers(5, 40, clients).tolist()})
    return {"start": start.tolist(), "rounds": rounds_}


def all_inputs():
    data = inputs()
    data["short"] = inputs(seed=4, clients=9)
    data["sparse"] = dict(inputs(seed=5, clients=5, rounds=10), empty=[1, 4, 5, 8])
    return data


def flower_outputs(data):
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import Bulyan, FedAdagrad, FedAdam, FedMedian, FedTrimmedAvg, FedYogi, Krum
    from flwr.server.strategy.aggregate import aggregate_krum

    start = np.array(data["start"])

    def results(weights, examples):
        return [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([w]), int(n), {}))
                for w, n in zip(weights, examples)]

    def run(strategy, stateful, section=data, clients=None, count="rounds"):
        """Flower's models after each round of ``section``; a round listed in its ``empty`` reports nothing."""
        current, path, reported = np.array(section["start"]), [], 0
        for index, round_ in enumerate(section["rounds"]):
            weights = current + np.array(round_["deltas"])[:clients]
            received = [] if index in section.get("empty", ()) else results(weights, round_["examples"][:clients])
            reported += bool(received)
            params, _ = strategy.aggregate_fit(index + 1 if count == "rounds" else reported, received, [])
            new = current if params is None else parameters_to_ndarrays(params)[0]
            path.append(new.tolist())
            current = new if stateful else current
        return path

    initial = ndarrays_to_parameters([start])
    out = {}
    for name, cls in (("fedadagrad", FedAdagrad), ("fedadam", FedAdam), ("fedyogi", FedYogi)):
        out[name] = run(cls(initial_parameters=initial), stateful=True)
    out["fedadam_options"] = run(FedAdam(initial_parameters=initial, eta=0.3, beta_1=0.5, beta_2=0.9, tau=1e-3),
                                 stateful=True)
    # the robust rules: one aggregation per round from the same start (Flower's strategies keep no state)
    out["median"] = run(FedMedian(), stateful=False)
    out["trimmed_mean"] = run(FedTrimmedAvg(beta=0.2), stateful=False)
    out["krum"] = run(Krum(num_malicious_clients=2, num_clients_to_keep=0), stateful=False)
    out["multikrum"] = run(Krum(num_malicious_clients=2, num_clients_to_keep=4), stateful=False)
    out["bulyan"] = run(Bulyan(num_malicious_clients=2, to_keep=0, first_aggregation_rule=aggregate_krum),
                        stateful=False)
    # fewer reports than a rule asks for: 4 for beta = 0.2, 3 for Krum's n - f - 2 with f = 2, 9 for to_keep = 12
    short = data["short"]
    out["trimmed_mean_short"] = run(FedTrimmedAvg(beta=0.2), stateful=False, section=short, clients=4)
    out["krum_short"] = run(Krum(num_malicious_clients=2, num_clients_to_keep=0), stateful=False, section=short,
                            clients=3)
    out["multikrum_short"] = run(Krum(num_malicious_clients=2, num_clients_to_keep=12), stateful=True,
                                 section=short)
    out["multikrum_short_keep_all"] = run(Krum(num_malicious_clients=2, num_clients_to_keep=9), stateful=True,
                                          section=short)
    out["median_short"] = run(FedMedian(), stateful=False, section=short, clients=2)
    errors = {}
    try:
        run(Bulyan(num_malicious_clients=2, to_keep=0, first_aggregation_rule=aggregate_krum), stateful=False,
            section=short)
    except ValueError as error:
        errors["bulyan_short"] = f"{type(error).__name__}: {error}"
    out["errors"] = errors
    # four of ten rounds without reports: Flower counts its server rounds; "steps" numbers the rounds that reported
    sparse = data["sparse"]
    for name, cls in (("fedadagrad", FedAdagrad), ("fedadam", FedAdam), ("fedyogi", FedYogi)):
        for count in ("rounds", "steps"):
            out[f"{name}_sparse_{count}"] = run(cls(initial_parameters=ndarrays_to_parameters([np.array(
                sparse["start"])])), stateful=True, section=sparse, count=count)
    return out


if __name__ == "__main__":
    import flwr
    data = all_inputs()
    OUT.write_text(json.dumps({"flwr": flwr.__version__, "inputs": data, "outputs": flower_outputs(data)}) + "\n")
    print(f"wrote {OUT}")
