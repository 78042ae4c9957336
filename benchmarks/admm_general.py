"""The general ADMM solver against scikit-learn, in one run, with the targets of docs/admm.md.

    mpiexec -n 2 python benchmarks/admm_general.py --part logistic   # L1 logistic vs liblinear and saga
    mpiexec -n 2 python benchmarks/admm_general.py --part path       # 20-value lasso path vs lasso_path
    mpiexec -n 2 python benchmarks/admm_general.py --part rho        # adaptive rho from a rho 100x too small

logistic: time to reach the best objective (to --target, relative) over a
ladder of tolerances, each run timed whole and cold, median of --repeat.
scikit-learn runs on rank 0 with every core for its BLAS while the other ranks
sleep; its objective C sum(log-loss) + ||w||_1 is ours divided by lam = 1/C.
path: one warm-started path over the same 20 weights as lasso_path, timed whole
(validation, Gram matrices and factorization included), coefficients compared.
rho: iterations to converge for fixed rho over a grid around the data-scale
default, and adaptive rho started 100x below the best fixed rho.
Output: tables on rank 0 and JSON (--output).

logistic-designs / path-designs: the designs comparison (sparse_solvers.py):
time to a relative objective gap of 1e-6 for L1 logistic beside scikit-learn,
celer and skglm on the designs (--lam-ratios: several weights), and for the
20-weight lasso path beside lasso_path, celer's and skglm's warm-started paths
(--designs; default: the independent design).

    mpiexec -n 2 python benchmarks/admm_general.py --part logistic-designs --designs all
    mpiexec -n 2 python benchmarks/admm_general.py --part path-designs
    mpiexec -n 2 python benchmarks/admm_general.py --part path-designs --designs sparse,text --lam-min-ratio 0.01
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import sparse_solvers  # noqa: E402
from common import median_time, start, summarize, wait_without_spinning, write_result  # noqa: E402
from mpiopt.core.threads import available_cores  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["logistic", "path", "rho", "logistic-designs", "path-designs"], required=True)
    parser.add_argument("--rows", type=int, default=100000)
    parser.add_argument("--cols", type=int, default=1000)
    parser.add_argument("--correlation", type=float, default=0.0)
    parser.add_argument("--lam-ratio", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--target", type=float, default=1e-6)
    parser.add_argument("--x-solver", default="lbfgs")
    parser.add_argument("--rho-factors", type=lambda text: [float(v) for v in text.split(",")],
                        default=[0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100],
                        help="--part rho: the fixed rhos tried, as multiples of the default rho (comma-separated)")
    parser.add_argument("--output", default=None)
    parser.add_argument("--seed", type=int, default=0)
    sparse_solvers.add_arguments(parser, "general")
    return sparse_solvers.apply_quick(parser.parse_args(argv))


def output_path(args):
    """The JSON's path: --output, else the part's (or the designs family's) default."""
    if args.output:
        return args.output
    if args.part.endswith("-designs"):
        return f"results/admm_{args.part.split('-')[0]}_designs.json"
    return f"results/admm_{args.part}.json"


def main(argv=None):
    args, comm, say = start(parse_args, argv, outputs=lambda args, comm: [output_path(args)])
    import numpy as np
    from mpi4py import MPI

    from mpiopt.data.synthetic import lasso_rows, make_lasso

    if args.part.endswith("-designs"):
        return designs_suite(args, comm, say)
    A, b, _ = make_lasso(args.rows, args.cols, correlation=args.correlation, comm=comm)
    say(f"# admm_general --part {args.part}: {args.rows} x {args.cols}, correlation {args.correlation}, "
        f"{comm.size} ranks, {available_cores()} cores")

    def full_data():
        return lasso_rows(args.rows, args.cols, 0, args.rows, correlation=args.correlation)

    part = {"logistic": logistic_part, "path": path_part, "rho": rho_part}[args.part]
    payload = part(args, comm, A, b, full_data, say, np, MPI)
    payload.update(benchmark=f"admm_general-{args.part}", rows=args.rows, cols=args.cols, ranks=comm.size,
                   correlation=args.correlation)
    write_result(comm, output_path(args), payload)
    return 0


def designs_suite(args, comm, say):
    """The L1-logistic or path comparison over the designs (sparse_solvers.py)."""
    family = args.part.split("-")[0]
    output = output_path(args)
    say(f"admm_general --part {args.part}: {comm.size} ranks, {available_cores()} cores, target {args.target:g}")
    payload = sparse_solvers.run_family(family, args, comm, say)
    payload.update(rows=args.rows, cols=args.cols)
    say("\n" + payload["markdown"])
    write_result(comm, output, payload)
    if comm.rank == 0:
        sparse_solvers.write_markdown_beside(output, payload)
    return 0


def logistic_part(args, comm, A, b, full_data, say, np, MPI):
    from mpiopt.admm import logistic_regression
    y = np.where(b > 0, 1.0, 0.0)

    def objective(w, lam):
        margin = np.where(y > 0, 1.0, -1.0) * (A @ w)
        return comm.allreduce(float(np.logaddexp(0, -margin).sum())) + lam * float(np.abs(w).sum())

    probe = logistic_regression(A, y, comm=comm, lam_ratio=1.0, max_iter=1)
    lam = args.lam_ratio * probe.info["lambda_max"]
    runs = []
    for tolerance in (1e-3, 1e-4, 1e-5, 1e-6, 1e-8):
        result, seconds = median_time(comm, lambda: logistic_regression(
            A, y, lam, comm, eps_abs=tolerance, eps_rel=tolerance, max_iter=20000, x_solver=args.x_solver),
            args.repeat)
        runs.append({"solver": f"mpiopt ADMM ({args.x_solver})", "tolerance": tolerance,
                     "iterations": result.iterations, "objective": objective(result.x, lam),
                     "seconds": seconds, "inner": result.info.get("inner_iterations")})
        say(f"  ADMM tol {tolerance:.0e}: {result.iterations} iterations, {runs[-1]['seconds']:.2f} s, "
            f"objective {runs[-1]['objective']:.10e}")
    sk_runs = []
    if comm.rank == 0:
        from sklearn.linear_model import LogisticRegression
        from threadpoolctl import threadpool_limits
        A_full, b_full = full_data()
        y_full = np.where(b_full > 0, 1.0, 0.0)
        best = min(run["objective"] for run in runs)
        with threadpool_limits(limits=available_cores()):
            for solver in ("liblinear", "saga"):
                for tolerance in (1e-2, 1e-3, 1e-4, 1e-6, 1e-8):
                    times = []
                    for _ in range(args.repeat):
                        model = LogisticRegression(C=1.0 / lam, l1_ratio=1.0, solver=solver, fit_intercept=False,
                                                   tol=tolerance, max_iter=100000)
                        start = time.perf_counter()
                        model.fit(A_full, y_full)
                        times.append(time.perf_counter() - start)
                    coef = model.coef_.ravel()
                    margin = np.where(y_full > 0, 1.0, -1.0) * (A_full @ coef)
                    value = float(np.logaddexp(0, -margin).sum()) + lam * float(np.abs(coef).sum())
                    sk_runs.append({"solver": f"scikit-learn {solver}", "tolerance": tolerance,
                                    "iterations": int(np.max(model.n_iter_)), "objective": value,
                                    "seconds": statistics.median(times)})
                    say(f"  scikit-learn {solver} tol {tolerance:.0e}: {sk_runs[-1]['iterations']} iterations, "
                        f"{sk_runs[-1]['seconds']:.2f} s, objective {value:.10e}")
                    best = min(best, value)
                    if value - best <= args.target * best:
                        break
    wait_without_spinning(comm)
    runs += comm.bcast(sk_runs, root=0)
    best = min(run["objective"] for run in runs)
    for run in runs:
        run["relative_gap"] = (run["objective"] - best) / best
    summary = summarize(runs, args.target)
    if comm.rank == 0:
        print(f"\nL1 logistic, lam = {lam:.4g} ({args.lam_ratio} lambda_max); best objective {best:.12e}")
        print(f"{'solver':<26} {'tol':>7} {'iters':>6} {'time(s)':>9} {'rel. gap':>10}")
        for run in runs:
            print(f"{run['solver']:<26} {run['tolerance']:>7.0e} {run['iterations']:>6} {run['seconds']:>9.2f} "
                  f"{run['relative_gap']:>10.1e}")
        print(f"\ntime to solution (gap <= {args.target:g}):")
        for solver, entry in summary.items():
            print(f"  {solver:<26} " + (f"{entry['seconds']:.2f} s at tol {entry['tolerance']:.0e}"
                                        if entry["seconds"] else "not reached"))
    return {"lam": lam, "best_objective": best, "runs": runs, "time_to_solution": summary}


def path_part(args, comm, A, b, full_data, say, np, MPI):
    from mpiopt.admm.path import regularization_path
    path, ours = median_time(comm, lambda: regularization_path(A, b, "squared", "l1", comm, n_lams=20,
                                                               lam_min_ratio=1e-2, eps_abs=1e-8, eps_rel=1e-8),
                             args.repeat)
    say(f"  mpiopt path: {ours:.2f} s ({path.setup_time:.2f} s setup; iterations {path.iterations.tolist()})")
    reference = {}
    if comm.rank == 0:
        from sklearn.linear_model import lasso_path
        from threadpoolctl import threadpool_limits
        A_full, b_full = full_data()
        with threadpool_limits(limits=available_cores()):
            for layout, X in (("C order", A_full), ("Fortran order", np.asfortranarray(A_full))):
                sk_times = []
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    _, coefs, _ = lasso_path(X, b_full, alphas=path.lams / args.rows, tol=1e-8, max_iter=100000)
                    sk_times.append(time.perf_counter() - start)
                objective = lambda coef, lam: 0.5 * float(np.sum((A_full @ coef - b_full) ** 2)) + lam * float(  # noqa
                    np.abs(coef).sum())
                gaps = [(objective(path.coefs[k], lam) - objective(coefs[:, k], lam)) / objective(coefs[:, k], lam)
                        for k, lam in enumerate(path.lams)]
                reference[layout] = {"seconds": statistics.median(sk_times), "max_relative_gap": max(gaps),
                                     "max_coef_difference": float(np.abs(path.coefs - coefs.T).max())}
                say(f"  scikit-learn lasso_path ({layout}): {reference[layout]['seconds']:.2f} s; ours minus theirs, "
                    f"worst relative objective gap {max(gaps):.1e}")
    wait_without_spinning(comm)
    reference = comm.bcast(reference, root=0)
    if comm.rank == 0:
        for layout, entry in reference.items():
            print(f"path time: mpiopt {ours:.2f} s vs lasso_path ({layout}) {entry['seconds']:.2f} s: "
                  f"ratio {ours / entry['seconds']:.2f}")
    return {"seconds": ours, "setup": path.setup_time, "iterations": path.iterations, "lams": path.lams,
            "lasso_path": reference}


def rho_part(args, comm, A, b, full_data, say, np, MPI):
    """For Anderson off (the adaptive rule alone) and on (the default): the best fixed rho over a grid,
    then adaptive rho (both rules) started 100x below it."""
    from mpiopt.admm import lasso
    default = lasso(A, b, comm=comm, max_iter=1, lam_ratio=args.lam_ratio).info["rho_initial"]
    report = {"default_rho": default}
    for anderson in (0, 5):
        settings = dict(lam_ratio=args.lam_ratio, eps_abs=1e-8, eps_rel=1e-8, max_iter=20000, anderson=anderson)
        fixed = {}
        for factor in args.rho_factors:
            result = lasso(A, b, comm=comm, rho=default * factor, adaptive_rho="none", **settings)
            fixed[default * factor] = result.iterations
            say(f"  anderson {anderson}: fixed rho {default * factor:.3e}: {result.iterations} iterations "
                f"({result.status})")
        best_rho = min(fixed, key=fixed.get)
        adaptive = {}
        for mode in ("osqp", "balance"):
            result = lasso(A, b, comm=comm, rho=best_rho / 100, adaptive_rho=mode, **settings)
            adaptive[mode] = {"iterations": result.iterations, "rho_changes": result.info["rho_changes"],
                              "rho_final": result.info["rho_final"], "status": result.status,
                              "ratio": result.iterations / fixed[best_rho]}
        default_run = lasso(A, b, comm=comm, **settings)
        say(f"anderson {anderson}: best fixed rho {best_rho:.3e}: {fixed[best_rho]} iterations; adaptive from 100x "
            "too small: " + ", ".join(f"{mode} {entry['iterations']} ({entry['ratio']:.2f}x, {entry['rho_changes']} "
                                      f"changes)" for mode, entry in adaptive.items())
            + f"; default settings: {default_run.iterations} iterations")
        report[f"anderson_{anderson}"] = {"fixed": {f"{k:.6e}": v for k, v in fixed.items()}, "best_rho": best_rho,
                                          "best_iterations": fixed[best_rho], "adaptive": adaptive,
                                          "default_iterations": default_run.iterations}
    return report


if __name__ == "__main__":
    from mpiopt.core.comm import run_collectively
    sys.exit(run_collectively(main))
