"""Three hospitals, one logistic model: central training, FedAvg, FedProx and consensus ADMM side by side.

    mpiexec -n 3 python -m mpi4py examples/three_hospitals.py [--output three_hospitals.json]
        [--rounds 50] [--client-sampling fixed|poisson]

Each MPI rank is one hospital ("site") holding its own patients of
scikit-learn's breast-cancer data (569 tumours, 30 features); nothing but
model parameters leaves a site.  The sites differ on purpose (non-IID): site
A is a referral centre that sees mostly malignant tumours, site B a screening
clinic that sees mostly benign ones, site C a small general hospital in
between.  Every method fits the same model, L2-regularized logistic
regression with an intercept,

    minimize  (1/n) sum_j log(1 + exp(-y_j (w . x_j + c))) + (lam / 2) ||w||^2,

on standardized features (statistics pooled across sites, as a federated
standardization would), and is judged by that objective, by accuracy on a
held-out test set of each site's patients, and by its communication rounds.

* central: all patients in one place (the reference, what federation gives up);
* consensus ADMM (mpiopt.admm): exact for this convex problem, each iteration
  one round (one allreduce of the parameters);
* FedAvg and FedProx (mpiopt.federated): each round every site runs local
  epochs of SGD from the global model and the server averages.

Then the same with site C dropping out of half the rounds, and FedAvg with
client-level differential privacy (DP-FedAvg) at two noise levels.  Every
site takes part in every round (fraction 1): ``--client-sampling`` changes
no model, only the DP accounting (fixed: replace one site; poisson, at
q = 1: add or remove one site; docs/federated.md).
"""
import argparse
import json
import sys
import time

import numpy as np
from mpi4py import MPI

from mpiopt.federated import Hook

SITES = (("A: referral centre", 0.70, 200), ("B: screening clinic", 0.10, 250), ("C: general hospital", 0.45, 119))
LAM = 1e-2          # the L2 weight of the mean-loss objective above
TEST_FRACTION = 0.25


def split_sites(seed=0):
    """Each site's (X_train, y_train, X_test, y_test): label-skewed draws without replacement, standardized with the
    pooled training statistics.  Labels: 1 malignant, 0 benign."""
    from sklearn.datasets import load_breast_cancer
    data = load_breast_cancer()
    X, y = data.data, (data.target == 0).astype(float)          # scikit-learn codes malignant as 0
    rng = np.random.default_rng(seed)
    malignant, benign = rng.permutation(np.flatnonzero(y == 1)), rng.permutation(np.flatnonzero(y == 0))
    sites, used_m, used_b = [], 0, 0
    for index, (_, share, size) in enumerate(SITES):
        last = index == len(SITES) - 1
        m = len(malignant) - used_m if last else int(round(share * size))
        b = len(benign) - used_b if last else size - m
        rows = rng.permutation(np.concatenate([malignant[used_m:used_m + m], benign[used_b:used_b + b]]))
        used_m, used_b = used_m + m, used_b + b
        cut = int(round(TEST_FRACTION * rows.size))
        sites.append((X[rows[cut:]], y[rows[cut:]], X[rows[:cut]], y[rows[:cut]]))
    pooled = np.concatenate([site[0] for site in sites])
    mean, scale = pooled.mean(axis=0), pooled.std(axis=0)
    return [((Xtr - mean) / scale, ytr, (Xte - mean) / scale, yte) for Xtr, ytr, Xte, yte in sites]


def objective(w, X, y):
    """The mean logistic loss over all training patients plus (LAM / 2) ||w||^2 (w's last entry: the intercept)."""
    margin = (2 * y - 1) * (X @ w[:-1] + w[-1])
    return float(np.logaddexp(0, -margin).mean()) + 0.5 * LAM * float(w[:-1] @ w[:-1])


def accuracy(w, X, y):
    return float(np.mean(((X @ w[:-1] + w[-1]) > 0) == (y > 0.5)))


def central(sites):
    """Every patient in one place: the same objective solved to high accuracy on one process."""
    from mpiopt.admm import solve
    X = np.concatenate([s[0] for s in sites])
    y = np.concatenate([s[1] for s in sites])
    start = time.perf_counter()
    result = solve(X, y, "logistic", "l2", LAM * X.shape[0], MPI.COMM_SELF, intercept=True,
                   eps_abs=1e-10, eps_rel=1e-10)
    return result.x, {"seconds": time.perf_counter() - start, "rounds": 0}


def admm(site, comm, drop=False):
    """Consensus ADMM across the sites (one rank each): the sum-of-losses form of the same objective."""
    from mpiopt.admm import solve
    X, y = site[0], site[1]
    n = comm.allreduce(X.shape[0])
    start = time.perf_counter()
    result = solve(X, y, "logistic", "l2", LAM * n, comm, intercept=True, eps_abs=1e-6, eps_rel=1e-6)
    return result.x, {"seconds": time.perf_counter() - start, "rounds": result.iterations}


class SiteOutage(Hook):
    """A hook that makes one site fail in every other round (its update never arrives); the run tolerates it."""

    def __init__(self, site):
        self.site = site

    def transform_update(self, update, client, round):
        if client == self.site and round % 2 == 1:
            raise RuntimeError(f"site {client} is offline in round {round}")
        return update


