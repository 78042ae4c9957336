"""Consensus-ADMM lasso beside scikit-learn's Lasso on the same data, in one run.

    mpiexec -n 2 python benchmarks/admm_lasso.py --rows 100000 --cols 1000

Measured, each as the median of --repeat runs:

* time-to-solution: for each solver a ladder of stopping tolerances is run from
  a cold start, every run timed whole (ADMM: validation, Gram matrices,
  factorization and iterations; scikit-learn: ``fit``).  A solver's
  time-to-solution is the time of the loosest tolerance whose objective is
  within --target (1e-6) relative of the reference objective, the best
  objective any run reached;
* ADMM setup time and iterations, and the per-iteration time of a fixed-length
  run (--iterations, tolerances 0) beside the bare per-iteration floor: one
  cached-factor solve plus one allreduce of n doubles, on the same factor,
  timed in alternation with the ADMM runs (median of the per-pair ratios).

scikit-learn runs on rank 0 with all of the machine's cores available to its
BLAS while the other ranks sleep; it gets the full matrix as generated (C
order) and, separately, in its preferred Fortran order (the copy not timed).
Output: a table on rank 0, JSON (--output) and optionally a plot (--plot).

With --designs (or --quick), the designs suite instead: time to a
relative objective gap of 1e-6 beside scikit-learn, celer and skglm on
independent, Toeplitz-correlated (0.5, 0.9), wide and sparse power-law CSR
designs and a tf-idf text corpus (text_corpus.py), at one weight or several
(--lam-ratios); see sparse_solvers.py for the definitions.

    mpiexec -n 2 python benchmarks/admm_lasso.py --designs all
    mpiexec -n 2 python benchmarks/admm_lasso.py --designs sparse,text --lam-ratios 0.1,0.05,0.01,0.005
    mpiexec -n 2 python benchmarks/admm_lasso.py --quick        # seconds (the tests)

--quick shrinks every size (and --repeat, --n-lams) to its tiny preset; a size
given explicitly wins (``--quick --rows 3000 --cols 40``: the tall design is
3000 x 40, the rest tiny), and the suite's first line says which were kept.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import sparse_solvers  # noqa: E402
from common import start, summarize, timed, wait_without_spinning, write_result  # noqa: E402
from mpiopt.core.threads import available_cores  # noqa: E402

ADMM_TOLERANCES = (1e-3, 1e-4, 1e-5, 1e-6, 1e-8, 1e-10)
SKLEARN_TOLERANCES = (1e-2, 1e-3, 1e-4, 1e-6, 1e-8, 1e-10)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100000)
    parser.add_argument("--cols", type=int, default=1000)
    parser.add_argument("--density", type=float, default=0.05)
    parser.add_argument("--noise", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--correlation", type=float, default=0.0, help="pairwise correlation of the columns")
    parser.add_argument("--lam-ratio", type=float, default=0.1, help="lam as a fraction of lambda_max")
    parser.add_argument("--rho", type=float, default=1.0)
    parser.add_argument("--alpha", type=float, default=1.6)
    parser.add_argument("--adaptive-rho", default="none", choices=["none", "osqp", "balance"],
                        help="rho adaptation (default none: the fixed rho above, as measured in the docs)")
    parser.add_argument("--anderson", type=int, default=0,
                        help="Anderson acceleration memory (default 0, as measured in the docs)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per timed configuration (median)")
    parser.add_argument("--iterations", type=int, default=500,
                        help="iterations of the fixed-length run that measures the per-iteration time")
    parser.add_argument("--target", type=float, default=1e-6, help="relative objective gap that counts as solved")
    parser.add_argument("--no-sklearn", action="store_true", help="ADMM only")
    parser.add_argument("--output", default="results/admm_lasso.json")
    parser.add_argument("--plot", help="PNG file: relative objective gap against time for every run")
    sparse_solvers.add_arguments(parser, "lasso")
    args = parser.parse_args(argv)
    quick = sparse_solvers.apply_quick(argparse.Namespace(**vars(args)))
    preset = {name for name, value in vars(quick).items() if value != getattr(args, name)}
    quick.kept = sorted(preset & given_options(parser, argv))  # what the command line says wins over the preset
    for name in quick.kept:
        setattr(quick, name, getattr(args, name))
    return quick


def given_options(parser, argv):
    """The options given on the command line, as their dests (argparse leaves a name alone that the namespace
    already has: a namespace of markers keeps them where nothing was given)."""
    marker = object()
    probe = argparse.Namespace(**{action.dest: marker for action in parser._actions})
    parser.parse_args(argv, namespace=probe)
    return {name for name, value in vars(probe).items() if value is not marker and name != "quick"}


def designs_run(args):
    """Whether this run is the designs suite (--designs or --quick)."""
    return args.designs is not None or args.quick


def output_path(args):
    """The JSON's path: --output; the designs suite's default differs from the single design's."""
    if designs_run(args) and args.output == "results/admm_lasso.json":
        return "results/admm_lasso_designs.json"
    return args.output


