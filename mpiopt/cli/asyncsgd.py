"""``mpiopt async-sgd``: SGD with heterogeneous workers, on the simulator or the MPI ranks.
"""
import argparse
import math

from .common import (add_checkpoint_options, add_options_flag, add_settings_flags, chosen_options, exit_status,
                     number, plot_problem, positive_int, settings_from, widths)


def _threshold(text):
    """Ringmaster's R: an integer (checked by the settings) or inf."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or inf, got {text!r}") from None


def _times(text):
    try:
        values = [float(value) for value in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(value) and value > 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated compute times > 0 such as 1,2.5,4, got {text!r}")
    return values


def _link(text):
    """Communication times per coordinate: a fixed compute-time model's name (sqrt, linear, ...) or times."""
    from ..core.registry import names
    if text in names("tau-model"):
        return text
    try:
        values = [float(value) for value in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(value) and value >= 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected a model name ({', '.join(names('tau-model'))}) or "
                                         f"comma-separated times >= 0 such as 0.1,0.2, got {text!r}")
    return values


# the problem options of the command line: option (the argparse dest) -> the problem's keyword
ASYNC_SGD_PROBLEM_OPTIONS = {"dim": "dim", "noise": "noise", "batch_size": "batch_size", "dataset": "dataset",
                             "hidden": "hidden"}


def add_parser(commands):
    from .. import asyncsgd as _asyncsgd  # noqa: F401 (registers the methods, problems and compute-time models)
    from .. import data as _data  # noqa: F401 (registers the data sets)
    from ..asyncsgd import AsyncSGDSettings
    from ..core.registry import names
    sgd = commands.add_parser(
        "async-sgd", help="SGD with heterogeneous workers: Minibatch, Asynchronous, Rennala and Ringmaster SGD",
        description="SGD with workers of different speeds, on a simulator (a virtual clock, thousands of "
                    "workers on one core) or on the MPI ranks (rank 0 serves, ranks 1.. compute). Prints the "
                    "measured time to epsilon beside the theory's prediction (constants dropped); --method all "
                    "compares every method on the same problem and workers. See docs/async_sgd.md.")
    times = sgd.add_mutually_exclusive_group()
    times.add_argument("--tau", choices=names("tau-model"), help=f"compute-time model (default {AsyncSGDSettings.tau})")
    times.add_argument("--taus", type=_times, metavar="T1,T2,...", help="fixed compute times, one per worker")
    add_options_flag(sgd, "tau-model", "tau")
    add_options_flag(sgd, "power-model", "power")
    add_options_flag(sgd, "asyncsgd-graph", "graph")
    add_options_flag(sgd, "asyncsgd-method")
    group = sgd.add_argument_group("problem")
    group.add_argument("--problem", default="quadratic", choices=names("asyncsgd-problem"),
                       help="(default %(default)s)")
    add_options_flag(group, "asyncsgd-problem")
    group.add_argument("--dim", type=positive_int, help="quadratic, worst-case: dimension (default 100)")
    group.add_argument("--noise", type=float, metavar="SIGMA2",
                       help="quadratic, worst-case: variance sigma^2 of a stochastic gradient (default 1e-3)")
    group.add_argument("--batch-size", type=positive_int, help="logistic, mlp: rows per stochastic gradient")
    group.add_argument("--dataset", choices=names("dataset"), help="logistic, mlp: the data set")
    group.add_argument("--hidden", type=widths, metavar="W1,W2,...", help="mlp: hidden layer widths")
    group = sgd.add_argument_group("method, stopping and time (generated from mpiopt.asyncsgd.AsyncSGDSettings)")
    shown = {
        "method": {"choices": names("asyncsgd-method") + ["all"], "default": AsyncSGDSettings.method,
                   "help": "the method, or all of them one after another (default %(default)s)"},
        "n_workers": {"flags": ["--workers"], "type": positive_int, "default": None, "metavar": "N",
                      "help": "simulator: virtual workers (default 8, or one per --taus); mpi: ranks - 1 (the "
                              "default)"},
        "threshold": {"type": _threshold, "default": None, "metavar": "R",
                      "help": "ringmaster: delay threshold, an integer or inf (default: the theory's)"},
        "batch": {"type": int, "default": None, "metavar": "B",
                  "help": "rennala: gradients per step (default: the theory's)"},
        "graph": {"choices": names("asyncsgd-graph"), "default": None,
                  "help": "fragile, amelie: the workers' graph (times per edge: --graph-opt rho=T, or --graph edges "
                          "--graph-opt path=FILE of lines 'i j rho')"},
        "upload": {"type": _link, "default": None, "metavar": "MODEL|T1,T2,..."},
        "download": {"type": _link, "default": None, "metavar": "MODEL|T1,T2,..."}}
    settings = add_settings_flags(group, AsyncSGDSettings, shown=shown)
    group = sgd.add_argument_group("output")
    add_checkpoint_options(group, "run's state (one --method)", "steps")
    group.add_argument("--output", default="mpiopt_async_sgd.json",
                       help="JSON result file; with --method all, every method's result (default %(default)s)")
    group.add_argument("--plot", metavar="FILE.png",
                       help="loss and ||grad f||^2 against time, every method in one figure (needs matplotlib)")
    sgd.set_defaults(run=run_async_sgd, parser=sgd, async_settings=settings)


