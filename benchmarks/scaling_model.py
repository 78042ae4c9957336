"""Fit the scaling model of consensus ADMM (mpiopt.admm.scaling), check it at 1, 2 and 4 ranks, project to 1,024.

    python benchmarks/scaling_model.py [--ranks 1 2 4] [--out results/scaling_model.json]
    python benchmarks/scaling_model.py --part logistic --repeat 3   # proximal Newton's working sets only
    python benchmarks/scaling_model.py --quick          # serial, small: what the tests run

The driver never initializes MPI itself; it runs each stage in a child process,
plain Python at one rank and ``mpiexec -n p`` above (next to this Python), all
with OMP_NUM_THREADS=1 (one core per rank: the model's machine):

1. ``compute``: single-threaded numpy/scipy kernels (syrk Gram, Cholesky,
   gemv, (A * A).sum(), two triangular solves, vector adds) fitted to
   seconds per flop or byte; delta and delta_gap from ADMM on a tiny problem
   (20 columns) at one rank, with and without a gap at every iteration;
2. ``network`` (2 ranks): MPI_Allreduce of 1 .. 10^6 doubles, fitted to
   alpha and beta under MPICH's model; the reducers' gamma and copy; the
   ``auto`` reducer at the same sizes (to check the model at 2 ranks); and the
   memory bandwidth with both ranks streaming at once (node_bandwidth);
3. ``measure`` at each p: the lasso (lam_ratio 0.1) on A = 100000 x 1000
   converged (eps 1e-6, gap_tol 1e-8) and on 20000 x 2000 for a fixed 200
   iterations with the gap every 10 (iteration-dominated); each phase's time
   (the slowest rank's), with the working-set solver as well when
   ADMMSettings has ``working_set``;
4. ``newton`` (1 rank, with ``--part logistic`` or ``all``): the logistic loss's
   terms per row (gamma_exp), the Hessian's gemm (gamma_gemm), rank 0's
   coordinate descent (delta_coord per update, delta_epoch per epoch: the
   sweeps of mpiopt.kernels.cd, compiled by numba when installed, compiled
   before they are timed) and L1-logistic working-set solves of a tiny problem
   (2000 x 50) at five weights and two tolerances (delta_newton,
   delta_newton_solve, delta_certify: the fixed costs, the rest of the model
   subtracted).  ``info["coordinate_epochs"]`` counts every epoch of the
   restricted solves, the refined dual points they make for the certificates
   included; the benchmark counts every epoch as well by wrapping
   proxnewton.penalized_quadratic (EpochCounter), and the difference (the
   epochs of a warm start's first certificate, which makes its refined point
   itself) must be 0 for these cold starts: each epoch is charged once;
5. ``logistic`` at each p: the L1-logistic working-set solve (inner solver
   auto: proximal Newton) on the independent design of
   ``admm_general.py --part logistic-designs`` (sparse_solvers.make_design),
   20000 x 1000 and 100000 x 1000, lam = 0.05 lambda_max, gap_tol 1e-6,
   the median of --repeat solves by wall time.

Ranks beyond the machine's cores are oversubscribed (several ranks share a
core); the output says so where it happens, and the model, which assumes one
core per rank, is then not expected to hold.

Then the predictions per phase against the measurements, and the 1 .. 1024-rank
projections for 10^5 x 10^3 and 10^7 x 10^4 (the full solver) and for the
measured logistic designs (proximal Newton's working sets, their 1-rank counts)
with the network fitted here and with an assumed cluster (alpha 2 us, 10 GB/s,
32 ranks per node sharing 200 GB/s of memory bandwidth).  The tables are printed
once and everything goes to the JSON.
"""
import argparse
import dataclasses
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
sys.path.insert(0, str(ROOT / "benchmarks"))  # admm_general, sparse_solvers: the logistic designs

CLUSTER = {"alpha": 2e-6, "beta": 1e-10, "ranks_per_node": 32,  # 2 us, 10 GB/s, 32 ranks per node
           "node_bandwidth": 200e9}  # a two-socket node's memory bandwidth (STREAM-like), shared by its 32 ranks