def main(argv=None):
    args, comm, say = start(parse_args, argv, outputs=lambda args, comm: [output_path(args), args.plot],
                            plots=("plot",))
    import numpy as np

    from mpiopt.admm import lasso
    from mpiopt.data.synthetic import make_lasso

    if designs_run(args):
        return designs_suite(args, comm, say)
    say(f"admm_lasso benchmark: {args.rows} x {args.cols}, {comm.size} ranks, "
        f"{os.environ.get('OPENBLAS_NUM_THREADS')} BLAS thread(s) per rank, {available_cores()} cores")

    A, b, _ = make_lasso(args.rows, args.cols, args.density, args.noise, args.seed, args.correlation, comm=comm)
    lambda_max = float(np.abs(comm.allreduce(A.T @ b)).max())
    lam = args.lam_ratio * lambda_max

    def objective(x):
        """Exact global objective from the rows themselves (the same formula for every solver)."""
        residual = A @ x - b
        return comm.allreduce(0.5 * float(residual @ residual)) + lam * float(np.abs(x).sum())

    def run_admm(tolerance):
        return timed(comm, lambda: lasso(A, b, lam, comm=comm, rho=args.rho, alpha=args.alpha, eps_abs=tolerance,
                                   eps_rel=tolerance, max_iter=100000, adaptive_rho=args.adaptive_rho,
                                   anderson=args.anderson))

    run_admm(ADMM_TOLERANCES[0])  # warm-up: first-touch page faults and library loading, not timed
    runs = []
    for tolerance in ADMM_TOLERANCES:
        repeats = [run_admm(tolerance) for _ in range(args.repeat)]
        result = repeats[0][0]
        runs.append({
            "solver": "mpiopt ADMM", "tolerance": tolerance, "iterations": result.iterations,
            "objective": objective(result.x), "status": result.status,
            "seconds": statistics.median(t for _, t in repeats),
            "setup": statistics.median(r.timings["setup"] for r, _ in repeats),
            "per_iteration": statistics.median(r.timings["per_iteration"] for r, _ in repeats)})
        say(f"  ADMM tol {tolerance:.0e}: {runs[-1]['iterations']} iterations, {runs[-1]['seconds']:.3f} s")

    per_iteration = per_iteration_floor(args, comm, A, b, lam)
    if not args.no_sklearn:
        runs += run_sklearn(args, comm, lam, objective, min(run["objective"] for run in runs), say)

    reference = min(run["objective"] for run in runs)
    for run in runs:
        run["relative_gap"] = (run["objective"] - reference) / reference
    summary = summarize(runs, args.target)
    if comm.rank == 0:
        print_tables(args, comm.size, runs, summary, per_iteration, reference)
    write_result(comm, args.output, {
        "benchmark": "admm_lasso", "rows": args.rows, "cols": args.cols, "ranks": comm.size,
        "correlation": args.correlation, "density": args.density, "noise": args.noise, "cores": available_cores(),
        "lam": lam, "lambda_max": lambda_max, "repeat": args.repeat, "target": args.target,
        "reference_objective": reference, "runs": runs, "time_to_solution": summary, "per_iteration": per_iteration})
    if comm.rank == 0 and args.plot:
        plot(runs, args.plot, args.target, f"lasso {args.rows} x {args.cols}, column correlation "
             f"{args.correlation}, {comm.size} ranks (median of {args.repeat})")
        print(f"plot written to {args.plot}")
    return 0


