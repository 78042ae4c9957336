"""Fit the scaling model of consensus ADMM (mpiopt.admm.scaling), check it at 1, 2 and 4 ranks, project to 1,024.

    python benchmarks/scaling_model.py [--ranks 1 2 4] [--out results/scaling_model.json]
    python benchmarks/scaling_model.py --quick          # serial, small: what the tests run

The driver never initializes MPI itself; it runs each stage in a child process,
plain Python at one rank and ``mpiexec -n p`` above (next to this Python), all
with OMP_NUM_THREADS=1 (one core per rank: the model's machine):

1. ``compute``: single-threaded numpy/scipy kernels (syrk Gram, Cholesky,
   gemv, (A * A).sum(), two triangular solves, vector adds) fitted to
   seconds per flop or byte; delta and delta_gap from ADMM on a tiny problem
   (20 columns) at one rank, with and without a gap at every iteration;
2. ``network`` (2 ranks): MPI_Allreduce of 1 .. 10^6 doubles, fitted to
   alpha and beta under MPICH's model; the reducers' gamma and copy; and
   the ``auto`` reducer at the same sizes (to check the model at 2 ranks);
3. ``measure`` at each p: the lasso (lam_ratio 0.1) on A = 100000 x 1000
   converged (eps 1e-6, gap_tol 1e-8) and on 20000 x 2000 for a fixed 200
   iterations with the gap every 10 (iteration-dominated); each phase's time
   (the slowest rank's), with the working-set solver as well when
   ADMMSettings has ``working_set``.

Then the predictions per phase against the measurements, and the 1 .. 1024-rank
projections for 10^5 x 10^3 and 10^7 x 10^4 with the network fitted here and
with an assumed cluster (alpha 2 us, 10 GB/s, 32 ranks per node).  The tables
are printed once and everything goes to the JSON.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"  # before numpy: one thread per rank, as the model assumes
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLUSTER = {"alpha": 2e-6, "beta": 1e-10, "ranks_per_node": 32}  # 2 us, 10 GB/s, 32 ranks per node
FULL_CASES = {"quick": [("A", 4000, 200, "converged"), ("B", 2000, 300, "fixed")],
              "full": [("A", 100000, 1000, "converged"), ("B", 20000, 2000, "fixed")]}
FIXED_ITERATIONS = 200
LAM_RATIO = 0.1


# -- stage 1: compute rates (no MPI) ---------------------------------------------------------------------------
def best_time(function, repeat):
    function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def stage_compute(quick):
    import scipy.linalg as linalg
    from mpiopt.admm import scaling
    rng = np.random.default_rng(0)
    shapes = [(2000, 100), (4000, 200), (8000, 300)] if quick else [(8000, 250), (20000, 500), (40000, 1000)]
    orders = [100, 200, 300] if quick else [250, 500, 1000, 2000]
    raw = {key: ([], []) for key in ("gram", "gemv", "square", "chol", "trsv", "vec")}

    def add(key, work, seconds):
        raw[key][0].append(float(work))
        raw[key][1].append(float(seconds))

    for m, n in shapes:
        A = rng.standard_normal((m, n))
        v, x = rng.standard_normal(m), rng.standard_normal(n)
        add("gram", m * n * n, best_time(lambda: A.T @ A, 1 if m * n * n > 5e9 else 3))
        add("gemv", 8 * m * n, best_time(lambda: A @ x, 3))
        add("gemv", 8 * m * n, best_time(lambda: A.T @ v, 3))
        add("square", 8 * m * n, best_time(lambda: float((A * A).sum()), 3))
    for n in orders:
        B = rng.standard_normal((n, n))
        G = B @ B.T + n * np.eye(n)
        add("chol", n ** 3 / 3, best_time(lambda: linalg.cholesky(G, lower=True, check_finite=False), 3))
        L = np.asfortranarray(linalg.cholesky(G, lower=True, check_finite=False))
        r = rng.standard_normal(n)

        def solves():
            y = linalg.solve_triangular(L, r, lower=True, check_finite=False)
            return linalg.solve_triangular(L, y, lower=True, trans="T", check_finite=False)
        add("trsv", 8 * n * n, best_time(solves, 20))
    for n in (1000, 10000, 100000):
        a, b = rng.standard_normal(n), rng.standard_normal(n)
        add("vec", 24 * n, best_time(lambda: np.add(a, b, out=a), 50))
    fits = {key: scaling.fit_rate(*values) for key, values in raw.items()}
    return {"rates": {key: rate for key, (rate, _) in fits.items()}, "raw": raw}


# -- MPI stages (run in children) ------------------------------------------------------------------------------
def stage_delta(quick):
    """delta and delta_gap at one rank: ADMM on a 400 x 20 lasso for a fixed number of iterations."""
    from mpi4py import MPI
    from mpiopt.admm import lasso
    comm = MPI.COMM_SELF
    rng = np.random.default_rng(1)
    A = rng.standard_normal((400, 20))
    b = A[:, :3].sum(axis=1) + 0.1 * rng.standard_normal(400)
    iterations = 100 if quick else 400
    common = dict(lam_ratio=0.1, comm=comm, eps_abs=0.0, eps_rel=0.0, max_iter=iterations, **full_solver())
    plain, gapped = [], []
    for _ in range(3):
        t = lasso(A, b, **common).timings
        plain.append((t["solve"] / iterations, t["x_step"] / iterations, t["communication"] / iterations))
        gapped.append(lasso(A, b, gap_tol=0.0, gap_every=1, **common).timings["solve"] / iterations)
    total, x_call, comm_call = min(plain)
    delta, with_gap = total - x_call - comm_call, min(gapped)
    calls = []
    for _ in range(5):
        start = time.perf_counter()
        lasso(A, b, **dict(common, max_iter=1))
        calls.append(time.perf_counter() - start)
    return {"delta": delta, "x_call": x_call, "comm_call": comm_call, "delta_gap": max(with_gap - total, 0.0),
            "delta_solve": max(min(calls) - total, 0.0)}


def full_solver():
    """The setting that selects the full solver where the working-set one exists (it is the default there)."""
    import dataclasses
    from mpiopt.admm import ADMMSettings
    return {"working_set": False} if "working_set" in {f.name for f in dataclasses.fields(ADMMSettings)} else {}


def stage_network(quick):
    from mpi4py import MPI
    from mpiopt.collectives import get_reducer
    from mpiopt.collectives.models import fit_gamma_copy
    comm = MPI.COMM_WORLD
    counts = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144] + ([] if quick else [1000000])
    reducer = get_reducer("auto", comm)
    mpi_times, auto_times = [], []
    for count in counts:
        buffer = np.ones(count)
        repeat = max(5, min(200, int(2e7 // (8 * count + 1000))))
        for label, function, out in (("mpi", lambda: comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM), mpi_times),
                                     ("auto", lambda: reducer.allreduce(buffer, buffer), auto_times)):
            function()
            comm.Barrier()
            samples = []
            for _ in range(repeat):
                start = time.perf_counter()
                function()
                samples.append(time.perf_counter() - start)
            out.append(comm.allreduce(float(np.median(samples)), op=MPI.MAX))
    reducer.close()
    gamma_red, copy = fit_gamma_copy(nbytes=(8 << 20) if quick else (32 << 20), dtype=np.float64)
    return {"ranks": comm.size, "counts": counts, "mpi": mpi_times, "auto": auto_times,
            "gamma_red": gamma_red, "copy": copy}


def shard(comm, m, n, seed):
    """This rank's rows of a Gaussian design with 5% of the coefficients 1, and b with noise 0.1."""
    low, high = comm.rank * m // comm.size, (comm.rank + 1) * m // comm.size
    rng = np.random.default_rng([seed, comm.rank])
    A = rng.standard_normal((high - low, n))
    w = np.zeros(n)
    w[:max(1, n // 20)] = 1.0
    return A, A @ w + 0.1 * rng.standard_normal(high - low)


def gap_evaluations(result):
    """Gap evaluations in the solve: those recorded in the history, and the final certificate when the
    last iteration did not evaluate one."""
    history = result.history.get("gap", [])
    recorded = sum(1 for value in history if value == value)
    final = 0 if history and history[-1] == history[-1] else (1 if result.gap is not None else 0)
    return recorded + final


def stage_measure(quick, repeat):
    import dataclasses
    from mpi4py import MPI
    import mpiopt.admm as admm
    comm = MPI.COMM_WORLD
    has_ws = "working_set" in {f.name for f in dataclasses.fields(admm.ADMMSettings)}
    out = []
    warm = shard(comm, 400 * comm.size, 20, seed=3)  # first calls pay for imports and caches: not timed
    admm.lasso(*warm, lam_ratio=LAM_RATIO, comm=comm, max_iter=20, **full_solver())
    if has_ws:
        admm.lasso(*warm, lam_ratio=LAM_RATIO, comm=comm, max_iter=20, working_set=True)
    for name, m, n, kind in FULL_CASES["quick" if quick else "full"]:
        A, b = shard(comm, m, n, seed=7)
        settings = dict(lam_ratio=LAM_RATIO, comm=comm)
        if kind == "converged":
            settings.update(eps_abs=1e-6, eps_rel=1e-6, gap_tol=1e-8)
        else:
            settings.update(eps_abs=0.0, eps_rel=0.0, gap_tol=0.0, gap_every=10, max_iter=FIXED_ITERATIONS)
        variants = [("full", full_solver())] + ([("working_set", {"working_set": True})] if has_ws and kind == "converged"
                                     else [])
        for solver, extra in variants:
            runs = []
            for _ in range(repeat):
                comm.Barrier()
                start = time.perf_counter()
                try:
                    result = admm.lasso(A, b, **settings, **extra)
                    error = None
                except Exception as exc:  # the working-set solver may be mid-change: report, do not fail
                    result, error = None, f"{type(exc).__name__}: {exc}"
                wall = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
                if result is None:
                    runs.append({"error": error})
                    break
                timings = {key: comm.allreduce(float(value), op=MPI.MAX) for key, value in result.timings.items()
                           if isinstance(value, (int, float))}
                info = result.info
                runs.append({"wall": wall, "timings": timings, "iterations": int(result.iterations),
                             "status": result.status, "rho_changes": int(info.get("rho_changes", 0) or 0),
                             "gap_evaluations": gap_evaluations(result), "relative_gap": result.relative_gap,
                             "shards": info.get("shards"), "reducer": info.get("reducer"),
                             "outer_iterations": info.get("outer_iterations"),
                             "working_set_sizes": [int(s) for s in info.get("working_set_sizes", []) or []],
                             "screened": info.get("screened")})
            good = [run for run in runs if "error" not in run]
            best = min(good, key=lambda run: run["wall"]) if good else runs[-1]
            out.append(dict(best, case=name, m=m, n=n, kind=kind, solver=solver, ranks=comm.size,
                            repeats=len(good)))
        del A, b
    return out


STAGES = {"delta": stage_delta, "network": stage_network}


def child(args):
    from mpi4py import MPI
    if args.stage == "measure":
        payload = stage_measure(args.quick, args.repeat)
    else:
        payload = STAGES[args.stage](args.quick)
    if MPI.COMM_WORLD.rank == 0:
        Path(args.result).write_text(json.dumps(payload))


def run_child(stage, ranks, quick, repeat, timeout):
    """Run a stage at ``ranks`` ranks (plain Python at one) and return its JSON."""
    with tempfile.TemporaryDirectory() as folder:
        result = Path(folder) / "out.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--stage", stage, "--result", str(result),
                   "--repeat", str(repeat)] + (["--quick"] if quick else [])
        if ranks > 1:
            command = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(ranks)] + command
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        if completed.returncode != 0 or not result.exists():
            raise RuntimeError(f"stage {stage} at {ranks} ranks failed ({completed.returncode}):\n"
                               f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
        return json.loads(result.read_text())


# -- the driver -----------------------------------------------------------------------------------------------
def predicted_phases(run, reference, compute, network):
    """The model's phases for a measured run, with the iteration counts of ``reference`` (the 1-rank run)."""
    from mpiopt.admm import scaling
    p, m, n = run["ranks"], run["m"], run["n"]
    if run["solver"] == "working_set":
        return scaling.predict_working_set(m, n, p, reference["working_set_sizes"], reference["iterations"],
                                           compute, network)
    return scaling.predict_full(m, n, p, reference["iterations"], compute, network,
                                reference["gap_evaluations"], reference["rho_changes"])


def measured_phases(run):
    """The measured phases, named as the model's: setup is the wall time outside the iterations."""
    t, wall = run["timings"], run["wall"]
    if run["solver"] == "working_set":
        phases = {key: t[key] for key in ("gap", "gather", "solve") if key in t}
        phases["other"] = wall - sum(phases.values())
        phases["total"] = wall
        return phases
    solve = t["solve"]
    other = solve - t.get("x_step", 0.0) - t.get("communication", 0.0) - t.get("gap", 0.0)
    return {"setup": wall - solve, "x_step": t.get("x_step"), "communication": t.get("communication"),
            "overhead": other, "gap": t.get("gap"), "solve": solve, "total": wall}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one rank, serial (for the tests)")
    parser.add_argument("--ranks", type=int, nargs="+", default=None, help="rank counts to measure (1 2 4)")
    parser.add_argument("--repeat", type=int, default=None, help="solves per case, the fastest kept (2; quick 1)")
    parser.add_argument("--out", default=str(ROOT / "results" / "scaling_model.json"))
    parser.add_argument("--stage", choices=["delta", "network", "measure"], help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 2
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.stage:
        return child(args)
    ranks = args.ranks or ([1] if args.quick else [1, 2, 4])
    started = time.perf_counter()
    timeout = 600
    fitted, compute, net, network, cluster = fit_models(args, ranks, timeout)
    runs = []
    for p in ranks:
        runs.extend(run_child("measure", p, args.quick, args.repeat, timeout))
    measure_seconds = time.perf_counter() - started

    say = print
    print_parameters(say, args, compute, net, network)
    allreduce_check(say, net, network)
    checks = phase_checks(say, runs, ranks, compute, network)
    projections = projections_part(say, runs, ranks, compute, network, cluster)
    say(f"\nMeasured in {measure_seconds:.0f} s.")

    payload = {"quick": args.quick, "ranks": ranks, "cores": os.cpu_count(),
               "compute": {k: getattr(compute, k) for k in ("gamma_flop", "gamma_chol", "gamma_mem", "gamma_trsv",
                                                           "gamma_vec", "delta", "delta_gap", "gamma_square", "x_call", "comm_call",
                                                           "delta_solve")},
               "network": vars(network) if not hasattr(network, "__dataclass_fields__") else
               {k: getattr(network, k) for k in network.__dataclass_fields__},
               "cluster": {k: getattr(cluster, k) for k in cluster.__dataclass_fields__},
               "kernel_timings": fitted["raw"], "allreduce": net, "runs": runs, "checks": checks,
               "projections": {key: [{k: v for k, v in row.items()} for row in rows]
                               for key, rows in projections.items()},
               "seconds": measure_seconds}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=1, default=float))
    say(f"JSON written to {args.out}")
    return 0




