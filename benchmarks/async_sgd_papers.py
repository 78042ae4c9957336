"""The heterogeneous-worker papers' settings, reproduced on the simulator: Shadowheart, MindFlayer, the universal model.

    python benchmarks/async_sgd_papers.py [--part all] [--seeds 2] [--quick] [--output results/async_sgd_papers.json]

Parts (``--part``):

* ``shadowheart``: the Shadowheart paper's Figure 5 setting: h_i ~ U(0.1, 1)
  (drawn once, seeded), upload tau_i = sqrt(i) / d^beta per coordinate for
  beta in {1/2, 3/4, 1}, n in ``--workers`` workers, on the worst-case
  quadratic (d = ``--dim``, sigma^2/eps = ``--noise-ratio``); Shadowheart
  (Random-K, K = d/100) against Minibatch SGD, Asynchronous SGD and Rennala
  SGD sending dense vectors and Minibatch SGD with QSGD (8 bits) and Random-K
  (K = d/100: the paper's code's "QSGD") uploads.  Each method runs at the
  theory's step size and at the best of the grid gamma in {2^-k} (k = 0..6,
  by the median over the seeds);
* ``speeds``: h_i = sqrt(i) against h_i = 1 at sigma^2/eps in {1, 10, 100},
  beta = 3/4, the same methods at the theory's step sizes;
* ``mindflayer``: random compute times with heavy tails (lognormal sigma in
  {1, 2, 2.5}, Pareto alpha in {1.1, 1.5}; 16 workers, the quadratic with
  sigma^2 = 1): MindFlayer SGD against Rennala SGD with and without restarts
  and Asynchronous SGD;
* ``outages``: the universal computation model: workers off for a fraction f
  in {0, 0.3, 0.6} of every period of 50 units (staggered), Rennala and
  Asynchronous SGD on the quadratic and Malenia SGD on the heterogeneous
  quadratic; the measured time beside the model's recursion;
* ``freya``: Freya PAGE's setting (finite sums, h_i = sqrt(i)): the
  least-squares finite sum (m = 2000 rows, d = 20) and logistic regression on
  breast_cancer's 427 training rows, n in {10, 100} workers; Freya PAGE
  against Soviet PAGE (its synchronous baseline: each phase's work split
  evenly), Rennala SGD and Asynchronous SGD, each at the theory's parameters
  and at the best of the step-size grid gamma in {2^-k}, epsilon = 1e-3
  ||grad f(x0)||^2.

Every number is the median over ``--seeds`` seeds (gradient noise and random
times), in compute-time units, to the first evaluation with ||grad f||^2 <=
epsilon; a run that has not reached it by its cap counts as not reached.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import report  # noqa: E402
from common import fill_presets, start, write_result  # noqa: E402

PARTS = ("shadowheart", "speeds", "mindflayer", "outages", "freya", "fragile")
BASELINES = [("shadowheart", {}), ("minibatch", {}), ("asgd", {}), ("rennala", {}),
             ("minibatch", {"compressor": "qsgd8"}), ("minibatch", {"compressor": "randomk"})]
FREYA_METHODS = ("freya-page", "soviet-page", "rennala", "asgd")
CAP = 30                 # a baseline stops at CAP times Shadowheart's time (then: not reached)
GRID_WORKERS = 10        # the step-size grid runs where n is at most this (the larger runs take minutes)
PRESETS = {"full": {"seeds": 2, "dim": 1000, "workers": "10,100", "noise_ratio": 10.0, "grid": 7,
                    "max_gradients": 5_000_000},
           "quick": {"seeds": 1, "dim": 20, "workers": "3", "noise_ratio": 1.0, "grid": 2, "max_gradients": 3000}}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=PARTS + ("all",), default="all")
    parser.add_argument("--seeds", type=int, help="seeds per configuration (2)")
    parser.add_argument("--dim", type=int, help="the worst-case quadratic's dimension (1000)")
    parser.add_argument("--workers", help="the shadowheart part's worker counts, comma-separated (10,100)")
    parser.add_argument("--noise-ratio", type=float, help="sigma^2 / epsilon of the shadowheart part (10)")
    parser.add_argument("--grid", type=int, help="step sizes 2^0 .. 2^-(grid-1) tried per method (7)")
    parser.add_argument("--max-gradients", type=int, help="a run's cap on gradient events (5e6)")
    parser.add_argument("--methods", help="the freya part's methods, comma-separated (all of "
                        f"{','.join(FREYA_METHODS)})")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    parser.add_argument("--output", default="results/async_sgd_papers.json")
    args = parser.parse_args(argv)
    fill_presets(args, PRESETS)
    args.parts = PARTS if args.part == "all" else (args.part,)
    return args


def label(method, options):
    if options.get("compressor") == "qsgd8":
        return f"{method}+qsgd8"
    if options.get("compressor") == "randomk":
        return f"{method}+randomk"
    if options.get("restart") is False:
        return f"{method} (no restart)"
    return method


def median(values):
    found = [v for v in values if v is not None]
    return statistics.median(found) if len(found) == len(values) and found else None


def run(problem, problem_options, method, options, seeds, **settings):
    """The median time to epsilon over the seeds, and the first seed's result."""
    from mpiopt.asyncsgd import async_sgd
    from mpi4py import MPI
    results = [async_sgd(problem, comm=MPI.COMM_SELF, problem_options=problem_options, method=method,
                         method_options=options, seed=seed, **settings) for seed in range(seeds)]
    return median([r.time_to_epsilon for r in results]), results[0]