def per_iteration_floor(args, comm, A, b, lam):
    """ADMM's seconds per iteration against the floor, one cached-factor solve and one allreduce of n
    doubles, timed in alternation."""
    import numpy as np
    from mpi4py import MPI

    from mpiopt.admm import lasso
    from mpiopt.admm.design import Design
    from mpiopt.admm.losses import SquaredLossShard
    from mpiopt.core import backend

    shard = SquaredLossShard(Design(A, False, np), b, np)
    shard.factorize(args.rho)
    buffer = np.zeros(args.cols)
    vector = np.ones(args.cols)

    def bare_iteration():
        buffer[...] = backend.cholesky_solve(np, shard._factor, shard.Atb + args.rho * vector)
        comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)

    # Floor and ADMM are timed in alternation, so a change in the machine's load between them cannot
    # tilt the ratio; the ratio quoted is the median of the per-pair ratios.
    floor_samples, steady, ratios = [], [], []
    for _ in range(max(args.repeat, 5)):
        _, seconds = timed(comm, lambda: [bare_iteration() for _ in range(args.iterations)])
        floor_samples.append(seconds / args.iterations)
        result, _ = timed(comm, lambda: lasso(A, b, lam, comm=comm, rho=args.rho, alpha=args.alpha, eps_abs=0.0,
                                              eps_rel=0.0, max_iter=args.iterations, adaptive_rho="none", anderson=0))
        steady.append(comm.allreduce(result.timings["per_iteration"], op=MPI.MAX))
        ratios.append(steady[-1] / floor_samples[-1])
    return {"iterations": args.iterations, "admm": statistics.median(steady),
            "floor": statistics.median(floor_samples), "ratio": statistics.median(ratios), "ratios": ratios}


def designs_suite(args, comm, say):
    """The lasso comparison over the designs (sparse_solvers.py)."""
    output = output_path(args)
    kept = ", ".join("--" + name.replace("_", "-") for name in args.kept)
    say(f"admm_lasso designs suite: {comm.size} ranks, {available_cores()} cores, "
        f"lam = {sparse_solvers.lam_ratios(args, 'lasso')} lambda_max, "
        f"target {args.target:g}" + (f"; --quick sizes except {kept}, as given" if kept else
                                     "; --quick sizes" if args.quick else ""))
    payload = sparse_solvers.run_family("lasso", args, comm, say)
    say("\n" + payload["markdown"])
    write_result(comm, output, payload)
    if comm.rank == 0:
        sparse_solvers.write_markdown_beside(output, payload)
    return 0