def fit_models(args, ranks, timeout):
    """(the raw fits, the compute model, the 2-rank network measurements or None, this machine's network
    model, the cluster's)."""
    from mpiopt.admm import scaling
    fitted = stage_compute(args.quick)
    fitted.update(run_child("delta", 1, args.quick, 1, timeout))
    rates = fitted["rates"]
    compute = scaling.Compute(gamma_flop=rates["gram"], gamma_chol=rates["chol"], gamma_mem=rates["gemv"],
                              gamma_trsv=rates["trsv"], gamma_vec=rates["vec"], delta=fitted["delta"],
                              delta_gap=fitted["delta_gap"], gamma_square=rates["square"], x_call=fitted["x_call"],
                              comm_call=fitted["comm_call"], delta_solve=fitted["delta_solve"])
    if max(ranks) > 1:
        net = run_child("network", 2, args.quick, 1, timeout)
        alpha, beta = scaling.fit_alpha_beta(2, net["counts"], net["mpi"], "mpi", net["gamma_red"])
        network = scaling.Network(alpha, beta, net["gamma_red"], net["copy"], 0)
    else:  # one rank: no wire to fit; a typical shared-memory MPICH for the projections
        net = None
        network = scaling.Network(1e-6, 1e-10, rates["vec"], rates["vec"], 0)
    cluster = scaling.Network(CLUSTER["alpha"], CLUSTER["beta"], network.gamma_red, network.copy,
                              CLUSTER["ranks_per_node"])

    return fitted, compute, net, network, cluster