FULL_CASES = {"quick": [("A", 4000, 200, "converged"), ("B", 2000, 300, "fixed")],
              "full": [("A", 100000, 1000, "converged"), ("B", 20000, 2000, "fixed")]}
FIXED_ITERATIONS = 200
LAM_RATIO = 0.1
LOGISTIC_CASES = {"quick": [("L1", 2000, 100)], "full": [("L1", 20000, 1000), ("L2", 100000, 1000)]}
LOGISTIC_RATIO = 0.05      # lam = 0.05 lambda_max
LOGISTIC_GAP_TOL = 1e-6    # the relative duality gap certified on every column
NEWTON_TINY = (2000, 50)   # the tiny L1-logistic problem for proximal Newton's fixed costs
NEWTON_TINY_RATIOS = (0.5, 0.2, 0.1, 0.05, 0.02)
NEWTON_TINY_TOLS = (1e-3, 1e-8)  # two tolerances: the Newton iterations per restricted solve vary apart from them


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
            "gamma_red": gamma_red, "copy": copy, "node_bandwidth": node_bandwidth(comm, quick)}


def node_bandwidth(comm, quick):
    """Bytes per second of memory bandwidth when every rank streams over its own rows at once (A x and
    A^T v on a 40 MB or 200 MB block each): all the ranks' bytes over the slowest rank's median time."""
    from mpi4py import MPI
    rng = np.random.default_rng(comm.rank)
    A = rng.standard_normal((5000, 1000) if quick else (25000, 1000))
    x, v = np.ones(A.shape[1]), np.ones(A.shape[0])
    samples = []
    for _ in range(5 if quick else 10):
        comm.Barrier()
        start = time.perf_counter()
        A @ x
        A.T @ v
        samples.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
    return comm.size * 2 * A.nbytes / float(np.median(samples))


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


def logistic_design(comm, m, n, lam_ratio=LOGISTIC_RATIO):
    """This rank's rows of the independent L1-logistic design of ``admm_general.py --part logistic-designs``
    (sparse_solvers.make_design; every rank makes the whole design, as there), lam = lam_ratio lambda_max,
    and admm_general's arguments: (A_local, y_local, lam, args)."""
    import admm_general
    import sparse_solvers
    from mpiopt.core.partition import row_range
    args = admm_general.parse_args(["--part", "logistic-designs", "--designs", "independent", "--rows", str(m),
                                    "--cols", str(n), "--lam-ratio", str(lam_ratio)])
    A, y = sparse_solvers.make_design("independent", args, logistic=True)
    lambda_max = 0.5 * float(np.abs(A.T @ y).max())  # as sparse_solvers.run_family
    start, stop = row_range(m, comm.rank, comm.size)
    return np.ascontiguousarray(A[start:stop]), y[start:stop].copy(), args.lam_ratio * lambda_max, args


class EpochCounter:
    """Counts rank 0's coordinate-descent epochs, all of them, while it is entered: ``info["coordinate_epochs"]``
    holds the restricted solves' (their iterations' and the refined points they make for the certificates),
    not those of a warm start's first certificate (which makes its refined point itself), so the difference
    is those, 0 at a cold start.  It wraps proxnewton.penalized_quadratic (one Python call more per
    direction, under a microsecond)."""

    def __enter__(self):
        from mpiopt.admm import proxnewton
        self.module, self.original, self.epochs = proxnewton, proxnewton.penalized_quadratic, 0

        def counted(*args, **kwargs):
            y, epochs = self.original(*args, **kwargs)
            self.epochs += int(epochs)
            return y, epochs
        proxnewton.penalized_quadratic = counted
        return self

    def __exit__(self, *exc):
        self.module.penalized_quadratic = self.original
        return False


def refined_certificates():
    """The steps of the working sets' refined dual point (proxnewton.REFINE_STEPS; 1 without that constant), or
    0 when the certificates take x's own dual point (no class of workingset.py has ``refined_margin``)."""
    from mpiopt.admm import proxnewton, workingset
    if not any(isinstance(value, type) and hasattr(value, "refined_margin") for value in vars(workingset).values()):
        return 0
    return int(getattr(proxnewton, "REFINE_STEPS", 1))


