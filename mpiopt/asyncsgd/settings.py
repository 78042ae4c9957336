"""Settings of a heterogeneous-worker SGD run, validated once on every rank (mpiopt.core.settings).

Defaults live here and nowhere else; ``None`` for ``step_size``, ``batch`` and
``threshold`` means the theory's value (:mod:`.theory`).
"""
import dataclasses
import math

from ..core.registry import names
from ..core.settings import Settings, is_integer, is_number

RUNTIMES = ("simulator", "mpi")


def _positive_or_none(value):
    return value is None or (is_number(value) and value > 0)


@dataclasses.dataclass(frozen=True)
class AsyncSGDSettings(Settings):
    label = "async-sgd"

    method: str = "rennala"        # minibatch, asgd, rennala or ringmaster (registry kind "asyncsgd-method")
    runtime: str = "simulator"     # "simulator" (virtual clock) or "mpi" (rank 0 serves, ranks 1.. work)
    n_workers: int = None          # simulator: virtual workers (None: 8); mpi: must be ranks - 1 (None: that)
    tau: object = "sqrt"           # compute-time model name (registry kind "tau-model"), a TauModel, or times
    epsilon: float = None          # target for ||grad f(x)||^2 (None: 1e-2 ||grad f(x0)||^2)
    step_size: float = None        # gamma (None: the theory's, from L, sigma^2, epsilon and n)
    batch: int = None              # Rennala's B (None: max(1, ceil(sigma^2/epsilon)))
    threshold: float = None        # Ringmaster's delay threshold R (None: max(1, ceil(sigma^2/epsilon)); inf allowed)
    stop_computations: bool = False  # Ringmaster: stop a worker's gradient once its delay reaches R
    delay_adaptive: bool = True    # Asynchronous SGD: gamma_k = min(gamma, 1/(2 L delay_k))
    restart: bool = True           # Rennala: after a step every worker restarts at the new point
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
            (_positive_or_none(self.epsilon), f"epsilon must be None or a number > 0, got {self.epsilon!r}"),
            (_positive_or_none(self.step_size), f"step_size must be None or a number > 0, got {self.step_size!r}"),
            (self.batch is None or (integer(self.batch) and self.batch >= 1),
             f"batch must be None or an integer >= 1, got {self.batch!r}"),
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
        ]

    def as_dict(self):
        payload = super().as_dict()
        if not isinstance(self.tau, str):
            payload["tau"] = getattr(self.tau, "describe", lambda: repr(self.tau))()
        if payload["threshold"] == math.inf:
            payload["threshold"] = "inf"
        return payload
