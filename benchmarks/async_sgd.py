"""SGD with heterogeneous workers: Minibatch, Asynchronous, Rennala and Ringmaster SGD, measured against the theory.

    mpiexec -n 9 python benchmarks/async_sgd.py [--part all] [--seeds 5] [--plot docs/img/async_sgd] [--quick]

Every run minimizes the worst-case quadratic of the lower bounds
(mpiopt.asyncsgd.problems, L = 1, ``--dim``) with Gaussian gradient noise of
variance sigma^2 = S epsilon, so that S = sigma^2 / epsilon is exactly each of
``--noise-ratios``; epsilon is ``--epsilon-fraction`` of ||grad f(x0)||^2.
Every method uses the theory's default step size, batch and threshold
(mpiopt.asyncsgd.theory; nothing is tuned per method), and each configuration
is run for ``--seeds`` seeds; the tables quote the median time to epsilon (the
first evaluation with ||grad f||^2 <= epsilon, in compute-time units) beside
the predicted time (result.predicted, constants dropped).  Parts (``--part``):

* ``mpi``: ranks - 1 workers (8 under ``mpiexec -n 9``) with tau_i = sqrt(i),
  each sleeping tau_i * ``--time-unit`` seconds per gradient, so that it runs
  on 2 cores; the simulator runs the same workers and seeds side by side, and
  the overhead of MPI is the ratio of the two medians;
* ``sim1000`` and ``sim10000``: the discrete-event simulator with 1,000 and
  10,000 workers, tau_i = sqrt(i);
* ``throughput``: 10,000 simulated workers for ``--throughput-gradients``
  (10^6) gradient events per method, stop_at_epsilon off, the median of
  ``--throughput-repeats`` (3) runs: events per second on one core (the
  target: 10^6 events in at most 5 s, twice the speed of a plain heapq loop of
  Asynchronous SGD on the same problem, :func:`plain_heapq_asgd`, timed beside
  them); then the other
  methods, each in its own setting (EXTRA_SETUPS: Malenia and Amelie
  on the heterogeneous quadratic, Freya and Soviet PAGE on least squares,
  MindFlayer with lognormal times, Shadowheart with uploads, Fragile and
  Amelie on a mesh of ``--graph-workers`` workers), for
  ``--extra-gradients`` (10^5) events each;
* ``ringmaster``: the Ringmaster paper's setting at reduced size:
  tau_i = 1 + sqrt(i) + |N(0, i + 1)| drawn per gradient (tau="ringmaster"),
  ``--ringmaster-workers`` workers, ``--ringmaster-dim`` dimensions.

Targets (measured, not asserted): T_Rennala <= T_ASGD <= T_Minibatch and
T_Ringmaster <= T_ASGD in every configuration; with the simulator, 1,000
workers and tau_i = sqrt(i), the measured T_MB / T_R and T_A / T_R within a
factor of 1.5 of the predicted ones.  The simulator's parts run on rank 0
alone (the other ranks sleep), so the benchmark runs under any rank count; the
mpi part needs at least 2 ranks.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import report  # noqa: E402
from common import fill_presets, start, wait_without_spinning, write_result  # noqa: E402

METHODS = ("minibatch", "asgd", "rennala", "ringmaster")
THROUGHPUT_TARGET_S = 5.0  # 10^6 events in at most this on one core: twice a plain heapq loop's speed
# the other methods' throughput settings, each where it can run: (problem, its options, run settings); "n" is the part's workers
EXTRA_SETUPS = {
    "malenia": ("heterogeneous-quadratic", {"workers": "n"}, {"tau": "sqrt"}),
    "mindflayer": ("quadratic", {}, {"tau": "lognormal"}),
    "shadowheart": ("worst-case", {"noise": 0.01}, {"tau": "sqrt", "upload": "sqrt", "upload_scale": "d^-1/2"}),
    "freya-page": ("least-squares", {"rows": 20000}, {"tau": "sqrt"}),
    "soviet-page": ("least-squares", {"rows": 20000}, {"tau": "sqrt"}),
    "fragile": ("worst-case", {"noise": 0.01}, {"tau": "constant", "graph": "mesh", "graph_options": {"rho": 1.0}}),
    "amelie": ("heterogeneous-quadratic", {"workers": "n"}, {"tau": "constant", "graph": "mesh",
                                                             "graph_options": {"rho": 1.0}}),
}
GRAPH_METHODS = ("fragile", "amelie")  # all-pairs shortest paths: O(n^2) memory, so fewer workers
PARTS = ("mpi", "sim1000", "sim10000", "throughput", "ringmaster")
RATIO_FACTOR = 1.5       # the target: measured ratio to Rennala within this factor of the predicted one
CAP = 10                 # a run stops at CAP times its predicted time if it has not reached epsilon by then
CURVE_POINTS = 300       # points of each plotted curve kept in the JSON
# The defaults reproduce docs/async_sgd.md; --quick (the smoke test) shrinks every size.  Any flag given wins.
PRESETS = {
    "full": {"seeds": 5, "dim": 32, "epsilon_fraction": 0.01, "noise_ratios": "1,10", "time_unit": 0.03,
             "sim_workers": "1000,10000", "throughput_workers": 10000, "throughput_gradients": 10 ** 6,
             "throughput_repeats": 3, "extra_gradients": 10 ** 5, "graph_workers": 1000,
             "ringmaster_workers": 1000, "ringmaster_dim": 100},
    "quick": {"seeds": 1, "dim": 8, "epsilon_fraction": 0.1, "noise_ratios": "1", "time_unit": 0.002,
              "sim_workers": "20,50", "throughput_workers": 50, "throughput_gradients": 2000,
              "throughput_repeats": 1, "extra_gradients": 500, "graph_workers": 16,
              "ringmaster_workers": 20, "ringmaster_dim": 8},
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=PARTS + ("all",), default="all")
    parser.add_argument("--seeds", type=int, help="seeds 0..seeds-1 per configuration (5)")
    parser.add_argument("--dim", type=int, help="dimension of the worst-case quadratic (32)")
    parser.add_argument("--epsilon-fraction", type=float, help="epsilon as a fraction of ||grad f(x0)||^2 (0.01)")
    parser.add_argument("--noise-ratios", help="the values of S = sigma^2 / epsilon, comma-separated (1,10)")
    parser.add_argument("--time-unit", type=float, help="mpi: seconds a worker sleeps per compute-time unit (0.03)")
    parser.add_argument("--sim-workers", help="the workers of the sim1000 and sim10000 parts (1000,10000)")
    parser.add_argument("--throughput-workers", type=int, help="simulated workers of the throughput part (10000)")
    parser.add_argument("--throughput-gradients", type=int, help="gradient events per method (10**6)")
    parser.add_argument("--throughput-repeats", type=int, help="runs per method, the median quoted (3)")
    parser.add_argument("--extra-gradients", type=int, help="gradient events per method of EXTRA_SETUPS (10**5)")
    parser.add_argument("--graph-workers", type=int, help="workers of the graph methods' throughput (1000)")
    parser.add_argument("--ringmaster-workers", type=int, help="workers of the Ringmaster paper's setting (1000)")
    parser.add_argument("--ringmaster-dim", type=int, help="its dimension (100)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    parser.add_argument("--plot", default=None,
                        help="prefix of the figures: PREFIX_<configuration>.png (e.g. docs/img/async_sgd)")
    parser.add_argument("--output", default="results/async_sgd.json")
    args = parser.parse_args(argv)
    fill_presets(args, PRESETS)
    args.noise_ratios = [float(s) for s in str(args.noise_ratios).split(",")]
    args.sim_workers = [int(n) for n in str(args.sim_workers).split(",")]
    if len(args.sim_workers) != 2:
        parser.error("--sim-workers takes two counts (the sim1000 and sim10000 parts)")
    args.parts = PARTS if args.part == "all" else (args.part,)
    return args


def configurations(args, ranks):
    """The time-to-epsilon configurations of the chosen parts: name, runtime(s), workers, tau, S, dim."""
    configs = []
    for S in args.noise_ratios:
        tag = f"S{S:g}"
        if "mpi" in args.parts:
            configs.append({"name": f"mpi_{tag}", "part": "mpi", "runtimes": ("mpi", "simulator"),
                            "n_workers": ranks - 1, "tau": "sqrt", "S": S, "dim": args.dim})
        for part, n in zip(("sim1000", "sim10000"), args.sim_workers):
            if part in args.parts:
                configs.append({"name": f"{part}_{tag}", "part": part, "runtimes": ("simulator",), "n_workers": n,
                                "tau": "sqrt", "S": S, "dim": args.dim})
        if "ringmaster" in args.parts:
            configs.append({"name": f"ringmaster_{tag}", "part": "ringmaster", "runtimes": ("simulator",),
                            "n_workers": args.ringmaster_workers, "tau": "ringmaster", "S": S,
                            "dim": args.ringmaster_dim})
    return sorted(configs, key=lambda c: PARTS.index(c["part"]))


def make_problem(dim, S, epsilon_fraction):
    """The worst-case quadratic with sigma^2 = S epsilon, and its epsilon (a fraction of ||grad f(x0)||^2)."""
    from mpiopt.asyncsgd import get_problem
    clean = get_problem("worst-case", dim=dim, noise=0.0, L=1.0)
    g0 = clean.grad(clean.x0())
    epsilon = epsilon_fraction * float(g0 @ g0)
    return get_problem("worst-case", dim=dim, noise=S * epsilon, L=1.0), epsilon


def predicted(problem, tau, n_workers, epsilon):
    import numpy as np

    from mpiopt.asyncsgd import get_tau_model, predicted_times
    means = get_tau_model(tau).mean(np.arange(1, n_workers + 1))
    return predicted_times(means, problem.sigma2, epsilon, problem.L, problem.Delta)


def on_root(comm, function):
    """``function()`` on rank 0 alone (the simulator needs one core) while the other ranks sleep.

    Rank 0 gets the value, the others None; a failure raises the same error on every rank."""
    from mpiopt.core.comm import check_collectively
    value = error = None
    if comm.rank == 0:
        try:
            value = function()
        except Exception as failure:  # noqa: BLE001 - every rank must hear of it
            error = f"{type(failure).__name__}: {failure}"
    wait_without_spinning(comm)
    check_collectively(comm, error)
    return value


def curve(history):
    """At most CURVE_POINTS rows of a history (time, ||grad f||^2, f), evenly spaced, the last one kept."""
    rows = len(history["time"])
    points = min(rows, CURVE_POINTS)
    keep = sorted({round(i * (rows - 1) / max(points - 1, 1)) for i in range(points)})
    return {"time": [history["time"][i] for i in keep], "grad_norm2": [history["grad_norm2"][i] for i in keep],
            "loss": [history["loss"][i] for i in keep]}


def one_run(comm, config, runtime, method, seed, problem, epsilon, cap, time_unit):
    """One run: the mpi runtime on every rank of ``comm``, the simulator on rank 0 alone; a record on rank 0."""
    from mpi4py import MPI

    from mpiopt.asyncsgd import async_sgd
    settings = {"method": method, "runtime": runtime, "n_workers": config["n_workers"], "tau": config["tau"],
                "epsilon": epsilon, "seed": seed, "max_steps": None, "max_time": cap, "time_unit": time_unit}

    def run(on):
        started = time.perf_counter()
        result = async_sgd(problem, comm=on, **settings)
        return result, time.perf_counter() - started

    result, wall = run(comm) if runtime == "mpi" else on_root(comm, lambda: run(MPI.COMM_SELF)) or (None, None)
    if comm.rank != 0:
        return None
    return {"runtime": runtime, "method": method, "seed": seed, "status": result.status,
            "time_to_epsilon": result.time_to_epsilon, "time": result.time, "steps": result.steps,
            "gradients": result.gradients, "wall_s": wall, "parameters": result.info["parameters"],
            "curve": curve(result.history) if seed == 0 else None}


def median_or_none(values):
    return statistics.median(values) if values and all(v is not None for v in values) else None


def within(measured, expected, factor=RATIO_FACTOR):
    return measured is not None and expected > 0 and 1 / factor <= measured / expected <= factor


def summarize(config, runs, prediction):
    """Per runtime and method: the median time to epsilon, the prediction, the ratios to Rennala; the targets."""
    summary = {}
    for runtime in config["runtimes"]:
        rows = {}
        for method in METHODS:
            mine = [r for r in runs if r["runtime"] == runtime and r["method"] == method]
            rows[method] = {"times": [r["time_to_epsilon"] for r in mine],
                            "median": median_or_none([r["time_to_epsilon"] for r in mine]),
                            "reached": sum(r["time_to_epsilon"] is not None for r in mine),
                            "predicted": prediction[method],
                            "steps": statistics.median(r["steps"] for r in mine),
                            "gradients": statistics.median(r["gradients"] for r in mine),
                            "wall_s": statistics.median(r["wall_s"] for r in mine),
                            "parameters": mine[0]["parameters"]}
        rennala = rows["rennala"]["median"]
        for method, row in rows.items():
            row["ratio"] = row["median"] / rennala if row["median"] is not None and rennala else None
            row["predicted_ratio"] = prediction[method] / prediction["rennala"]
        t = {m: rows[m]["median"] for m in METHODS}
        known = all(v is not None for v in t.values())
        targets = {"ordering": known and t["rennala"] <= t["asgd"] <= t["minibatch"],
                   "ringmaster_le_asgd": known and t["ringmaster"] <= t["asgd"]}
        if config["part"] == "sim1000":
            for method in ("minibatch", "asgd"):
                targets[f"{method}_ratio_within_{RATIO_FACTOR:g}x"] = within(rows[method]["ratio"],
                                                                              rows[method]["predicted_ratio"])
        summary[runtime] = {"methods": rows, "targets": targets}
    if config["runtimes"] == ("mpi", "simulator"):
        summary["mpi_over_simulator"] = {
            m: (summary["mpi"]["methods"][m]["median"] / summary["simulator"]["methods"][m]["median"]
                if summary["mpi"]["methods"][m]["median"] and summary["simulator"]["methods"][m]["median"] else None)
            for m in METHODS}
    return summary


def time_to_epsilon_part(comm, config, args, say):
    """Every method, seed and runtime of one configuration (runtimes side by side); the record on rank 0."""
    problem, epsilon = make_problem(config["dim"], config["S"], args.epsilon_fraction)
    prediction = predicted(problem, config["tau"], config["n_workers"], epsilon)
    say(f"{config['name']}: {config['n_workers']} workers, tau {config['tau']}, d = {config['dim']}, "
        f"S = {config['S']:g}, epsilon = {epsilon:.4g}; predicted (constants dropped) "
        + ", ".join(f"T_{m} = {prediction[m]:.4g}" for m in METHODS) + f", m* = {prediction['m_star']}")
    runs, started = [], time.perf_counter()
    for seed in range(args.seeds):
        for method in METHODS:
            for runtime in config["runtimes"]:
                run = one_run(comm, config, runtime, method, seed, problem, epsilon, CAP * prediction[method],
                              args.time_unit)
                if comm.rank == 0:
                    runs.append(run)
                    reached = "not reached" if run["time_to_epsilon"] is None else f"{run['time_to_epsilon']:.4g}"
                    say(f"  seed {seed} {runtime:9s} {method:10s} time to epsilon {reached:>11s} "
                        f"(predicted {prediction[method]:.4g}), {run['gradients']} gradients, {run['wall_s']:.2f} s")
    if comm.rank != 0:
        return None
    return {**config, "epsilon": epsilon, "sigma2": problem.sigma2, "Delta": problem.Delta, "L": problem.L,
            "seeds": args.seeds, "time_unit": args.time_unit if "mpi" in config["runtimes"] else None,
            "predicted": prediction, "summary": summarize(config, runs, prediction),
            "curves": {f"{r['runtime']}/{r['method']}": r["curve"] for r in runs if r["curve"]},
            "runs": [{k: v for k, v in r.items() if k != "curve"} for r in runs],
            "wall_s": time.perf_counter() - started}


def plain_heapq_asgd(problem, n_workers, events, epsilon, seed=0):
    """The reference point of the throughput target: Asynchronous SGD (the theory's delay-adaptive step) on
    ``problem`` (a Gaussian-noise problem) in a plain heapq loop, ``n_workers`` workers with tau_i = sqrt(i),
    each drawing its noise from its own stream, f and ||grad f||^2 evaluated after every step, as the
    simulator's run does; none of the simulator's exact times, ties, cancellations, counts or checkpoints.
    Returns (steps, the last ||grad f||^2)."""
    import heapq

    import numpy as np

    from mpiopt.asyncsgd import theory
    from mpiopt.core.random import random_stream
    gamma = theory.default_step_size("asgd", n_workers, problem.L, problem.sigma2, epsilon)
    scale = (problem.sigma2 / problem.dim) ** 0.5
    taus = np.sqrt(np.arange(1, n_workers + 1)).tolist()
    streams = [random_stream(seed, "asyncsgd-gradient", w) for w in range(n_workers)]
    x = problem.x0()
    started = [(x, 0)] * n_workers  # the point and step each worker computes at
    heap = [(taus[w], w) for w in range(n_workers)]
    heapq.heapify(heap)
    history, k = [], 0
    for _ in range(events):
        now, worker = heapq.heappop(heap)
        point, k_at = started[worker]
        g = problem.grad(point) + scale * streams[worker].standard_normal(problem.dim)
        delay = k - k_at
        step = min(gamma, 1 / (2 * problem.L * delay)) if delay > 0 else gamma
        x = x - step * g
        k += 1
        started[worker] = (x, k)
        heapq.heappush(heap, (now + taus[worker], worker))
        loss, grad = problem.loss_and_grad(x)
        history.append((now, k, loss, float(grad @ grad)))
    return k, history[-1][3]


def timed(function, repeats):
    """(the last value of ``function()``, the median wall and CPU seconds of ``repeats`` calls)."""
    walls, cpus = [], []
    for _ in range(repeats):
        started, cpu = time.perf_counter(), time.process_time()
        value = function()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    return value, statistics.median(walls), statistics.median(cpus)


def throughput_part(comm, args, say):
    """Gradient events per second of each method with ``throughput_workers`` simulated workers, on rank 0."""
    from mpi4py import MPI

    from mpiopt.asyncsgd import async_sgd
    S = args.noise_ratios[0]
    problem, epsilon = make_problem(args.dim, S, args.epsilon_fraction)
    repeats = args.throughput_repeats
    say(f"throughput: {args.throughput_workers} simulated workers, tau sqrt, S = {S:g}, "
        f"{args.throughput_gradients} gradient events per method (stop_at_epsilon off; eval_every 1), "
        f"the median of {repeats} runs")
    _, plain_wall, plain_cpu = on_root(comm, lambda: timed(lambda: plain_heapq_asgd(
        problem, args.throughput_workers, args.throughput_gradients, epsilon), repeats)) or (None, None, None)
    if comm.rank == 0:
        say(f"  plain heapq loop (asgd) {args.throughput_gradients} events in {plain_wall:.1f} s "
            f"({plain_cpu:.1f} s of CPU)")
    rows = []
    for method in METHODS:
        def run():
            return async_sgd(problem, comm=MPI.COMM_SELF, method=method, runtime="simulator",
                             n_workers=args.throughput_workers, tau="sqrt", epsilon=epsilon, seed=0,
                             max_steps=None, max_gradients=args.throughput_gradients, stop_at_epsilon=False)
        result, wall, cpu = on_root(comm, lambda: timed(run, repeats)) or (None, None, None)
        if comm.rank == 0:
            rows.append({"method": method, "gradients": result.gradients, "steps": result.steps, "wall_s": wall,
                         "cpu_s": cpu, "events_per_s": result.gradients / wall,
                         "events_per_cpu_s": result.gradients / cpu, "evaluations": len(result.history["time"]),
                         "within_target": wall <= THROUGHPUT_TARGET_S, "over_plain_heapq": wall / plain_wall})
            say(f"  {method:10s} {result.gradients} events, {result.steps} steps in {wall:.1f} s "
                f"({cpu:.1f} s of CPU): {result.gradients / wall:,.0f} events/s, {wall / plain_wall:.2f}x "
                "the plain heapq loop")
    extra = []
    for method, (name, options, settings) in EXTRA_SETUPS.items():
        n = args.graph_workers if method in GRAPH_METHODS else args.throughput_workers
        options = {"dim": args.dim, **{k: n if v == "n" else v for k, v in options.items()}}
        settings = {k: args.dim ** -0.5 if v == "d^-1/2" else v for k, v in settings.items()}

        def run_extra():
            started, cpu = time.perf_counter(), time.process_time()
            result = async_sgd(name, comm=MPI.COMM_SELF, problem_options=options, method=method, n_workers=n,
                               seed=0, max_steps=None, max_gradients=args.extra_gradients, stop_at_epsilon=False,
                               **settings)
            return result, time.perf_counter() - started, time.process_time() - cpu
        result, wall, cpu = on_root(comm, run_extra) or (None, None, None)
        if comm.rank == 0:
            extra.append({"method": method, "problem": name, "n_workers": n, "gradients": result.gradients,
                          "steps": result.steps, "wall_s": wall, "cpu_s": cpu, "events_per_s": result.gradients / wall,
                          "events_per_cpu_s": result.gradients / cpu, "timing": result.info["timing"]})
            say(f"  {method:11s} n={n} {result.gradients} events, {result.steps} steps in {wall:.1f} s: "
                f"{result.gradients / wall:,.0f} events/s")
    return None if comm.rank else {"n_workers": args.throughput_workers, "gradients": args.throughput_gradients,
                                   "S": S, "dim": args.dim, "rows": rows, "target_s": THROUGHPUT_TARGET_S,
                                   "repeats": repeats, "plain_heapq": {"wall_s": plain_wall, "cpu_s": plain_cpu},
                                   "extra_gradients": args.extra_gradients, "extra": extra}


def plot_paths(args, configs):
    return {c["name"]: f"{args.plot}_{c['name']}.png" for c in configs} if args.plot else {}


def plot(path, config):
    """||grad f||^2 and f - f_low against time for each method (seed 0); MPI solid, the simulator dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    colors = dict(zip(METHODS, ("C0", "C1", "C2", "C3")))
    f_low = -config["L"] * config["dim"] / (8 * (config["dim"] + 1))
    for key, points in config["curves"].items():
        runtime, method = key.split("/")
        style = {"color": colors[method], "linestyle": "-" if runtime == config["runtimes"][0] else "--",
                 "linewidth": 1, "label": method if len(config["runtimes"]) == 1 else f"{method} ({runtime})"}
        axes[0].semilogy(points["time"], points["grad_norm2"], **style)
        axes[1].semilogy(points["time"], [max(v - f_low, 1e-300) for v in points["loss"]], **style)
    axes[0].axhline(config["epsilon"], color="gray", linestyle=":", label="epsilon")
    axes[0].set_title("||grad f(x)||^2")
    axes[1].set_title("f(x) - f*")
    for axis in axes:
        axis.set_xlabel("time (compute-time units)")
    axes[0].legend(fontsize=7)
    figure.suptitle(f"{config['name']}: {config['n_workers']} workers, tau {config['tau']}, d = {config['dim']}, "
                    f"S = {config['S']:g} (seed 0)")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def main(argv=None):
    from mpiopt.core.comm import check_collectively

    args, comm, say = start(parse_args, argv, plots=("plot",), outputs=lambda args, comm: [
        args.output, *plot_paths(args, configurations(args, comm.size)).values()])
    check_collectively(comm, "the mpi part needs at least 2 ranks (a server and a worker)"
                       if "mpi" in args.parts and comm.size < 2 and comm.rank == 0 else None)
    configs = configurations(args, comm.size)
    paths = plot_paths(args, configs)
    started, load = time.perf_counter(), os.getloadavg()
    results = [time_to_epsilon_part(comm, config, args, say) for config in configs]
    throughput = throughput_part(comm, args, say) if "throughput" in args.parts else None
    payload = {"benchmark": "async_sgd", "ranks": comm.size, "quick": args.quick, "parts": list(args.parts),
               "methods": list(METHODS), "problem": "worst-case", "L": 1.0, "epsilon_fraction": args.epsilon_fraction,
               "seeds": args.seeds, "cap": CAP, "ratio_factor": RATIO_FACTOR, "configs": results,
               "throughput": throughput, "wall_s": time.perf_counter() - started,
               "machine": {"cores": os.cpu_count(), "load_average_1min": {"start": load[0], "end": os.getloadavg()[0]}}}
    write_result(comm, args.output, payload)
    if comm.rank == 0:
        print("\n" + report.async_sgd_tables(payload), flush=True)
        for config in results:
            if config["name"] in paths:
                plot(paths[config["name"]], config)
                print(f"figure written to {paths[config['name']]}", flush=True)
    return 0


if __name__ == "__main__":
    from mpiopt.core.comm import run_collectively
    sys.exit(run_collectively(main))