def newton_counts(result, epochs=None, comm=None):
    """The counts proximal Newton's working sets report: outer iterations, the working sets' sizes, Newton
    iterations per outer iteration (from info["outer"]'s running totals) and coordinate epochs (every epoch of
    the restricted solves, their refined points' included); with ``epochs`` (an EpochCounter's, rank 0's,
    broadcast over ``comm``) the epochs outside them as ``certificate_epochs`` (a warm start's first
    certificate's: 0 from the cold starts here, else an epoch would be missed, or counted twice if
    added to the solves')."""
    info = result.info
    totals = [int(row["iterations"]) for row in info.get("outer", [])]
    per_outer = [b - a for a, b in zip(totals, totals[1:])]
    solves = int(info.get("coordinate_epochs") or 0)
    if epochs is not None and comm is not None:
        epochs = comm.bcast(epochs, root=0)
    return {"outer_iterations": int(info.get("outer_iterations") or 0),
            "working_set_sizes": [int(size) for size in info.get("working_set_sizes", []) or []],
            "newton_per_outer": per_outer, "coordinate_epochs": solves,
            "certificate_epochs": max(int(epochs) - solves, 0) if epochs is not None else 0,
            "refined": refined_certificates(), "warm_start": 0, "inner_solver": info.get("inner_solver"),
            "intercept": bool(info.get("intercept", False))}


def stage_newton(quick):
    """Proximal Newton's constants at one rank, raw (the driver fits them): the logistic loss's passes per row,
    rank 0's coordinate descent at several k, the Hessian kernel, and tiny L1-logistic working-set solves."""
    from mpi4py import MPI
    from mpiopt.admm import logistic_regression
    from mpiopt.admm.design import Design
    from mpiopt.admm.losses.glm import LogisticLossShard, entropy
    from mpiopt.admm.proxnewton import penalized_quadratic
    from mpiopt.admm.scaling import EXP_UNITS
    comm = MPI.COMM_SELF
    rng = np.random.default_rng(5)
    exp_work, exp_times = [], []
    for m in ((10 ** 4, 10 ** 5) if quick else (10 ** 4, 10 ** 5, 10 ** 6)):
        y = np.where(rng.standard_normal(m) > 0, 1.0, -1.0)
        margin = 2.0 * rng.standard_normal(m)
        loss = LogisticLossShard(Design(np.zeros((m, 1)), False, np), y, np, **LogisticLossShard.options.defaults())
        probability = 0.5 * (1.0 + np.tanh(-0.5 * y * margin))
        kernels = {"newton_terms": lambda: loss.newton_terms(margin),
                   "dual_residual": lambda: loss.dual_residual(margin),
                   "entropy": lambda: entropy(probability, np), "margin_value": lambda: loss.margin_value(margin)}
        for name, kernel in kernels.items():
            exp_work.append(EXP_UNITS[name] * m)
            exp_times.append(best_time(kernel, 5))
    from mpiopt.kernels import cd as kernel, compiled
    cd = {"k": [], "epochs": [], "seconds": [], "compiled": compiled.enabled()}
    hessian = {"m": [], "k": [], "seconds": []}
    for k in ((10, 20, 50, 100) if quick else (10, 20, 50, 100, 200, 400)):
        m = 4000 if quick else 20000
        A = np.asfortranarray(rng.standard_normal((m, k)))
        weights = rng.uniform(0.05, 0.25, m)
        design = Design(A, False, np)
        hessian["m"].append(m)
        hessian["k"].append(k)
        hessian["seconds"].append(best_time(lambda: design.gram(weights=weights), 3))
        H = design.gram(weights=weights)
        grad = A.T @ rng.standard_normal(m)
        l1 = float(np.quantile(np.abs(grad), 0.5))  # about half the coordinates nonzero: a working set's shape
        _, epochs = penalized_quadratic(H, grad, np.zeros(k), l1, 0.0, 0, 1e-8 * l1)  # compiled (numba), cached
        cd["k"].append(k)
        cd["epochs"].append(int(epochs))
        cd["seconds"].append(best_time(lambda: penalized_quadratic(H, grad, np.zeros(k), l1, 0.0, 0, 1e-8 * l1),
                                       20))  # under a millisecond each: the best of many, on a shared machine
    A, y, _, _ = logistic_design(comm, *NEWTON_TINY)
    lambda_max = 0.5 * float(np.abs(A.T @ y).max())
    logistic_regression(A, y, 0.1 * lambda_max, comm, gap_tol=LOGISTIC_GAP_TOL, max_iter=3)  # imports: not timed
    tiny = []
    for ratio, tol in [(ratio, tol) for ratio in NEWTON_TINY_RATIOS for tol in NEWTON_TINY_TOLS]:
        samples = []
        for _ in range(3 if quick else 5):
            with EpochCounter() as counter:
                result = logistic_regression(A, y, ratio * lambda_max, comm, gap_tol=tol)
            samples.append((result.timings["solve"], result.timings["gap"]))
        counts = newton_counts(result, counter.epochs)
        tiny.append({"m": A.shape[0], "n": A.shape[1], "ranks": 1, "lam_ratio": ratio, "gap_tol": tol,
                     "sizes": counts["working_set_sizes"], "iterations": counts["newton_per_outer"],
                     "coordinate_epochs": counts["coordinate_epochs"], "intercept": counts["intercept"],
                     "refined": counts["refined"], "certificate_epochs": counts["certificate_epochs"],
                     "warm_start": counts["warm_start"],
                     "inner_solver": counts["inner_solver"],
                     "solve": float(np.median([a for a, _ in samples])),
                     "gap": float(np.median([b for _, b in samples]))})
    return {"exp": [exp_work, exp_times], "coordinate_descent": cd, "hessian": hessian, "tiny": tiny}