def print_parameters(say, args, compute, net, network):
    """The table of the fitted parameters."""
    from mpiopt.admm import scaling
    say(f"# Scaling model of consensus ADMM (mpiopt.admm.scaling){' [quick]' if args.quick else ''}\n")
    say("Fitted on this machine (one thread per rank):\n")
    params = [("gamma_flop (Gram, syrk)", compute.gamma_flop, "s/flop", 1 / compute.gamma_flop / 1e9, "GFlop/s"),
              ("gamma_chol (Cholesky)", compute.gamma_chol, "s/flop", 1 / compute.gamma_chol / 1e9, "GFlop/s"),
              ("gamma_mem (gemv)", compute.gamma_mem, "s/byte", 1 / compute.gamma_mem / 1e9, "GB/s"),
              ("gamma_square ((A*A).sum())", compute.square, "s/byte", 1 / compute.square / 1e9, "GB/s"),
              ("gamma_trsv (2 triangular solves)", compute.gamma_trsv, "s/byte", 1 / compute.gamma_trsv / 1e9,
               "GB/s"),
              ("gamma_vec (vector add)", compute.gamma_vec, "s/byte", 1 / compute.gamma_vec / 1e9, "GB/s"),
              ("delta (per iteration)", compute.delta, "s", None, ""),
              ("delta_gap (per gap evaluation)", compute.delta_gap, "s", None, ""),
              ("delta_solve (per solver call)", compute.delta_solve, "s", None, ""),
              ("x_call (per x-step, fixed)", compute.x_call, "s", None, ""),
              ("comm_call (per iteration, the two reducer calls, fixed)", compute.comm_call, "s", None, ""),
              ("alpha" + (" (MPI_Allreduce, 2 ranks)" if net else " (assumed)"), network.alpha, "s", None, ""),
              ("beta" + (" (MPI_Allreduce, 2 ranks)" if net else " (assumed)"), network.beta, "s/byte",
               (1 / network.beta / 1e9) if network.beta else None, "GB/s"),
              ("gamma_red (reduction)", network.gamma_red, "s/byte", None, ""),
              ("copy", network.copy, "s/byte", None, "")]
    say(scaling.format_table(["parameter", "value", "unit", "rate", ""],
                             [(name, f"{value:.3g}", unit, "" if rate is None else f"{rate:.3g}", runit)
                              for name, value, unit, rate, runit in params]))


