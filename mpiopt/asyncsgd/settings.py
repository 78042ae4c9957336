"""Settings of a heterogeneous-worker SGD run, validated once on every rank (mpiopt.core.settings).

The run's defaults live here; a method's own options are declared by the
method (``Method.options``) and given in ``method_options``, a compute-time
model's in ``tau_options``, and both are checked against those declarations
with the other settings, collectively.  The built-in methods' options are
also settings of their own (``batch``, ``threshold``, ``stop_computations``,
``delay_adaptive``, ``restart``: the flattened keywords of ``async_sgd`` and
the command line), whose defaults are read from the methods' declarations.
``None`` for ``step_size``, ``batch`` and ``threshold`` means the theory's
value (:mod:`.theory`).
"""
import dataclasses
import math

from ..core.registry import lookup, names, options_problem
from ..core.settings import Settings, is_integer, is_number
from . import methods as _methods  # noqa: F401  (registers the built-in methods, whose options some settings are)
from .uploads import COMPRESSORS

RUNTIMES = ("simulator", "mpi")


def _positive_or_none(value):
    return value is None or (is_number(value) and value > 0)


def _declared(name):
    """The default that the registered methods declaring an option ``name`` give it (one value for all)."""
    declared = [lookup("asyncsgd-method", method).options for method in names("asyncsgd-method")]
    defaults = {repr(options[name].default): options[name].default for options in declared if name in options}
    if len(defaults) != 1:
        raise ValueError(f"the methods' option {name!r} has {len(defaults)} defaults ({', '.join(defaults)}): a "
                         "setting of that name needs one")
    return next(iter(defaults.values()))