def best_of_grid(problem, problem_options, method, options, seeds, steps, **settings):
    """(the least median time to epsilon over the step sizes ``steps``, that step), or (None, None)."""
    best = (None, None)
    for gamma in steps:
        value, _ = run(problem, problem_options, method, options, seeds, step_size=gamma, **settings)
        if value is not None and (best[0] is None or value < best[0]):
            best = (value, gamma)
    return best


def shadowheart_configs(args):
    from mpiopt.core.random import random_stream
    for n in (int(w) for w in args.workers.split(",")):
        h = random_stream(0, "benchmark-h").uniform(0.1, 1.0, n).tolist()
        for beta in ((1.0,) if args.quick else (0.5, 0.75, 1.0)):
            yield {"part": "shadowheart", "n": n, "beta": beta, "h": "U(0.1, 1)", "tau": h,
                   "noise_ratio": args.noise_ratio, "scale": float(args.dim ** -beta)}


def speeds_configs(args):
    n = int(args.workers.split(",")[-1])
    for h_name in ("sqrt", "constant"):
        for ratio in ((1.0,) if args.quick else (1.0, 10.0, 100.0)):
            yield {"part": "speeds", "n": n, "beta": 0.75, "h": h_name, "tau": h_name, "noise_ratio": ratio,
                   "scale": float(args.dim ** -0.75)}


def compare(config, args, say, grid):
    """Every method of BASELINES at the theory's step size (and the grid's best when ``grid``)."""
    from mpiopt.asyncsgd import get_problem
    dim = args.dim
    g = get_problem("worst-case", dim=dim, noise=0.0).grad(np.zeros(dim))
    epsilon = 1e-2 * float(g @ g)              # 1e-2 ||grad f(x0)||^2 (= L^2 / 1600)
    sigma2 = config["noise_ratio"] * epsilon   # so that sigma^2 / epsilon is the configuration's exactly
    common = dict(n_workers=config["n"], tau=config["tau"], upload="sqrt", upload_scale=config["scale"],
                  epsilon=epsilon, max_gradients=args.max_gradients)
    rows, cap = [], None
    grid = grid and config["n"] <= GRID_WORKERS
    for method, options in BASELINES:
        started = time.perf_counter()
        if cap is not None:
            common["max_time"] = cap
        measured, first = run("worst-case", {"dim": dim, "noise": sigma2}, method, options, args.seeds, **common)
        if method == "shadowheart" and measured is not None:
            cap = CAP * measured
        row = {"method": label(method, options), "theory_step": first.info["parameters"]["step_size"],
               "measured": measured, "predicted": first.predicted.get(method), "steps": first.steps,
               "wall_s": time.perf_counter() - started}
        if method == "shadowheart":
            row.update(t_star=first.info["parameters"]["t_star"],
                       participants=first.info["parameters"]["participants"])
        if grid:
            row["grid_best"], row["grid_step"] = best_of_grid(
                "worst-case", {"dim": dim, "noise": sigma2}, method, options, args.seeds,
                [2.0 ** -k for k in range(args.grid)], **common)
        rows.append(row)
        say(f"  {config['part']} n={config['n']} beta={config['beta']} h={config['h']} "
            f"S={config['noise_ratio']:g} {row['method']}: {row['measured']} (theory step), "
            f"{row.get('grid_best')} (grid) [{row['wall_s']:.0f} s]")
    return {**{k: v for k, v in config.items() if k != "tau"}, "epsilon": epsilon, "cap": cap, "rows": rows}


