"""Declared options of the asynchronous methods, problems, compute-time models and Slurm workloads.

Every built-in piece of these kinds declares its options (``registry.options(kind, name)``), ``async_sgd``
routes ``method_options``, ``tau_options`` and ``problem_options`` (and the flattened keywords) through the
declarations, a bad value is one line on every rank, and a user's own method and compute-time model, each
with a declared option, run by name against references written here from their definitions.
"""
import heapq
import inspect
import math

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.asyncsgd import Method, async_sgd
from mpiopt.asyncsgd.problems import Quadratic, SmallMLP, WorstCase, Logistic
from mpiopt.asyncsgd.taus import TauModel
from mpiopt.core import registry
from mpiopt.core.comm import CollectiveError
from mpiopt.core.options import Option, Options
from mpiopt.core.random import random_stream
from mpiopt.slurm import render_script

SELF = MPI.COMM_SELF
KINDS = ("asyncsgd-method", "asyncsgd-problem", "tau-model", "workload", "power-model", "asyncsgd-graph")


# -- the declarations of the built-in pieces -----------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_every_built_in_piece_declares_options_with_help_and_a_valid_default(kind):
    names = registry.names(kind)
    assert names, kind
    for name in names:
        declared = registry.options(kind, name)
        assert isinstance(declared, Options), (kind, name)
        for option_name, option in declared.items():
            assert option.help, (kind, name, option_name)
            assert not option.required and option.problem(option.default) is None, (kind, name, option_name)
        assert registry.options_problem(kind, name, declared.defaults()) is None


def test_the_declarations_name_what_each_piece_takes():
    assert list(registry.options("asyncsgd-method", "rennala")) == ["batch", "restart"]
    assert list(registry.options("asyncsgd-method", "ringmaster")) == ["threshold", "stop_computations"]
    assert list(registry.options("asyncsgd-method", "asgd")) == ["delay_adaptive", "compressor", "coordinates"]
    assert list(registry.options("asyncsgd-method", "minibatch")) == ["compressor", "coordinates"]
    assert list(registry.options("asyncsgd-method", "shadowheart")) == ["coordinates"]
    assert list(registry.options("asyncsgd-method", "mindflayer")) == ["quantile", "batch"]
    assert list(registry.options("asyncsgd-method", "malenia")) == ["batch"]
    assert list(registry.options("asyncsgd-problem", "quadratic")) == ["dim", "noise", "L", "mu"]
    assert list(registry.options("asyncsgd-problem", "mlp")) == ["dataset", "batch_size", "alpha", "hidden"]
    assert list(registry.options("tau-model", "lognormal")) == ["sigma"]
    assert "checkpoint" in registry.options("workload", "solve")
    assert "checkpoint" not in registry.options("workload", "lasso")
    assert {"ntasks", "time", "launcher"} <= set(registry.options("workload", "async-sgd"))


@pytest.mark.parametrize("kind, name, cls", [("asyncsgd-problem", "quadratic", Quadratic),
                                             ("asyncsgd-problem", "worst-case", WorstCase),
                                             ("asyncsgd-problem", "logistic", Logistic),
                                             ("asyncsgd-problem", "mlp", SmallMLP)])
def test_a_problem_class_takes_the_defaults_of_its_declaration(kind, name, cls):
    parameters = inspect.signature(cls).parameters
    for option_name, option in registry.options(kind, name).items():
        assert parameters[option_name].default == option.default, option_name


def test_the_settings_of_the_built_in_methods_take_their_defaults_from_the_declarations():
    from mpiopt.asyncsgd import AsyncSGDSettings
    defaults = AsyncSGDSettings()
    for method in ("rennala", "ringmaster", "asgd"):
        for name, option in registry.options("asyncsgd-method", method).items():
            assert getattr(defaults, name) == option.default, (method, name)


# -- the front end routes the options by the declarations --------------------------------------------------
COMMON = dict(comm=SELF, problem_options={"dim": 4}, n_workers=4, tau="sqrt", max_steps=30, stop_at_epsilon=False)


@pytest.mark.parametrize("method, options", [("rennala", {"batch": 3, "restart": False}),
                                             ("ringmaster", {"threshold": 2, "stop_computations": True}),
                                             ("ringmaster", {"threshold": math.inf}),
                                             ("asgd", {"delay_adaptive": False})])