def stage_logistic(quick, repeat):
    """The L1-logistic working-set solve (inner solver auto: proximal Newton) on each LOGISTIC_CASES design at
    this many ranks: per case the median (by wall time) of ``repeat`` solves, its phases the slowest rank's."""
    from mpi4py import MPI
    import sparse_solvers
    from mpiopt.admm import logistic_regression
    comm = MPI.COMM_WORLD
    out = []
    for name, m, n in LOGISTIC_CASES["quick" if quick else "full"]:
        A, y, lam, args = logistic_design(comm, m, n)
        options = sparse_solvers.admm_options("default", LOGISTIC_GAP_TOL, args)
        logistic_regression(A, y, lam, comm, **dict(options, max_iter=3))  # first touch, imports: not timed
        runs = []
        for _ in range(repeat):
            comm.Barrier()
            with EpochCounter() as counter:
                start = time.perf_counter()
                result = logistic_regression(A, y, lam, comm, **options)
                wall = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
            timings = {key: comm.allreduce(float(value), op=MPI.MAX) for key, value in result.timings.items()
                       if isinstance(value, (int, float))}
            runs.append(dict(newton_counts(result, counter.epochs, comm), wall=wall, timings=timings,
                             iterations=int(result.iterations),
                             status=result.status, relative_gap=result.relative_gap,
                             nonzeros=int(result.info.get("nonzeros", 0))))
        median = sorted(runs, key=lambda run: run["wall"])[len(runs) // 2]
        out.append(dict(median, case=name, m=m, n=n, kind="converged", solver="ws_prox_newton", ranks=comm.size,
                        repeats=len(runs), walls=[run["wall"] for run in runs], lam=lam, lam_ratio=LOGISTIC_RATIO,
                        gap_tol=LOGISTIC_GAP_TOL))
        del A, y
    return out


STAGES = {"delta": stage_delta, "network": stage_network, "newton": stage_newton}


def child(args):
    from mpi4py import MPI
    if args.stage == "measure":
        payload = stage_measure(args.quick, args.repeat)
    elif args.stage == "logistic":
        payload = stage_logistic(args.quick, args.repeat)
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
def newton_options(run):
    """predict_working_set's proximal-Newton arguments from a run's counts: its coordinate epochs (every epoch of
    the restricted solves), intercept, refined steps and warm start; ``certificate_epochs`` (the epochs outside
    the restricted solves) only with a warm start, whose first certificate makes them: a cold start has none
    (phase_checks reports any, uncharged)."""
    warm = int(run.get("warm_start", 0))
    return {"coordinate_epochs": run["coordinate_epochs"], "intercept": run.get("intercept", False),
            "refined": run.get("refined", 0), "warm_start": warm,
            "certificate_epochs": run.get("certificate_epochs", 0) if warm else 0}


def predicted_phases(run, reference, compute, network):
    """The model's phases for a measured run, with the iteration counts of ``reference`` (the 1-rank run)."""
    from mpiopt.admm import scaling
    p, m, n = run["ranks"], run["m"], run["n"]
    if run["solver"] == "ws_prox_newton":
        return scaling.predict_working_set(m, n, p, reference["working_set_sizes"], reference["newton_per_outer"],
                                           compute, network, "prox_newton", **newton_options(reference))
    if run["solver"] == "working_set":
        return scaling.predict_working_set(m, n, p, reference["working_set_sizes"], reference["iterations"],
                                           compute, network)
    return scaling.predict_full(m, n, p, reference["iterations"], compute, network,
                                reference["gap_evaluations"], reference["rho_changes"])


def measured_phases(run):
    """The measured phases, named as the model's: setup is the wall time outside the iterations."""
    t, wall = run["timings"], run["wall"]
    if run["solver"] != "full":
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
    parser.add_argument("--repeat", type=int, default=None,
                        help="solves per case (2; quick 1): the lasso's fastest kept, the logistic's median")
    parser.add_argument("--part", choices=["all", "lasso", "logistic"], default="all",
                        help="the lasso's full and working-set solvers, proximal Newton's logistic working sets, "
                             "or both")
    parser.add_argument("--out", default=str(ROOT / "results" / "scaling_model.json"))
    parser.add_argument("--stage", choices=["delta", "network", "measure", "newton", "logistic"],
                        help=argparse.SUPPRESS)
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
    lasso_part, logistic_part = args.part in ("all", "lasso"), args.part in ("all", "logistic")
    started = time.perf_counter()
    when, load_before = time.strftime("%Y-%m-%d %H:%M %Z"), os.getloadavg()
    timeout = 600
    fitted, compute, net, network, cluster = fit_models(args, ranks, timeout, logistic_part)
    runs, logistic_runs = [], []
    for p in ranks:
        if lasso_part:
            runs.extend(run_child("measure", p, args.quick, args.repeat, timeout))
        if logistic_part:
            logistic_runs.extend(run_child("logistic", p, args.quick, args.repeat, timeout))
    measure_seconds = time.perf_counter() - started
    load_after = os.getloadavg()

    say = print
    print_parameters(say, args, compute, net, network, logistic_part)
    say(f"\nMeasured {when}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
        f"({os.cpu_count()} cores).")
    oversubscribed = [p for p in ranks if p > (os.cpu_count() or 1)]
    if oversubscribed:
        say(f"Oversubscribed: {', '.join(map(str, oversubscribed))} ranks on {os.cpu_count()} cores (several ranks "
            f"share a core; the model assumes one core per rank, so those rows test oversubscription, not the model).")
    allreduce_check(say, net, network)
    checks, projections, logistic_projections = [], {}, {}
    # the projections' "here": this machine's wire, each rank with a core's own memory bandwidth (the node's
    # shared bandwidth, measured, is for the checks at 1, 2 and 4 ranks on this one node)
    here = dataclasses.replace(network, node_bandwidth=0.0)
    if lasso_part:
        checks += phase_checks(say, runs, ranks, compute, network)
        projections = projections_part(say, runs, ranks, compute, here, cluster)
    if logistic_part:
        newton_kernel_checks(say, fitted, compute)
        checks += phase_checks(say, logistic_runs, ranks, compute, network,
                               "Proximal Newton working sets (L1-logistic), predicted against measured")
        logistic_projections = logistic_projections_part(say, logistic_runs, ranks, compute, here, cluster)
    say(f"\nMeasured in {measure_seconds:.0f} s.")

    names = ("gamma_flop", "gamma_chol", "gamma_mem", "gamma_trsv", "gamma_vec", "delta", "delta_gap", "gamma_square",
             "x_call", "comm_call", "delta_solve", "gamma_exp", "delta_newton", "delta_newton_solve", "delta_coord",
             "delta_epoch", "delta_certify", "gamma_gemm")
    payload = {"quick": args.quick, "part": args.part, "ranks": ranks, "cores": os.cpu_count(), "date": when,
               "load_average": {"before": load_before, "after": load_after}, "repeat": args.repeat,
               "compute": dict({k: getattr(compute, k) for k in names}, gamma_gemm=compute.gemm),  # effective
               "network": vars(network) if not hasattr(network, "__dataclass_fields__") else
               {k: getattr(network, k) for k in network.__dataclass_fields__},
               "cluster": {k: getattr(cluster, k) for k in cluster.__dataclass_fields__},
               "kernel_timings": fitted["raw"], "newton_raw": fitted.get("newton"), "allreduce": net, "runs": runs,
               "logistic_runs": logistic_runs, "checks": checks,
               "projections": {key: [{k: v for k, v in row.items()} for row in rows]
                               for key, rows in projections.items()},
               "logistic_projections": {key: [{k: v for k, v in row.items()} for row in rows]
                                        for key, rows in logistic_projections.items()},
               "seconds": measure_seconds}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=1, default=float))
    say(f"JSON written to {args.out}")
    return 0