def allreduce_check(say, net, network):
    """All-reduce at 2 ranks, measured against modelled (when there is a network to measure)."""
    from mpiopt.admm import scaling
    allreduce_rows = []
    if net:
        for count, t_mpi, t_auto in zip(net["counts"], net["mpi"], net["auto"]):
            pm = scaling.allreduce_time(2, count, network, "mpi")
            pa = scaling.allreduce_time(2, count, network, "auto")
            allreduce_rows.append((count, scaling.seconds(t_mpi), scaling.seconds(pm), f"{pm / t_mpi:.2f}",
                                   scaling.seconds(t_auto), scaling.seconds(pa), f"{pa / t_auto:.2f}"))
        say("\nAll-reduce at 2 ranks, measured and modelled:\n")
        say(scaling.format_table(["doubles", "MPI measured", "MPI model", "ratio", "auto measured", "auto model",
                                  "ratio"], allreduce_rows))



def phase_checks(say, runs, ranks, compute, network):
    """Predicted against measured, per phase of every run; returns the rows."""
    from mpiopt.admm import scaling
    check_rows, checks = [], []
    for run in runs:
        if "error" in run:
            say(f"\n{run['case']} {run['solver']} at {run['ranks']} ranks failed: {run['error']}")
            continue
        reference = next(r for r in runs if r["case"] == run["case"] and r["solver"] == run["solver"]
                         and r["ranks"] == min(ranks) and "error" not in r)
        predicted = predicted_phases(run, reference, compute, network)
        measured = measured_phases(run)
        for phase, value in measured.items():
            if value is None or phase not in predicted:
                continue
            ratio = predicted[phase] / value if value > 0 else float("nan")
            checks.append({"case": run["case"], "solver": run["solver"], "ranks": run["ranks"], "phase": phase,
                           "predicted": predicted[phase], "measured": value, "ratio": ratio,
                           "iterations": run["iterations"], "reference_iterations": reference["iterations"]})
            check_rows.append((f"{run['case']} {run['m']}x{run['n']}", run["solver"], run["ranks"],
                               f"{run['iterations']} ({reference['iterations']})", phase,
                               scaling.seconds(predicted[phase]), scaling.seconds(value), f"{ratio:.2f}"))
    say(f"\nPredicted against measured, per phase (iterations: measured at p (used: at p = {min(ranks)});"
        f" 4 ranks on {os.cpu_count()} cores are oversubscribed where ranks > cores):\n")
    say(scaling.format_table(["case", "solver", "ranks", "iterations", "phase", "predicted", "measured", "ratio"],
                             check_rows))

    return checks