def test_method_options_and_the_flattened_keywords_give_the_same_run(method, options):
    flattened = async_sgd(method=method, **COMMON, **options)
    declared = async_sgd(method=method, method_options=options, **COMMON)
    assert np.array_equal(flattened.x, declared.x) and flattened.history == declared.history
    for name, value in options.items():
        shown = "inf" if value == math.inf else value
        assert declared.info["parameters"][name] == shown
        assert declared.info["settings"][name] == shown  # the setting of the same name shows it too
        assert declared.info["settings"]["method_options"][name] == shown


def test_a_method_owns_its_defaults():
    """Rennala's B and Ringmaster's R default to the theory's max(1, ceil(sigma^2/epsilon))."""
    problem = Quadratic(dim=4, noise=0.5)
    for method, name in (("rennala", "batch"), ("ringmaster", "threshold")):
        result = async_sgd(problem, method=method, epsilon=0.1, **{k: v for k, v in COMMON.items()
                                                                     if k != "problem_options"})
        assert result.info["parameters"][name] == math.ceil(0.5 / 0.1)
    assert async_sgd(method="asgd", **COMMON).info["parameters"]["delay_adaptive"] is True


@pytest.mark.parametrize("arguments, message", [
    (dict(method="rennala", method_options={"batch": 0}), "batch must be None or an integer >= 1, got 0"),
    (dict(method="rennala", method_options={"bach": 3}), "asyncsgd-method 'rennala' takes batch, restart; got bach"),
    (dict(method="rennala", method_options={"restart": "yes"}), "restart must be True or False, got 'yes'"),
    (dict(method="ringmaster", method_options={"threshold": 1.5}),
     "threshold must be None, an integer >= 1 or inf, got 1.5"),
    (dict(method="rennala", batch=2, method_options={"batch": 3}),
     "batch is given twice: batch=2 and method_options['batch']=3"),
    (dict(method="minibatch", method_options={"batch": 3}), "asyncsgd-method 'minibatch' takes compressor, coordinates; got batch"),
    (dict(method_options=[1]), "method_options must be a dict or None, got [1]"),
    (dict(tau="lognormal", tau_options={"sigma": -1.0}), "tau-model 'lognormal': sigma must be a float >= 0, got -1.0"),
    (dict(tau="sqrt", tau_options={"sigma": 1.0}), "tau-model 'sqrt' takes no options; got sigma"),
    (dict(tau=[1.0, 2.0], tau_options={"sigma": 1.0}), "tau_options are for a compute-time model given by name"),
    (dict(problem_options={"dim": 0}),
     "cannot set up the problem: asyncsgd-problem 'quadratic': dim must be an int >= 1, got 0"),
    (dict(problem_options={"dimension": 3}), "asyncsgd-problem 'quadratic' takes dim, noise, L, mu; got dimension"),
    (dict(max_delay=2), "unknown async-sgd setting(s) 'max_delay'"),  # not a setting, nor rennala's option
])
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_bad_option_is_one_line_on_every_rank(comm, arguments, message):
    arguments = dict({"problem_options": {"dim": 3}, "max_steps": 2}, **arguments)
    with pytest.raises(CollectiveError) as raised:
        async_sgd(comm=comm, **arguments)
    assert sorted(raised.value.problems) == list(range(comm.size))
    for text in raised.value.problems.values():
        assert message in text and "\n" not in text, text


# -- a user's method with its own declared option ---------------------------------------------------------
class BoundedDelaySGD(Method):
    """Asynchronous SGD that applies a gradient only when its delay is at most ``max_delay`` (else discards it);
    the arriving worker restarts at the current point either way."""

    name = "bounded-delay"
    options = Options(Option("max_delay", int, 2, "the largest delay of a gradient that is applied", low=0))

    def __init__(self, x0, n_workers, step_size, max_delay):
        super().__init__(x0, n_workers, step_size)
        self.max_delay = max_delay

    def parameters(self):
        return {"step_size": self.step_size, "max_delay": self.max_delay}

    def arrive(self, worker, grad, k_at):
        if self.k - k_at <= self.max_delay:
            self.accepted[worker] += 1
            self._step(grad, self.step_size)
        else:
            self.discarded[worker] += 1
        return [worker]