def fit_models(args, ranks, timeout, newton=False):
    """(the raw fits, the compute model, the 2-rank network measurements or None, this machine's network
    model, the cluster's); with ``newton``, proximal Newton's constants as well (:func:`fit_newton`)."""
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
        network = scaling.Network(alpha, beta, net["gamma_red"], net["copy"], 0, net.get("node_bandwidth", 0.0))
    else:  # one rank: no wire to fit; a typical shared-memory MPICH for the projections
        net = None
        network = scaling.Network(1e-6, 1e-10, rates["vec"], rates["vec"], 0)
    cluster = scaling.Network(CLUSTER["alpha"], CLUSTER["beta"], network.gamma_red, network.copy,
                              CLUSTER["ranks_per_node"], CLUSTER["node_bandwidth"])
    if newton:
        fitted["newton"] = run_child("newton", 1, args.quick, 1, timeout)
        compute = fit_newton(fitted["newton"], compute, network)
    return fitted, compute, net, network, cluster


def fit_newton(raw, compute, network):
    """The compute model with proximal Newton's constants fitted from the ``newton`` stage: gamma_exp (the
    logistic passes per row, in EXP_UNITS), delta_coord and delta_epoch (rank 0's coordinate descent), then the
    fixed costs
    delta_newton, delta_newton_solve and delta_certify from the tiny solves, the rest of the model subtracted."""
    from mpiopt.admm import scaling
    gamma_exp = scaling.fit_rate(*raw["exp"])[0]
    cd = raw["coordinate_descent"]
    delta_coord, delta_epoch = scaling.fit_coordinate_descent(cd["k"], cd["epochs"], cd["seconds"],
                                                              compute.gamma_vec)
    h = raw["hessian"]
    m, k = np.asarray(h["m"], dtype=float), np.asarray(h["k"], dtype=float)
    copy = 2 * scaling.DOUBLE * m * k * compute.gamma_mem  # the weighted copy D A, at the pass rate
    gamma_gemm = scaling.fit_rate(2 * m * k * k, np.maximum(np.asarray(h["seconds"]) - copy, 1e-12))[0] or None
    compute = dataclasses.replace(compute, gamma_exp=gamma_exp, delta_coord=delta_coord, delta_epoch=delta_epoch,
                                  gamma_gemm=gamma_gemm)
    tiny = [dict(run, **newton_options(run)) for run in raw["tiny"]
            if run["inner_solver"] == "prox_newton" and run["sizes"]]
    delta_newton, delta_newton_solve, delta_certify = scaling.fit_newton_overheads(tiny, compute, network)
    return dataclasses.replace(compute, delta_newton=delta_newton, delta_newton_solve=delta_newton_solve,
                               delta_certify=delta_certify)