def projections_part(say, runs, ranks, compute, network, cluster):
    """The model's projections to larger problems, on this machine's network and the cluster's."""
    from mpiopt.admm import scaling
    projections = {}
    reference = next((r for r in runs if r["case"] == "A" and r["solver"] == "full" and "error" not in r), None)
    iterations = reference["iterations"] if reference else 10
    gaps = reference["gap_evaluations"] if reference else 1
    sizes = [(100000, 1000), (10 ** 7, 10 ** 4)]
    memory_limit = 4 << 30  # 4 GiB per rank: a 128 GiB node with 32 ranks
    for m, n in sizes:
        for label, net_model in (("this machine's network", network), ("cluster", cluster)):
            rows = scaling.scaling_table(m, n, iterations, compute, net_model, gap_evaluations=gaps,
                                         memory_limit=memory_limit)
            projections[f"{m}x{n} {label}"] = rows
        say(f"\nProjection, {m} x {n}, {iterations} iterations and {gaps} gap evaluation(s) (from case A at "
            f"p = {min(ranks)}), memory limit {scaling.human_bytes(memory_limit)} per rank:\n")
        table = []
        for here, there in zip(projections[f"{m}x{n} this machine's network"], projections[f"{m}x{n} cluster"]):
            table.append((here["ranks"], here["shard"], scaling.human_bytes(here["memory_per_rank"]),
                          "yes" if here["fits"] else "no", scaling.seconds(here["setup"]),
                          scaling.seconds(here["solve"]), scaling.seconds(here["total"]),
                          f"{here['efficiency']:.2f}", scaling.seconds(there["solve"]),
                          scaling.seconds(there["total"]), f"{there['efficiency']:.2f}"))
        say(scaling.format_table(["ranks", "shard", "memory/rank", "fits", "setup", "solve (here)", "total (here)",
                                  "eff. (here)", "solve (cluster)", "total (cluster)", "eff. (cluster)"], table))
    return projections


if __name__ == "__main__":
    sys.exit(main())