@pytest.fixture
def bounded_delay():
    registry.register("asyncsgd-method", "bounded-delay", BoundedDelaySGD)
    yield "bounded-delay"
    registry.unregister("asyncsgd-method", "bounded-delay")


def reference_bounded_delay(taus, max_delay, gamma, steps, dim, noise, seed):
    """The method's definition as an event loop: worker i finishes every taus[i] units and computes at the
    point it started from; ties go to the lower worker; a gradient of delay <= max_delay is applied."""
    eigenvalues, scale = np.geomspace(1e-3, 1.0, dim), math.sqrt(noise / dim)
    streams = [random_stream(seed, "asyncsgd-gradient", w) for w in range(len(taus))]
    x, k = np.ones(dim), 0
    started = {w: (x, 0) for w in range(len(taus))}
    events = [(tau, w) for w, tau in enumerate(taus)]
    heapq.heapify(events)
    accepted, discarded = [0] * len(taus), [0] * len(taus)
    while k < steps:
        now, w = heapq.heappop(events)
        point, k_at = started[w]
        grad = eigenvalues * point + scale * streams[w].standard_normal(dim)
        if k - k_at <= max_delay:
            x, k = x - gamma * grad, k + 1
            accepted[w] += 1
        else:
            discarded[w] += 1
        started[w] = (x, k)
        heapq.heappush(events, (now + taus[w], w))
    return x, accepted, discarded


USER_RUN = dict(problem_options={"dim": 5, "noise": 0.3}, n_workers=4, tau=[1.0, 1.5, 4.0, 6.5], step_size=0.2,
                max_steps=60, stop_at_epsilon=False, seed=5)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("max_delay", [0, 3, 10**6])
def test_a_users_method_with_a_declared_option_runs_by_name_and_matches_its_definition(comm, bounded_delay,
                                                                                      max_delay):
    flattened = async_sgd(comm=comm, method=bounded_delay, max_delay=max_delay, **USER_RUN)
    declared = async_sgd(comm=comm, method=bounded_delay, method_options={"max_delay": max_delay}, **USER_RUN)
    x, accepted, discarded = reference_bounded_delay(USER_RUN["tau"], max_delay, 0.2, 60, 5, 0.3, 5)
    for result in (flattened, declared):
        assert np.array_equal(result.x, x) and result.steps == 60
        assert result.info["workers"]["accepted"] == accepted and result.info["workers"]["discarded"] == discarded
        assert result.info["parameters"] == {"step_size": 0.2, "max_delay": max_delay}
    assert (sum(discarded) == 0) == (max_delay == 10**6)  # the option matters here


def test_a_users_method_takes_its_declared_default_and_its_declared_checks(bounded_delay):
    default = async_sgd(comm=SELF, method=bounded_delay, **USER_RUN)
    x, _, _ = reference_bounded_delay(USER_RUN["tau"], 2, 0.2, 60, 5, 0.3, 5)
    assert np.array_equal(default.x, x) and default.info["parameters"]["max_delay"] == 2
    with pytest.raises(CollectiveError, match=r"asyncsgd-method 'bounded-delay': max_delay must be an int >= 0, "
                                              r"got -1"):
        async_sgd(comm=SELF, method=bounded_delay, max_delay=-1, **USER_RUN)
    assert "max_delay (int >= 0, default 2)" in registry.options("asyncsgd-method", bounded_delay).help_lines()[0]


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_users_method_runs_by_name_on_the_mpi_runtime(comm, bounded_delay):
    """One worker rank: every gradient is computed at the current point, the run is deterministic."""
    if comm.size != 2:
        pytest.skip("one server and one worker: two ranks")
    result = async_sgd(comm=comm, method=bounded_delay, runtime="mpi", max_delay=0, tau="constant",
                       time_unit=1e-4, problem_options={"dim": 5, "noise": 0.3}, step_size=0.2, max_steps=25,
                       stop_at_epsilon=False, seed=5)
    x, accepted, discarded = reference_bounded_delay([1.0], 0, 0.2, 25, 5, 0.3, 5)
    assert np.array_equal(result.x, x) and result.info["runtime"] == "mpi"
    assert result.info["workers"]["accepted"] == accepted == [25] and discarded == [0]