def newton_kernel_checks(say, fitted, compute):
    """The kernels behind proximal Newton's constants, modelled against measured: the Hessian (2 m k^2 flops at
    gamma_gemm plus the weighted copy), the coordinate descent, and the tiny solves."""
    from mpiopt.admm import scaling
    raw = fitted["newton"]
    rows = []
    h = raw["hessian"]
    for m, k, seconds in zip(h["m"], h["k"], h["seconds"]):
        work = scaling.Work(gemm_flops=2.0 * m * k * k, mem_bytes=2 * scaling.DOUBLE * m * k)
        predicted = work.compute_time(compute)
        rows.append((f"Hessian A^T D A, {m} x {k}", scaling.seconds(predicted), scaling.seconds(seconds),
                     f"{predicted / seconds:.2f}"))
    cd = raw["coordinate_descent"]
    for k, epochs, seconds in zip(cd["k"], cd["epochs"], cd["seconds"]):
        predicted = epochs * scaling.coordinate_epoch(k).compute_time(compute)
        rows.append((f"coordinate descent ({'compiled' if cd.get('compiled') else 'numpy twin'}), k = {k}, "
                     f"{epochs} epochs", scaling.seconds(predicted),
                     scaling.seconds(seconds), f"{predicted / seconds:.2f}"))
    for run in raw["tiny"]:
        if run["inner_solver"] != "prox_newton" or not run["sizes"]:
            continue
        predicted = scaling.predict_working_set(run["m"], run["n"], 1, run["sizes"], run["iterations"], compute,
                                                scaling.Network(0.0, 0.0), "prox_newton", **newton_options(run))
        label = (f"tiny {run['m']} x {run['n']}, lam {run['lam_ratio']} lambda_max, gap_tol {run['gap_tol']:g}: "
                 f"{len(run['sizes'])} outer, "
                 f"{sum(run['iterations'])} Newton")
        for phase in ("solve", "gap"):
            rows.append((f"{label}, {phase}", scaling.seconds(predicted[phase]), scaling.seconds(run[phase]),
                         f"{predicted[phase] / run[phase]:.2f}"))
    say("\nProximal Newton's kernels and the tiny solves its fixed costs were fitted on (1 rank):\n")
    say(scaling.format_table(["kernel", "model", "measured", "ratio"], rows))