def mindflayer_part(args, say):
    models = [("lognormal", {"sigma": 1.0}), ("lognormal", {"sigma": 2.0}), ("lognormal", {"sigma": 2.5}),
              ("pareto", {"alpha": 1.1}), ("pareto", {"alpha": 1.5})]
    if args.quick:
        models = models[1:2]
    n, seeds = (4 if args.quick else 16), max(args.seeds, 1 if args.quick else 5)
    out = []
    for tau, tau_options in models:
        rows = []
        for method, options in [("mindflayer", {}), ("rennala", {}), ("rennala", {"restart": False}), ("asgd", {})]:
            measured, first = run("quadratic", {"dim": 20, "noise": 1.0}, method, options, seeds, n_workers=n,
                                  tau=tau, tau_options=tau_options, max_gradients=min(400000, args.max_gradients))
            rows.append({"method": label(method, options), "measured": measured,
                         "predicted": first.predicted.get(method)})
        out.append({"tau": tau, "options": tau_options, "n": n, "seeds": seeds, "rows": rows})
        say(f"  mindflayer {tau} {tau_options}: " + ", ".join(f"{r['method']} {r['measured']}" for r in rows))
    return out


def outages_part(args, say):
    n, seeds = (4 if args.quick else 16), max(args.seeds, 1 if args.quick else 5)
    out = []
    for fraction in ((0.0, 0.6) if args.quick else (0.0, 0.3, 0.6)):
        power = None if fraction == 0 else "outages"
        settings = dict(n_workers=n, tau="sqrt", power=power,
                        power_options={"period": 50.0, "fraction": fraction} if power else None,
                        max_gradients=min(400000, args.max_gradients))
        rows = []
        for problem, options, method in [("quadratic", {"dim": 20, "noise": 0.1}, "rennala"),
                                         ("quadratic", {"dim": 20, "noise": 0.1}, "asgd"),
                                         ("heterogeneous-quadratic", {"dim": 20, "noise": 0.1, "workers": n},
                                          "malenia")]:
            measured, first = run(problem, options, method, {}, seeds, **settings)
            rows.append({"method": method, "problem": problem, "measured": measured,
                         "predicted": first.predicted.get(method), "steps": first.steps})
        out.append({"fraction": fraction, "n": n, "seeds": seeds, "rows": rows})
        say(f"  outages f={fraction}: " + ", ".join(f"{r['method']} {r['measured']} (pred {r['predicted']})"
                                                   for r in rows))
    return out