# -- a user's compute-time model with a declared option; the built-in's option --------------------------------
class Scaled(TauModel):
    """Worker i takes scale * i units (fixed)."""

    name = "scaled"

    def __init__(self, scale):
        self.scale = scale

    def mean(self, workers):
        return self.scale * np.asarray(workers, dtype=np.float64)


def test_a_users_compute_time_model_takes_its_declared_option_by_name():
    registry.register("tau-model", "scaled", Scaled,
                      options=Options(Option("scale", float, 1.0, "units per worker number", low=0, low_open=True)))
    try:
        common = dict(comm=SELF, method="asgd", n_workers=3, max_steps=20, stop_at_epsilon=False, step_size=0.1,
                      problem_options={"dim": 3})
        named = async_sgd(tau="scaled", tau_options={"scale": 2.5}, **common)
        explicit = async_sgd(tau=[2.5, 5.0, 7.5], **common)
        assert np.array_equal(named.x, explicit.x) and named.time == explicit.time
        with pytest.raises(CollectiveError, match="tau-model 'scaled': scale must be a float > 0, got 0"):
            async_sgd(tau="scaled", tau_options={"scale": 0}, **common)
    finally:
        registry.unregister("tau-model", "scaled")


def test_the_lognormal_spread_is_an_option_whose_default_is_todays():
    common = dict(method="asgd", tau="lognormal", max_steps=20, **{k: v for k, v in COMMON.items()
                                                                     if k not in ("tau", "max_steps")})
    today = async_sgd(**common)
    same = async_sgd(tau_options={"sigma": 0.5}, **common)
    wider = async_sgd(tau_options={"sigma": 1.0}, **common)
    assert np.array_equal(today.x, same.x) and today.time == same.time and today.info["tau"] == "lognormal"
    assert wider.time != today.time and wider.info["tau"] == "lognormal(sigma=1)"


# -- the Slurm workloads ----------------------------------------------------------------------------------------
def test_a_workloads_batch_script_options_are_checked_by_its_declaration():
    with pytest.raises(ValueError, match="workload 'solve': ntasks must be an int >= 1, got 0"):
        render_script("solve", [], ntasks=0)
    with pytest.raises(ValueError, match="workload 'lasso' takes .*; got checkpoint"):
        render_script("lasso", [], checkpoint=False)
    with pytest.raises(ValueError, match="workload 'solve': launcher must be one of srun, mpiexec, got 'ssh'"):
        render_script("solve", [], launcher="ssh")
    defaults = registry.options("workload", "solve").defaults()
    assert render_script("solve", ["--quiet"]) == render_script("solve", ["--quiet"], **defaults)
    assert '--checkpoint "$CHECKPOINT"' not in render_script("solve", [], checkpoint=False)


def test_a_users_workload_takes_the_declared_batch_script_options():
    from mpiopt.slurm.render import Workload
    registry.register("workload", "my-script", Workload(["my_script.py"], resumes=True))
    try:
        assert registry.options("workload", "my-script") == registry.options("workload", "solve")
        text = render_script("my-script", ["--steps", "5"], ntasks=3)
        assert "#SBATCH --ntasks=3" in text and 'my_script.py --steps 5 --checkpoint "$CHECKPOINT"' in text
    finally:
        registry.unregister("workload", "my-script")


# -- the docs' tables are the declarations ------------------------------------------------------------------------
def test_the_docs_tables_are_generated_from_the_declarations():
    from pathlib import Path

    from mpiopt.slurm.render import RESUMING_OPTIONS
    docs = Path(__file__).resolve().parent.parent / "docs"
    async_sgd_page, cluster_page = (docs / "async_sgd.md").read_text(), (docs / "cluster.md").read_text()
    for kind in (*KINDS[:3], *KINDS[4:]):  # the workloads are in docs/cluster.md
        for name in registry.names(kind):
            cells = "; ".join(f"`{option_name}` ({option.constraint()}, default {option.default!r}): {option.help}"
                              for option_name, option in registry.options(kind, name).items()) or "none"
            assert f"| {kind} | `{name}` | {cells} |" in async_sgd_page, (kind, name)
    for name, option in RESUMING_OPTIONS.items():
        assert f"| `{name}` | {option.constraint()} | `{option.default!r}` | {option.help} |" in cluster_page, name