def print_parameters(say, args, compute, net, network, newton=False):
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
              ("copy", network.copy, "s/byte", None, ""),
              ("node_bandwidth (every rank streaming, 2 ranks)" if net else "node_bandwidth (not measured)",
               network.node_bandwidth, "B/s", network.node_bandwidth / 1e9 if network.node_bandwidth else None,
               "GB/s")]
    if newton:
        params += [("gamma_exp (logistic Newton terms, per row)", compute.gamma_exp, "s/row",
                    1 / compute.gamma_exp / 1e6 if compute.gamma_exp else None, "Mrow/s"),
                   ("gamma_gemm (Hessian A^T (D A), gemm)" + ("" if compute.gamma_gemm else ": gamma_flop"),
                    compute.gemm, "s/flop", 1 / compute.gemm / 1e9 if compute.gemm else None, "GFlop/s"),
                   ("delta_coord (per coordinate update, rank 0)", compute.delta_coord, "s", None, ""),
                   ("delta_epoch (per coordinate-descent epoch, fixed)", compute.delta_epoch, "s", None, ""),
                   ("delta_newton (per Newton iteration, fixed)", compute.delta_newton, "s", None, ""),
                   ("delta_newton_solve (per restricted Newton solve, fixed)", compute.delta_newton_solve, "s",
                    None, ""),
                   ("delta_certify (per logistic certificate, fixed)", compute.delta_certify, "s", None, "")]
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



def counts(run):
    """A run's iteration counts for the tables: ADMM iterations, or proximal Newton's outer iterations, Newton
    iterations and coordinate epochs."""
    if run["solver"] == "ws_prox_newton":
        return (f"{run['outer_iterations']}/{run['iterations']}/{run['coordinate_epochs']}"
                + (f"+{run['certificate_epochs']}" if run.get("certificate_epochs") else ""))
    return str(run["iterations"])