def _async_sgd_checks(args, comm):
    """(problem options, n_workers, a problem with the options or None), the same on every rank."""
    from ..core.registry import options
    given = {keyword: getattr(args, option) for option, keyword in ASYNC_SGD_PROBLEM_OPTIONS.items()
             if getattr(args, option) is not None}
    n_workers = args.n_workers
    if args.runtime == "mpi":
        if comm.size < 2:
            return given, n_workers, "the mpi runtime needs at least 2 ranks (a server and a worker): run it " \
                                     "under mpiexec -n N with N >= 2, or use --runtime simulator"
        if n_workers is not None and n_workers != comm.size - 1:
            return given, n_workers, (f"--workers {n_workers}, but the mpi runtime at {comm.size} ranks has "
                                      f"{comm.size - 1} workers (ranks - 1); omit --workers")
    if args.taus is not None:
        workers = n_workers or (comm.size - 1 if args.runtime == "mpi" else len(args.taus))
        if len(args.taus) != workers:
            return given, n_workers, f"--taus gives {len(args.taus)} compute times for {workers} workers"
        if args.runtime == "simulator":
            n_workers = workers
    accepted = options("asyncsgd-problem", args.problem)
    refused = [option for option, keyword in ASYNC_SGD_PROBLEM_OPTIONS.items()
               if keyword in given and keyword not in accepted]
    if refused:
        return given, n_workers, (f"problem {args.problem} takes no "
                                  f"{', '.join('--' + option.replace('_', '-') for option in refused)}")
    chosen, problem = chosen_options(args, "asyncsgd-problem", args.problem)
    if not problem and args.method_opt and args.method == "all":
        problem = "--method-opt sets the options of one method: give --method NAME"
    if not problem and args.checkpoint and args.method == "all":
        problem = "--checkpoint holds one method's run: give --method NAME"
    return {**given, **chosen}, n_workers, problem


def run_async_sgd(args, comm):
    from ..asyncsgd import AsyncSGDSettings, async_sgd, available_methods, get_problem
    from ..core.comm import check_collectively
    from ..core.io import check_writable, write_json
    check_writable(args.output, comm)
    check_writable(args.plot, comm, what="plot")
    check_writable(args.checkpoint, comm, what="checkpoint")
    options, n_workers, problem = _async_sgd_checks(args, comm)
    check_collectively(comm, problem or plot_problem(args.plot, comm))
    # all: in registration order, but those that cannot run with these settings (shadowheart: no upload)
    names = available_methods(AsyncSGDSettings(upload=args.upload, graph=args.graph),
                              args.problem) if args.method == "all" else [args.method]
    tau = args.taus if args.taus is not None else args.tau
    common = dict(settings_from(args, args.async_settings, AsyncSGDSettings), n_workers=n_workers,
                  checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every)
    common.pop("method", None)
    if tau is not None:
        common["tau"] = tau
    for name in names:  # every method's settings are checked before any work
        AsyncSGDSettings.collective(comm, method=name, **common)
    error = built = None
    try:  # built once: every method runs on the same problem
        built = get_problem(args.problem, seed=args.seed, comm=comm, **options)
    except (ValueError, TypeError, KeyError, ImportError) as failure:
        error = f"cannot set up the problem: {failure}"
    check_collectively(comm, error)
    method_options, problem = ({}, None) if args.method == "all" else chosen_options(args, "asyncsgd-method",
                                                                                     args.method)
    tau_options, tau_problem = _model_options(args, "tau-model", "tau")
    power_options, power_problem = _model_options(args, "power-model", "power")
    graph_options, graph_problem = _model_options(args, "asyncsgd-graph", "graph")
    check_collectively(comm, problem or tau_problem or power_problem or graph_problem)
    if power_options:
        common["power_options"] = power_options
    if graph_options:
        common["graph_options"] = graph_options
    if method_options:
        common["method_options"] = method_options
    if tau_options:
        common["tau_options"] = tau_options
    results = {name: async_sgd(built, comm=comm, method=name, **common) for name in names}
    if comm.rank == 0:
        source = {"problem": args.problem, "problem_options": options, "ranks": comm.size}
        if args.method == "all":
            payload = {"methods": names, "comparison": _async_sgd_comparison(results),
                       "results": {name: result.to_dict() for name, result in results.items()}, "source": source}
        else:
            payload = dict(results[args.method].to_dict(), source=source)
        write_json(args.output, payload)
        if args.plot:
            _async_sgd_plot(results, args.plot)
        print("\n".join(_async_sgd_table(results, compare=args.method == "all")))
        print(f"result written to {args.output}" + (f"; plot written to {args.plot}" if args.plot else ""),
              flush=True)
    return max(exit_status(result) for result in results.values())