@dataclasses.dataclass(frozen=True)
class AsyncSGDSettings(Settings):
    label = "async-sgd"
    choices = {"runtime": RUNTIMES, "compressor": lambda: [c for c in COMPRESSORS if c],
               "power": lambda: names("power-model")}

    method: str = "rennala"        # minibatch, asgd, rennala or ringmaster (registry kind "asyncsgd-method")
    runtime: str = "simulator"     # "simulator" (virtual clock) or "mpi" (rank 0 serves, ranks 1.. work)
    n_workers: int = None          # simulator: virtual workers; mpi: must be ranks - 1 (None: what explicit
                                   # per-worker times, a trace or an edge list give, else 8 / ranks - 1)
    tau: object = "sqrt"           # compute-time model name (registry kind "tau-model"), a TauModel, or times
    epsilon: float = None          # target for ||grad f(x)||^2 (None: 1e-2 ||grad f(x0)||^2)
    step_size: float = None        # gamma (None: the theory's, from L, sigma^2, epsilon and n)
    method_options: dict = None    # the method's declared options by name, e.g. {"batch": 8} (None: its defaults)
    tau_options: dict = None       # the compute-time model's declared options, e.g. {"sigma": 1.0} (tau a name)
    upload: object = None          # upload time per coordinate: a fixed tau-model name or times (None: free)
    upload_scale: float = 1.0      # the upload times are multiplied by this (sqrt(i) / d^beta: "sqrt", d**-beta)
    download: object = None        # download time per coordinate, as upload (None: free)
    download_scale: float = 1.0    # the download times are multiplied by this
    power: str = None              # computation power in time (registry kind power-model: outages, trend, trace)
    power_options: dict = None     # the power model's declared options, e.g. {"period": 50, "fraction": 0.5}
    graph: str = None              # fragile, amelie: the workers' graph (registry kind asyncsgd-graph: mesh, ...)
    graph_options: dict = None     # the graph's declared options, e.g. {"rho": 10} or {"path": "edges.txt"}
    batch: int = _declared("batch")  # Rennala's B (None: max(1, ceil(sigma^2/epsilon)))
    threshold: float = _declared("threshold")  # Ringmaster's R (None: the theory's; inf allowed)
    stop_computations: bool = _declared("stop_computations")  # Ringmaster: stop at delay R
    delay_adaptive: bool = _declared("delay_adaptive")  # ASGD: gamma_k = min(gamma, 1/(2L delay_k))
    restart: bool = _declared("restart")  # Rennala: after a step every worker restarts at the new point
    compressor: str = None         # minibatch, asgd: upload compressed (randomk, qsgd8, qsgd4; None: dense)
    coordinates: int = None        # shadowheart, and randomk uploads: K coordinates a message (None: max(1, d // 100))
    quantile: float = None         # mindflayer: an attempt's budget is this quantile of the compute time (None: best)
    max_steps: int = None          # stop after this many steps (None: no cap)
    max_gradients: int = 10000000  # stop after this many gradients have arrived at the server (None: no cap)
    max_time: float = None         # stop at this time, in compute-time units (None: no cap)
    stop_at_epsilon: bool = True   # stop at the first evaluation with ||grad f||^2 <= epsilon
    eval_every: int = 1            # steps between evaluations of f and ||grad f||^2 (the history's rows)
    seed: int = 0                  # gradient noise (one stream per worker) and random compute times
    time_unit: float = 0.01        # mpi: seconds per compute-time unit (a worker sleeps tau * time_unit)
    idle_timeout: float = 60.0     # mpi: the server gives up after this many seconds without a message
    trace: bool = False            # keep every arrival [time, worker, step computed at, accepted] in info["trace"]
    verbose: bool = False          # the log on rank 0
    log_every: int = 100           # with verbose, a log row every this many evaluations
    checkpoint: str = None         # npz path, written as below and resumed from when it exists
    checkpoint_every: int = 0      # steps between checkpoints (0: at the end and on SIGUSR1/SIGTERM only)

    def checks(self):
        number, integer = is_number, is_integer
        threshold = self.threshold
        return [
            (self.method in names("asyncsgd-method"),
             lambda: f"method must be one of {', '.join(names('asyncsgd-method'))}, got {self.method!r}"),
            (self.runtime in RUNTIMES, f"runtime must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}"),
            (self.n_workers is None or (integer(self.n_workers) and self.n_workers >= 1),
             f"n_workers must be None or an integer >= 1, got {self.n_workers!r}"),
            (not isinstance(self.tau, str) or self.tau in names("tau-model"),
             lambda: f"tau must be one of {', '.join(names('tau-model'))}, a TauModel or times, got {self.tau!r}"),
            (not (isinstance(self.tau, str) and self.tau == "real" and self.runtime == "simulator"),
             "tau 'real' (real computing time) needs the mpi runtime"),
            *[(getattr(self, name) is None or isinstance(getattr(self, name), str) and getattr(self, name) in
               names("tau-model") or not isinstance(getattr(self, name), str),
               lambda name=name: f"{name} must be None, one of {', '.join(names('tau-model'))} or times per "
                                 f"worker, got {getattr(self, name)!r}") for name in ("upload", "download")],
            *[(number(getattr(self, name)) and 0 < getattr(self, name) < math.inf,
               f"{name} must be a finite number > 0, got {getattr(self, name)!r}")
              for name in ("upload_scale", "download_scale")],
            (self.power is None or self.power in names("power-model"),
             lambda: f"power must be None or one of {', '.join(names('power-model'))}, got {self.power!r}"),
            (self.power_options is None or (isinstance(self.power_options, dict) and self.power is not None),
             f"power_options must be a dict, with a power model, got {self.power_options!r}"),
            (self.graph is None or self.graph in names("asyncsgd-graph"),
             lambda: f"graph must be None or one of {', '.join(names('asyncsgd-graph'))}, got {self.graph!r}"),
            (self.graph_options is None or (isinstance(self.graph_options, dict) and self.graph is not None),
             f"graph_options must be a dict, with a graph, got {self.graph_options!r}"),
            (_positive_or_none(self.epsilon), f"epsilon must be None or a number > 0, got {self.epsilon!r}"),
            (_positive_or_none(self.step_size), f"step_size must be None or a number > 0, got {self.step_size!r}"),
            (self.batch is None or (integer(self.batch) and self.batch >= 1),
             f"batch must be None or an integer >= 1, got {self.batch!r}"),
            (self.compressor in COMPRESSORS,
             f"compressor must be one of {', '.join(str(c) for c in COMPRESSORS)}, got {self.compressor!r}"),
            (self.coordinates is None or (integer(self.coordinates) and self.coordinates >= 1),
             f"coordinates must be None or an integer >= 1, got {self.coordinates!r}"),
            (self.quantile is None or (number(self.quantile) and 0 < self.quantile <= 1),
             f"quantile must be None or a number in (0, 1], got {self.quantile!r}"),
            (threshold is None or (integer(threshold) and threshold >= 1) or threshold == math.inf,
             f"threshold must be None, an integer >= 1 or inf, got {threshold!r}"),
            *[(isinstance(getattr(self, name), bool), f"{name} must be True or False, got {getattr(self, name)!r}")
              for name in ("stop_computations", "delay_adaptive", "restart", "stop_at_epsilon", "trace", "verbose")],
            *[(getattr(self, name) is None or (integer(getattr(self, name)) and getattr(self, name) >= 0),
               f"{name} must be None or an integer >= 0, got {getattr(self, name)!r}")
              for name in ("max_steps", "max_gradients")],
            (_positive_or_none(self.max_time), f"max_time must be None or a number > 0, got {self.max_time!r}"),
            (integer(self.eval_every) and self.eval_every >= 1,
             f"eval_every must be an integer >= 1, got {self.eval_every!r}"),
            (integer(self.seed) and self.seed >= 0, f"seed must be an integer >= 0, got {self.seed!r}"),
            (number(self.time_unit) and self.time_unit > 0, f"time_unit must be a number > 0, got {self.time_unit!r}"),
            (number(self.idle_timeout) and self.idle_timeout > 0,
             f"idle_timeout must be a number > 0, got {self.idle_timeout!r}"),
            (integer(self.log_every) and self.log_every >= 1,
             f"log_every must be an integer >= 1, got {self.log_every!r}"),
            (self.checkpoint is None or isinstance(self.checkpoint, str),
             f"checkpoint must be a path or None, got {self.checkpoint!r}"),
            (is_integer(self.checkpoint_every) and self.checkpoint_every >= 0,
             f"checkpoint_every must be an integer >= 0, got {self.checkpoint_every!r}"),
            *self._declared_checks(),
        ]

    def _declared_checks(self):
        """The checks of the method's and the compute-time model's options against their declarations."""
        method_problem = tau_problem = None
        if self.method in names("asyncsgd-method") and isinstance(self.method_options, (dict, type(None))):
            method_problem = lookup("asyncsgd-method", self.method).options_problem(self.method_values())
        if self.tau_options and not isinstance(self.tau, str):
            tau_problem = f"tau_options are for a compute-time model given by name, not tau={self.tau!r}"
        elif self.tau_options and self.tau in names("tau-model") and isinstance(self.tau_options, dict):
            tau_problem = options_problem("tau-model", self.tau, self.tau_options)
        return [
            (self.method_options is None or isinstance(self.method_options, dict),
             f"method_options must be a dict or None, got {self.method_options!r}"),
            (method_problem is None, method_problem),
            (self.tau_options is None or isinstance(self.tau_options, dict),
             f"tau_options must be a dict or None, got {self.tau_options!r}"),
            (tau_problem is None, tau_problem),
        ]

    def method_values(self):
        """The chosen method's options: ``method_options`` (as ``async_sgd`` routes them), or, for settings made
        without them, the settings named as the method's declared options."""
        if self.method_options is not None:
            return dict(self.method_options)
        fields = {field.name for field in dataclasses.fields(self)}
        return {name: getattr(self, name) for name in lookup("asyncsgd-method", self.method).options
                if name in fields}

    def as_dict(self):
        payload = super().as_dict()
        for name in ("tau", "upload", "download"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                payload[name] = getattr(value, "describe", lambda: repr(value))()
        if payload["threshold"] == math.inf:
            payload["threshold"] = "inf"
        if isinstance(self.method_options, dict):
            payload["method_options"] = inf_as_text(self.method_options)
        return payload


def inf_as_text(values):
    """A flat dict of a method's options or parameters for JSON, R = inf as "inf" (JSON has no inf)."""
    return {name: "inf" if _is_inf(value) else value for name, value in values.items()}


def route_method_options(settings, method_options=None):
    """``async_sgd``'s keywords as settings, with the chosen method's options gathered in ``method_options``.

    A keyword that the method declares (``Method.options``) is one of its options, from the flattened
    keywords (``batch=8``) or ``method_options`` ({"batch": 8}); one that is also a setting (the built-in
    methods' are) stays a setting too, and a setting of that name given only in ``method_options`` is set
    from it.  Returns (settings, a problem or None): the same option given both ways with two values."""
    method = settings.get("method", AsyncSGDSettings.method)
    if not isinstance(method_options, (dict, type(None))) or not isinstance(method, str) or \
            method not in names("asyncsgd-method"):
        return dict(settings, method_options=method_options), None  # the settings' checks say what is wrong
    declared = lookup("asyncsgd-method", method).options
    fields = {field.name for field in dataclasses.fields(AsyncSGDSettings)}
    given = dict(method_options or {})
    routed, problem = {}, None
    for name, value in settings.items():
        if name in declared:
            if name in given and not _same(given[name], value):
                problem = f"{name} is given twice: {name}={value!r} and method_options[{name!r}]={given[name]!r}"
            given.setdefault(name, value)
        if name in fields or name not in declared:
            routed[name] = value  # a setting, or an unknown name that the settings refuse
    routed.update({name: value for name, value in given.items() if name in fields and name not in settings})
    routed["method_options"] = given
    return routed, problem


def _same(a, b):
    try:
        return a is b or bool(a == b)
    except (TypeError, ValueError):
        return False


def _is_inf(value):
    return isinstance(value, float) and value == math.inf