def phase_checks(say, runs, ranks, compute, network, title="Predicted against measured, per phase"):
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
                           "iterations": run["iterations"], "reference_iterations": reference["iterations"],
                           "counts": counts(run), "reference_counts": counts(reference)})
            check_rows.append((f"{run['case']} {run['m']}x{run['n']}", run["solver"], run["ranks"],
                               f"{counts(run)} ({counts(reference)})", phase,
                               scaling.seconds(predicted[phase]), scaling.seconds(value), f"{ratio:.2f}"))
    cores = os.cpu_count() or 1
    over = [p for p in ranks if p > cores]
    say(f"\n{title} (iterations: measured at p (used: at p = {min(ranks)}); proximal Newton: outer/Newton/"
        f"coordinate epochs, the refined points' included (+ any outside the restricted solves); "
        + (f"{', '.join(map(str, over))} ranks on {cores} cores are OVERSUBSCRIBED):\n" if over
           else f"no rank count exceeds the {cores} cores):\n"))
    say(scaling.format_table(["case", "solver", "ranks", "iterations", "phase", "predicted", "measured", "ratio"],
                             check_rows))
    outside = [run for run in runs if run.get("certificate_epochs") and not run.get("warm_start")]
    for run in outside:  # the cold starts' epochs should all be in info["coordinate_epochs"]
        say(f"WARNING: {run['case']} at {run['ranks']} ranks: {run['certificate_epochs']} coordinate epochs outside "
            f"info['coordinate_epochs'] at a cold start (not charged)")
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


def logistic_projections_part(say, runs, ranks, compute, network, cluster):
    """Proximal Newton's working sets projected to 1,024 ranks from each logistic case's counts at the
    smallest p, on this machine's network and the cluster's; and 10^7 x 10^4 with the largest case's counts
    (assumed: a what-if)."""
    from mpiopt.admm import scaling
    projections = {}
    references = [r for r in runs if r["ranks"] == min(ranks)]
    if not references:
        return projections
    largest = max(references, key=lambda r: r["m"] * r["n"])
    memory_limit = 4 << 30
    cases = [(r["m"], r["n"], r, f"{r['case']} {r['m']} x {r['n']}, measured counts at p = {min(ranks)}")
             for r in references]
    cases.append((10 ** 7, 10 ** 4, largest, f"10^7 x 10^4 with {largest['case']}'s counts (assumed, a what-if)"))
    for m, n, reference, label in cases:
        rows = {}
        for name, net_model in (("here", network), ("cluster", cluster)):
            rows[name] = scaling.working_set_table(m, n, reference["working_set_sizes"], reference["newton_per_outer"],
                                                   compute, net_model, inner_solver="prox_newton",
                                                   memory_limit=memory_limit, **newton_options(reference))
            projections[f"{m}x{n} {name}"] = rows[name]
        say(f"\nProjection, proximal Newton's working sets, {label}: {reference['outer_iterations']} outer, "
            f"{reference['iterations']} Newton iterations, {reference['coordinate_epochs']} coordinate epochs "
            f"(the refined points' included), "
            f"sets {reference['working_set_sizes']}; memory limit {scaling.human_bytes(memory_limit)} per rank:\n")
        table = []
        for here, there in zip(rows["here"], rows["cluster"]):
            table.append((here["ranks"], scaling.shard_rows(m, here["ranks"]),
                          scaling.human_bytes(here["memory_per_rank"]), "yes" if here["fits"] else "no",
                          scaling.seconds(here["gap"]), scaling.seconds(here["solve"]), scaling.seconds(here["total"]),
                          f"{here['efficiency']:.2f}", scaling.seconds(there["gap"]), scaling.seconds(there["solve"]),
                          scaling.seconds(there["total"]), f"{there['efficiency']:.2f}"))
        say(scaling.format_table(["ranks", "rows/rank", "memory/rank", "fits", "gap (here)", "solve (here)",
                                  "total (here)", "eff. (here)", "gap (cluster)", "solve (cluster)",
                                  "total (cluster)", "eff. (cluster)"], table))
    return projections


if __name__ == "__main__":
    sys.exit(main())
