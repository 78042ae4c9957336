"""BLAS threads in the Python API: a default environment against OMP_NUM_THREADS=1.

    python benchmarks/threads.py [--ranks 2] [--runs 5] [--repeat 5] [--output results/threads.json]

Launches ``mpiexec -n RANKS`` (the one beside this Python) ``2 x RUNS`` times,
alternating two environments, the order swapped every run so that a busy
machine weighs on both alike:

* default: no thread variable set (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS,
  MKL_NUM_THREADS, ... removed), what a user's script gets;
* OMP_NUM_THREADS=1: one thread per rank, set before the ranks start.

Each launch runs a user's script: ``import numpy``, build the data with numpy,
then import mpiopt and call, ``--repeat`` times each (median kept), the lasso
(working sets, the default), the lasso on the full solver, L1 logistic
regression, data-parallel training (``mpiopt.train.train``, an MLP),
federated averaging (``run_federated``) and asynchronous SGD on MPI ranks
(``async_sgd``, Ringmaster on the small MLP problem).  The table gives, per
method, the median over the runs of each environment, the median of the
paired ratios (default / one thread, run by run; the target is at most 1.1)
and the CPU seconds the calls used on all ranks together (every thread: a
pool that spins shows there even when the wall time hides it), then the
``threads:`` line of each environment's log and the BLAS pools threadpoolctl
saw at the end.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "GOTO_NUM_THREADS", "SLURM_CPUS_PER_TASK")
ENVIRONMENTS = {"default": {}, "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"}}
METHODS = ("lasso", "lasso_full", "logistic", "train", "federated", "async_sgd")
TITLES = {"lasso": "lasso, working sets (default)", "lasso_full": "lasso, full solver",
          "logistic": "L1 logistic, working sets", "train": "train (MLP, SGD)",
          "federated": "run_federated (FedAvg)", "async_sgd": "async_sgd (ringmaster, mpi)"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5, help="launches per environment (interleaved)")
    parser.add_argument("--repeat", type=int, default=5, help="calls of each method per launch (median)")
    parser.add_argument("--rows", type=int, default=20000, help="rows of the lasso and logistic designs")
    parser.add_argument("--cols", type=int, default=400)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {','.join(METHODS)}")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per launch")
    parser.add_argument("--output", default="results/threads.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.methods = [name.strip() for name in args.methods.split(",") if name.strip()]
    unknown = [name for name in args.methods if name not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    return args


def cpu_seconds():
    """User and system CPU seconds of this process so far, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(args):
    """One launch: a user's script, timed per method; rank 0 prints one JSON line."""
    import numpy as np  # first, as a user's script does: BLAS is loaded before mpiopt is imported
    rng = np.random.default_rng(0)
    data = {}
    if {"lasso", "lasso_full", "logistic"} & set(args.methods):
        A = rng.standard_normal((args.rows, args.cols))
        x_true = np.where(rng.random(args.cols) < 0.05, rng.standard_normal(args.cols), 0.0)
        b = A @ x_true + 0.01 * rng.standard_normal(args.rows)
        data["regression"] = (A, b, (A @ x_true + 0.5 * rng.standard_normal(args.rows) > 0).astype(float))
    if {"train", "federated"} & set(args.methods):
        X = rng.standard_normal((8000, 64))
        y = np.argmax(X @ rng.standard_normal((64, 10)), axis=1)
        data["classes"] = (X, y)

    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rows = np.array_split(np.arange(args.rows), comm.size)[comm.rank]
    calls = {}
    if "regression" in data:
        from mpiopt.admm import lasso, logistic_regression
        A, b, labels = data["regression"]
        A_local, b_local, labels_local = A[rows], b[rows], labels[rows]
        calls["lasso"] = lambda: lasso(A_local, b_local, comm=comm, lam_ratio=0.1)
        calls["lasso_full"] = lambda: lasso(A_local, b_local, comm=comm, lam_ratio=0.1, working_set=False)
        calls["logistic"] = lambda: logistic_regression(A_local, labels_local, comm=comm, penalty="l1",
                                                        lam_ratio=0.1)
    if "classes" in data:
        from mpiopt.federated import partition, run_federated, split_clients
        from mpiopt.models import get_model
        from mpiopt.optim import get_optimizer
        from mpiopt.train import train
        X, y = data["classes"]
        clients = split_clients(X, y, partition("iid", y, 40, seed=0))

        def mlp():
            return get_model("mlp", n_features=64, n_classes=10, hidden=(128, 128))

        calls["train"] = lambda: train(mlp(), X, y, get_optimizer("sgd", lr=0.05), comm, epochs=1, batch_size=256)
        calls["federated"] = lambda: run_federated(mlp(), clients, "fedavg", comm, rounds=3, fraction=0.5,
                                                   local_epochs=1, batch_size=50, lr=0.05)
    if "async_sgd" in args.methods:
        from mpiopt.asyncsgd import async_sgd
        calls["async_sgd"] = lambda: async_sgd("mlp", comm, method="ringmaster", runtime="mpi", time_unit=1e-3,
                                               max_steps=50, seed=0)
    seconds, cpu, threads_line = {}, {}, None
    for name in args.methods:
        times, cpus = [], []
        for _ in range(args.repeat):
            comm.Barrier()
            start, used = time.perf_counter(), cpu_seconds()
            result = calls[name]()
            cpus.append(comm.allreduce(cpu_seconds() - used))
            times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
        seconds[name], cpu[name] = statistics.median(times), statistics.median(cpus)
        if name in ("lasso", "lasso_full", "logistic"):
            threads_line = result.info.get("blas_threads_reason")
    from threadpoolctl import threadpool_info
    pools = sorted({f"{pool['prefix']}: {pool['num_threads']}" for pool in threadpool_info()})
    reports = comm.gather({"seconds": seconds, "pools": pools})
    if comm.rank == 0:
        print(json.dumps({"seconds": seconds, "cpu": cpu, "pools": sorted({p for report in reports for p in report["pools"]}),
                          "threads_reason": threads_line}))