def run_sklearn(args, comm, lam, objective, best_objective, say):
    """scikit-learn's Lasso on rank 0, with all cores; the other ranks sleep meanwhile.

    Each layout's tolerance ladder stops at the first rung within the target gap
    of the best objective seen so far: tighter rungs only take longer.
    """
    import numpy as np

    from mpiopt.data.synthetic import lasso_rows
    runs = []
    if comm.rank == 0:
        from sklearn.linear_model import Lasso
        from threadpoolctl import threadpool_limits
        A_full, b_full = lasso_rows(args.rows, args.cols, 0, args.rows, args.density, args.noise, args.seed,
                                    args.correlation)
        layouts = {"C order": A_full, "Fortran order": np.asfortranarray(A_full)}
        with threadpool_limits(limits=available_cores()):
            for layout, X in layouts.items():
                Lasso(alpha=lam / args.rows, fit_intercept=False, tol=SKLEARN_TOLERANCES[0]).fit(X, b_full)  # warm-up
                for tolerance in SKLEARN_TOLERANCES:
                    seconds, model = [], None
                    for _ in range(args.repeat):
                        model = Lasso(alpha=lam / args.rows, fit_intercept=False, tol=tolerance, max_iter=100000)
                        start = time.perf_counter()
                        model.fit(X, b_full)
                        seconds.append(time.perf_counter() - start)
                    value = 0.5 * float(np.sum((A_full @ model.coef_ - b_full) ** 2)) + lam * float(
                        np.abs(model.coef_).sum())
                    runs.append({"solver": f"scikit-learn Lasso ({layout})", "tolerance": tolerance,
                                 "iterations": int(model.n_iter_), "coef": model.coef_,
                                 "seconds": statistics.median(seconds)})
                    say(f"  scikit-learn {layout} tol {tolerance:.0e}: {model.n_iter_} epochs, "
                        f"{runs[-1]['seconds']:.3f} s")
                    best_objective = min(best_objective, value)
                    if value - best_objective <= args.target * best_objective:
                        break
        del layouts, A_full
    wait_without_spinning(comm)
    runs = comm.bcast(runs, root=0)
    for run in runs:
        run["objective"] = objective(np.asarray(run.pop("coef")))
    return runs


def print_tables(args, ranks, runs, summary, per_iteration, reference):
    print(f"\nlasso {args.rows} x {args.cols}, column correlation {args.correlation}, "
          f"lam = {args.lam_ratio} lambda_max, {ranks} ranks; "
          f"median of {args.repeat}; reference objective {reference:.12e}")
    print(f"{'solver':<34} {'tol':>7} {'iters':>6} {'time(s)':>9} {'rel. gap':>10}")
    for run in runs:
        print(f"{run['solver']:<34} {run['tolerance']:>7.0e} {run['iterations']:>6} {run['seconds']:>9.3f} "
              f"{run['relative_gap']:>10.1e}")
    print(f"\ntime to solution (relative gap <= {args.target:g}):")
    admm = summary["mpiopt ADMM"]["seconds"]
    for solver, entry in summary.items():
        if entry["seconds"] is None:
            print(f"  {solver:<34} not reached")
            continue
        ratio = f"  (ADMM / this = {admm / entry['seconds']:.2f})" if admm and solver != "mpiopt ADMM" else ""
        print(f"  {solver:<34} {entry['seconds']:8.3f} s at tol {entry['tolerance']:.0e}{ratio}")
    chosen = summary["mpiopt ADMM"]["tolerance"]
    admm_run = next((r for r in runs if r["solver"] == "mpiopt ADMM" and r["tolerance"] == chosen), None)
    if admm_run:
        print(f"\nADMM setup {admm_run['setup']:.3f} s (median, at that tolerance)")
    print(f"ADMM per iteration over {per_iteration['iterations']} iterations: {1e3 * per_iteration['admm']:.3f} ms; "
          f"floor (cached-factor solve + allreduce of n doubles): {1e3 * per_iteration['floor']:.3f} ms; "
          f"ratio {per_iteration['ratio']:.2f}")


def plot(runs, path, target, title):
    """Relative gap against time, one line per solver through its tolerance ladder (loosest first)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for solver in dict.fromkeys(run["solver"] for run in runs):
        ladder = sorted((run for run in runs if run["solver"] == solver), key=lambda run: -run["tolerance"])
        axes.plot([run["seconds"] for run in ladder], [max(run["relative_gap"], 1e-16) for run in ladder],
                  marker="o", label=solver)
    axes.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target gap {target:g}")
    axes.set_title(title, fontsize=10)
    axes.set_xlabel("time to return (s)")
    axes.set_ylabel("relative objective gap")
    axes.set_yscale("log")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    from mpiopt.core.comm import run_collectively
    sys.exit(run_collectively(main))
