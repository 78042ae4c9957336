"""The front door of heterogeneous-worker SGD: :func:`async_sgd` sets a run up on every rank and hands it to a
runtime (the simulator on rank 0, or the MPI ranks: :mod:`.mpi`).

Set-up is collective: the settings are checked on every rank, the problem, the compute-time model and the
workers' timing (:class:`.timing.Timing`: compute, upload and download times, power, graph) are built, and
any rank's problem is every rank's error.  The method is built by the runtime from its declared options
(:mod:`.runner`).
"""
import time as clock

import numpy as np
from mpi4py import MPI

from ..core.comm import CollectiveError, check_collectively, quiet_barrier, resolve_comm
from .checkpoint import Checkpoint
from .graphs import get_graph, graph_workers
from .power import get_power_model
from .problems import get_problem
from .runner import make_result, prepare
from .settings import AsyncSGDSettings, route_method_options
from .simulator import simulate
from .taus import FixedTaus, get_tau_model
from .timing import LinkTimes, Timing

DEFAULT_SIMULATED_WORKERS = 8


def async_sgd(problem="quadratic", comm=None, problem_options=None, method_options=None, tau_options=None,
              log_stream=None, **settings):
    """Run a heterogeneous-worker SGD method; collective over ``comm``; returns an :class:`.result.AsyncSGDResult`.

    ``problem``: a registered name (built with ``problem_options``, checked
    against the problem's declared options) or a :class:`.problems.Problem`.
    ``method_options``: the chosen method's declared options
    (``registry.options("asyncsgd-method", method)``), e.g. ``{"batch": 8}``
    for Rennala; ``tau_options``: the compute-time model's (``tau`` a name).
    ``settings``: the fields of :class:`.settings.AsyncSGDSettings` (method, runtime,
    n_workers, tau, epsilon, step_size, limits, seed, ...); a keyword that
    the chosen method declares is one of its options (``batch=8``, a user
    method's ``max_delay=3``).  ``log_stream``: where the rank running the
    method writes its log (None: stdout; ``verbose=False``: no log).
    ``checkpoint``/``checkpoint_every``: the run resumes from the file (the
    simulator bit for bit) and writes it every K steps, on SIGUSR1/SIGTERM
    and at the end (:mod:`.checkpoint`).  Every rank gets the same result:
    ``status`` converged, finished, time_limit or interrupted, the rule that
    ended the run in ``info["stop"]``.
    """
    comm = resolve_comm(comm)
    started = clock.perf_counter()
    settings, routing_problem = route_method_options(settings, method_options)
    options = AsyncSGDSettings.collective(comm, routing_problem, tau_options=tau_options, **settings)
    problem_error = timing = None
    try:
        problem = get_problem(problem, seed=options.seed, comm=comm, **(problem_options or {}))
        compute = get_tau_model(options.tau, **(options.tau_options or {}))
        problem_error = problem.data_problem()  # NaN or inf in this rank's data: refused on every rank
    except (ValueError, TypeError, KeyError, ImportError) as error:
        problem_error = f"cannot set up the problem: {error}"
    n_workers = options.n_workers
    if problem_error is None and n_workers is None:
        try:
            n_workers, problem_error = given_workers(options, compute)
        except (ValueError, TypeError, KeyError, OSError) as error:
            problem_error = f"cannot set up the workers' times: {error}"
    if problem_error is None and options.runtime == "mpi":
        workers = comm.size - 1
        if workers < 1:
            problem_error = "the mpi runtime needs at least 2 ranks (a server and a worker)"
        elif options.n_workers not in (None, workers):
            problem_error = f"n_workers={options.n_workers} but there are {workers} worker ranks (ranks - 1)"
        elif n_workers not in (None, workers):
            problem_error = f"the times given are for {n_workers} workers but there are {workers} worker ranks " \
                            "(ranks - 1)"
    if problem_error is None:
        try:
            timing = make_timing(options, compute, comm.size - 1 if options.runtime == "mpi" else
                                 n_workers or DEFAULT_SIMULATED_WORKERS, problem.dim)
        except (ValueError, TypeError, KeyError, OSError) as error:
            problem_error = f"cannot set up the workers' times: {error}"
    if problem_error is None and problem.heterogeneous and problem.n_functions != timing.n_workers:
        problem_error = (f"problem {problem.name} has {problem.n_functions} functions f_i, one per worker, but the "
                         f"run has {timing.n_workers} workers")
    check_collectively(comm, problem_error)
    if options.runtime == "mpi":
        from .mpi import run_mpi
        return run_mpi(problem, timing, options, comm, started, log_stream)
    return _simulate_on_root(problem, timing, options, comm, started, log_stream)