def federated(sites, comm, strategy, options, rounds, outage=False, dp=None, client_sampling="fixed"):
    """FedAvg or FedProx with the three sites as the clients, all of them asked every round;
    ``dp``: (clip norm, noise multiplier) for client-level differential privacy (DP-FedAvg)."""
    from mpiopt.federated import DPHook, run_federated
    from mpiopt.models import get_model
    model = get_model("logistic", n_features=sites[0][0].shape[1], alpha=LAM)
    clients = [(X, y.astype(np.int64)) for X, y, _, _ in sites]
    X_test = np.concatenate([s[2] for s in sites])
    y_test = np.concatenate([s[3] for s in sites]).astype(np.int64)
    hooks = ((SiteOutage(2),) if outage else ()) + ((DPHook(dp[0], dp[1], delta=1e-5, seed=0),) if dp else ())
    start = time.perf_counter()
    result = run_federated(model, clients, strategy, comm, strategy_options=options, test_data=(X_test, y_test),
                           rounds=rounds, fraction=1.0, client_sampling=client_sampling, local_epochs=5,
                           batch_size=16, lr=0.1, seed=0,
                           tolerate_failures=outage, hooks=hooks)
    return result.params, {"seconds": time.perf_counter() - start, "rounds": result.rounds,
                           "failed_rounds": sum(1 for f in result.history["failures"] if f),
                           "epsilon": result.history["epsilon"][-1] if dp else None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50, help="federated rounds")
    parser.add_argument("--output", default="three_hospitals.json")
    parser.add_argument("--client-sampling", choices=("fixed", "poisson"), default="fixed",
                        help="how the sites of a round are drawn (fraction 1: every site either way); it sets the "
                             "DP accounting: replace one site (fixed) or add or remove one (poisson)")
    args = parser.parse_args(argv)
    from mpiopt.core.io import check_writable
    comm = MPI.COMM_WORLD
    if comm.size != len(SITES):
        if comm.rank == 0:
            print(f"run with mpiexec -n {len(SITES)}: one rank per site", file=sys.stderr)
        return 2
    check_writable(args.output, comm)
    sites = split_sites()
    mine = sites[comm.rank]
    X_train = np.concatenate([s[0] for s in sites])
    y_train = np.concatenate([s[1] for s in sites])
    X_test = np.concatenate([s[2] for s in sites])
    y_test = np.concatenate([s[3] for s in sites])
    say = (lambda *a: print(*a, flush=True)) if comm.rank == 0 else (lambda *a: None)
    for (name, share, _), (Xtr, ytr, Xte, _) in zip(SITES, sites):
        say(f"site {name}: {Xtr.shape[0]} training and {Xte.shape[0]} test patients, "
            f"{ytr.mean():.0%} malignant")

    runs = {}
    runs["central"] = central(sites) if comm.rank == 0 else (None, None)
    runs["central"] = comm.bcast(runs["central"], root=0)
    for outage in (False, True):
        suffix = ", site C offline every other round" if outage else ""
        if not outage:
            runs["consensus ADMM"] = admm(mine, comm)
        else:
            # Consensus ADMM is synchronous: every iteration needs every site, so each iteration waits
            # for site C to come back; the same iterations take twice the rounds.
            x, stats = runs["consensus ADMM"]
            runs["consensus ADMM" + suffix] = (x, dict(stats, rounds=2 * stats["rounds"]))
        runs["FedAvg" + suffix] = federated(sites, comm, "fedavg", {}, args.rounds, outage)
        runs["FedProx (mu = 0.1)" + suffix] = federated(sites, comm, "fedprox", {"mu": 0.1}, args.rounds, outage)

    for clip, noise in ((1.0, 0.1), (1.0, 1.0)):
        runs[f"FedAvg + DP (S = {clip}, z = {noise})"] = federated(sites, comm, "fedavg", {}, args.rounds,
                                                                  dp=(clip, noise),
                                                                  client_sampling=args.client_sampling)

    reference = objective(runs["central"][0], X_train, y_train)
    table = []
    for name, (w, stats) in runs.items():
        value = objective(w, X_train, y_train)
        per_site = [accuracy(w, s[2], s[3]) for s in sites]
        table.append({"method": name, "objective": value, "relative_gap": (value - reference) / reference,
                      "test_accuracy": accuracy(w, X_test, y_test), "per_site_accuracy": per_site,
                      "rounds": stats["rounds"], "seconds": stats["seconds"], "epsilon": stats.get("epsilon")})
    if comm.rank == 0:
        print("\n| method | objective | gap to central | test accuracy | A / B / C | rounds | epsilon (delta 1e-5) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for row in table:
            sites_text = " / ".join(f"{a:.3f}" for a in row["per_site_accuracy"])
            epsilon = "" if row["epsilon"] is None else f"{row['epsilon']:.3g}"
            print(f"| {row['method']} | {row['objective']:.6f} | {row['relative_gap']:.1e} | "
                  f"{row['test_accuracy']:.3f} | {sites_text} | {row['rounds']} | {epsilon} |")
        from mpiopt.core.io import write_json
        write_json(args.output, {"example": "three_hospitals", "lam": LAM, "rounds": args.rounds,
                                 "client_sampling": args.client_sampling, "runs": table})
        print(f"\nJSON written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