def _model_options(args, kind, flag):
    """(the ``--FLAG-opt`` values of the model chosen by ``--FLAG``, a problem or None): options without a
    model chosen by name are refused."""
    name = getattr(args, flag)
    if name is None:
        return {}, f"--{flag}-opt goes with --{flag} NAME" if getattr(args, f"{flag}_opt") else None
    return chosen_options(args, kind, name, flag)


def _reference(results):
    """The name of the method that the comparison's ratios divide by (the first run that declares itself the
    ``reference``), or None."""
    from ..core.registry import lookup
    return next((name for name in results if lookup("asyncsgd-method", name).reference), None)


def _async_sgd_comparison(results):
    """Per method: the measured and predicted times to epsilon and, beside the reference method's, their
    ratios."""
    reference = _reference(results)
    comparison = {}
    for name, result in results.items():
        measured, predicted = result.time_to_epsilon, result.predicted.get(name)
        row = {"status": result.status, "stop": result.info["stop"], "measured": measured, "predicted": predicted}
        if reference is not None:
            base, base_predicted = results[reference].time_to_epsilon, results[reference].predicted.get(reference)
            row[f"measured/{reference}"] = measured / base if measured is not None and base else None
            row[f"predicted/{reference}"] = predicted / base_predicted if predicted is not None and base_predicted \
                else None
        comparison[name] = row
    return comparison


def _async_sgd_table(results, compare=False):
    """The lines of the summary: what was run, then one row per method (its status, and last the rule that
    ended its run)."""
    first = next(iter(results.values()))
    info, problem = first.info, first.info["problem"]
    predicted = first.predicted
    lines = [f"async-sgd: {problem['name']}, d = {problem['dim']}, L = {problem['L']:.4g}, "
             f"sigma^2 = {problem['sigma2']:.4g}, epsilon = {info['epsilon']:.4g}",
             f"workers: {info['n_workers']} ({info['runtime']} runtime), compute times {info['tau']}, "
             f"m* = {predicted.get('m_star')}; times in compute-time units, predicted with constants dropped"]
    header = ["method", "status", "steps", "gradients", "discarded", "cancelled", "time to eps", "predicted"]
    reference = _reference(results)
    ratios = [f"measured/{reference}", f"predicted/{reference}"]
    if compare:
        header += ratios
    header.append("stop")
    comparison = _async_sgd_comparison(results)
    rows = []
    for name, result in results.items():
        workers = result.info["workers"]
        row = [name, result.status, str(result.steps), str(result.gradients), str(sum(workers["discarded"])),
               str(sum(workers["cancelled"])), number(result.time_to_epsilon, ".6g", "not reached"),
               number(result.predicted.get(name), ".4g")]
        if compare:
            row += [number(comparison[name].get(ratio), ".3f") for ratio in ratios]
        rows.append(row + [result.info["stop"]])
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]

    def line(cells):
        return "  ".join(cell.ljust(width) if i < 2 or i == len(header) - 1 else cell.rjust(width)
                         for i, (cell, width) in enumerate(zip(cells, widths))).rstrip()
    rule = "-" * len(line(header))
    return lines + [rule, line(header), rule] + [line(row) for row in rows] + [rule]


def _async_sgd_plot(results, path):
    """||grad f||^2 and f - f_low against time, one curve per method (one method: the result's own plot)."""
    from ..asyncsgd.result import curve_panels
    from ..core.result import plot_panels
    first = next(iter(results.values()))
    if len(results) == 1:
        first.plot(path)
        return
    info = first.info
    plot_panels(path, curve_panels(results), title=f"{info['problem']['name']}, {info['n_workers']} workers, "
                                                    f"compute times {info['tau']} ({info['runtime']})")