def given_workers(options, compute):
    """(the worker count that the settings' own per-worker data give, or None; a message when two of them
    disagree, else None): explicit compute, upload or download times, a power trace's columns, an edge
    list's workers.  Where ``n_workers`` is not given this count is the run's, on either runtime."""
    counts = {}
    if isinstance(compute, FixedTaus):
        counts["tau"] = compute.values.size
    for name in ("upload", "download"):
        value = getattr(options, name)
        if value is not None and not isinstance(value, str):
            model = LinkTimes(value, setting=name).model  # a bad time is refused here in the setting's name
            if isinstance(model, FixedTaus):
                counts[name] = model.values.size
    if options.power is not None:
        traced = get_power_model(options.power, **(options.power_options or {})).n_workers
        if traced is not None:
            counts["power"] = traced
    if options.graph is not None:
        listed = graph_workers(options.graph, **(options.graph_options or {}))
        if listed is not None:
            counts["graph"] = listed
    if len(set(counts.values())) > 1:
        return None, "the settings give different worker counts: " + ", ".join(
            f"{name} {count}" for name, count in counts.items()) + " (give n_workers, or matching times)"
    return next(iter(counts.values()), None), None


def make_timing(options, compute, n_workers, dim):
    """The workers' :class:`.timing.Timing` from the settings: ``compute`` (a compute-time model), upload and
    download times."""
    compute.mean(np.arange(1, n_workers + 1))  # explicit times for fewer workers are refused here
    links = {name: None if getattr(options, name) is None else
             LinkTimes(getattr(options, name), getattr(options, name + "_scale"), setting=name)
             for name in ("upload", "download")}
    power = None if options.power is None else get_power_model(options.power, **(options.power_options or {}))
    graph = None if options.graph is None else get_graph(options.graph, n_workers, **(options.graph_options or {}))
    return Timing(compute, n_workers, dim, power=power, graph=graph, **links)


def _simulate_on_root(problem, timing, options, comm, started, log_stream=None, root=0):
    n_workers = timing.n_workers
    result = error = None
    if comm.rank == root:
        try:
            method, recorder, predicted = prepare(problem, timing, options, log_stream)
            checkpoint = None if options.checkpoint is None else Checkpoint(
                options, MPI.COMM_SELF, problem, method, timing, n_workers, recorder.epsilon)
            recorder.banner("simulator", n_workers, timing, predicted)
            try:
                end, gradients, computed, cancelled = simulate(problem, method, timing, options, recorder,
                                                               checkpoint)
            finally:
                if checkpoint is not None:
                    checkpoint.close()
            extra = None if checkpoint is None else {"resumed_at": checkpoint.resumed_at}
            result = make_result(recorder, "simulator", timing, options, predicted, end, gradients,
                                 computed, cancelled, started, extra)
            recorder.footer(result)
        except CollectiveError as failure:  # a checkpoint that cannot be written or read: its own words
            error = "; ".join(failure.problems.values())
        except Exception as failure:  # noqa: BLE001 - the other ranks wait for rank 0: they must hear of it
            error = f"simulation failed: {type(failure).__name__}: {failure}"
    quiet_barrier(comm)  # the other ranks sleep while rank 0 simulates
    check_collectively(comm, error)
    return comm.bcast(result, root=root) if comm.size > 1 else result