def launch(args, overrides):
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    environment = {key: value for key, value in os.environ.items() if key not in THREAD_VARIABLES}
    environment.update(overrides)
    command = [mpiexec, "-n", str(args.ranks), sys.executable, os.path.abspath(__file__), "--worker",
               "--rows", str(args.rows), "--cols", str(args.cols), "--repeat", str(args.repeat),
               "--methods", ",".join(args.methods)]
    completed = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=args.timeout)
    if completed.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({completed.returncode}):\n{completed.stdout}{completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def table(args, runs):
    """The markdown table: per method, each environment's median and the median of the paired ratios (run i of
    the default over run i with one thread; the two ran back to back, so a load that changes between runs
    weighs on both sides of each ratio alike)."""
    names = list(ENVIRONMENTS)
    lines = [f"{args.ranks} ranks on {os.cpu_count()} cores, {args.runs} interleaved runs of each environment "
             f"(each the median of {args.repeat} calls): medians in seconds, and the median (range) of the "
             "paired ratios",
             "", f"| method | API default | {names[1]} | ratio (range) | CPU s, all ranks: default | {names[1]} |",
             "|---|---:|---:|---:|---:|---:|"]
    summary = {}
    for method in args.methods:
        medians = [statistics.median(run["seconds"][method] for run in runs[name]) for name in names]
        cpus = [statistics.median(run["cpu"][method] for run in runs[name]) for name in names]
        ratios = [a["seconds"][method] / b["seconds"][method] for a, b in zip(runs[names[0]], runs[names[1]])]
        ratio = statistics.median(ratios)
        summary[method] = {"default": medians[0], "one_thread": medians[1], "ratio": ratio, "ratios": ratios,
                           "cpu_default": cpus[0], "cpu_one_thread": cpus[1]}
        lines.append(f"| {TITLES[method]} | {medians[0]:.3f} | {medians[1]:.3f} | {ratio:.2f} "
                     f"({min(ratios):.2f}-{max(ratios):.2f}) | {cpus[0]:.3f} | {cpus[1]:.3f} |")
    for name in names:
        last = runs[name][-1]
        lines.append(f"\n{name}: threads: {last['threads_reason']}; BLAS pools at the end: "
                     f"{', '.join(last['pools'])}")
    return "\n".join(lines), summary


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    runs = {name: [] for name in ENVIRONMENTS}
    for run in range(args.runs):
        order = list(ENVIRONMENTS) if run % 2 == 0 else list(ENVIRONMENTS)[::-1]
        for name in order:
            runs[name].append(launch(args, ENVIRONMENTS[name]))
            print(f"run {run + 1}/{args.runs} {name}: "
                  + ", ".join(f"{m} {s:.3f}" for m, s in runs[name][-1]["seconds"].items()), flush=True)
    text, summary = table(args, runs)
    print(text)
    with open(args.output, "w") as handle:
        json.dump({"ranks": args.ranks, "runs": runs, "summary": summary, "rows": args.rows, "cols": args.cols,
                   "repeat": args.repeat}, handle, indent=1)
    print(f"JSON written to {args.output}")


if __name__ == "__main__":
    sys.exit(main())