def freya_part(args, say):
    from mpiopt.asyncsgd import get_problem
    seeds = max(args.seeds, 1 if args.quick else 3)
    problems = [("least-squares", {"rows": 200 if args.quick else 2000, "dim": 20})]
    if not args.quick:
        problems.append(("logistic", {}))
    out = []
    for problem, options in problems:
        built = get_problem(problem, **options)
        g = built.grad(built.x0())
        epsilon = 1e-3 * float(g @ g)
        for n in ((4,) if args.quick else (10, 100)):
            rows, cap = [], None
            for method in [m for m in FREYA_METHODS if not args.methods or m in args.methods.split(",")]:
                settings = dict(n_workers=n, tau="sqrt", epsilon=epsilon, max_gradients=args.max_gradients)
                if cap is not None:
                    settings["max_time"] = cap
                started = time.perf_counter()
                measured, first = run(problem, options, method, {}, seeds, **settings)
                if method == "freya-page" and measured is not None:
                    cap = CAP * measured
                best = best_of_grid(problem, options, method, {}, seeds, [2.0 ** -k for k in range(args.grid)],
                                    **settings)
                rows.append({"method": method, "measured": measured, "predicted": first.predicted.get(method),
                             "theory_step": first.info["parameters"]["step_size"], "steps": first.steps,
                             "grid_best": best[0], "grid_step": best[1],
                             "discarded": sum(first.info["workers"]["discarded"]),
                             "wall_s": time.perf_counter() - started})
                say(f"  freya {problem} n={n} {method}: {measured} (theory), {rows[-1]['grid_best']} (grid) "
                    f"[{rows[-1]['wall_s']:.0f} s]")
            out.append({"problem": problem, "options": options, "samples": built.n_samples, "n": n,
                        "epsilon": epsilon, "seeds": seeds, "cap": cap, "rows": rows})
    return out


def fragile_part(args, say):
    n, dim = (9, 50) if args.quick else (100, 1000)
    seeds = max(args.seeds, 1 if args.quick else 2)
    options = {"dim": dim, "noise": 0.0, "mask": 0.1}
    out = []
    for rho in ((10.0,) if args.quick else (0.1, 1.0, 10.0)):
        rows = []
        for S in ((10, 40) if args.quick else (10, 20, 40, 80, 120)):
            settings = dict(n_workers=n, tau="constant", graph="mesh", graph_options={"rho": rho}, batch=S,
                            epsilon=1e-5, max_gradients=args.max_gradients)
            measured, first = run("worst-case", options, "fragile", {}, seeds, **settings)
            best = best_of_grid("worst-case", options, "fragile", {}, seeds, (1.0, 0.5, 0.25), **settings)
            rows.append({"S": S, "measured": measured, "grid_best": best[0], "grid_step": best[1],
                         "predicted": first.predicted["fragile"],
                         "pivot": first.info["parameters"]["pivot"], "steps": first.steps,
                         "contributing": sum(a > 0 for a in first.info["workers"]["accepted"])})
            say(f"  fragile rho={rho} S={S}: {measured} (theory step), {rows[-1]['grid_best']} (grid), "
                f"{rows[-1]['contributing']} workers contribute")
        out.append({"rho": rho, "n": n, "dim": dim, "seeds": seeds, "rows": rows})
    return out


def main(argv=None):
    args, comm, say = start(parse_args, argv)
    started = time.perf_counter()
    payload = {"benchmark": "async_sgd_papers", "quick": args.quick, "parts": list(args.parts), "seeds": args.seeds,
               "dim": args.dim}
    if comm.rank == 0:
        if "shadowheart" in args.parts:
            payload["shadowheart"] = [compare(c, args, say, grid=True) for c in shadowheart_configs(args)]
        if "speeds" in args.parts:
            payload["speeds"] = [compare(c, args, say, grid=False) for c in speeds_configs(args)]
        if "mindflayer" in args.parts:
            payload["mindflayer"] = mindflayer_part(args, say)
        if "outages" in args.parts:
            payload["outages"] = outages_part(args, say)
        if "freya" in args.parts:
            payload["freya"] = freya_part(args, say)
        if "fragile" in args.parts:
            payload["fragile"] = fragile_part(args, say)
    payload["wall_s"] = time.perf_counter() - started
    payload["machine"] = {"cores": os.cpu_count()}
    write_result(comm, args.output, payload)
    if comm.rank == 0:
        print("\n" + report.render(payload), flush=True)
    return 0


if __name__ == "__main__":
    from mpiopt.core.comm import run_collectively
    sys.exit(run_collectively(main))
