"""The result of a heterogeneous-worker SGD run, on the core's Result, with a plot of loss against time.

``status`` is one word of the core's STATUSES: ``converged`` (||grad f||^2 <= epsilon was reached),
``finished`` (the budget of steps or gradients was spent), ``time_limit`` (``max_time`` ran out) or
``interrupted`` (a SIGTERM stopped a run after writing its checkpoint);
``info["stop"]`` names the rule that ended the run (:data:`STATUS_OF_STOP`'s keys).
"""
import dataclasses

from ..core.result import Result

HISTORY_COLUMNS = ("time", "step", "gradients", "loss", "grad_norm2")

# the rule that ended a run (info["stop"]) -> the result's status
STATUS_OF_STOP = {"epsilon": "converged", "max_steps": "finished", "max_gradients": "finished",
                  "max_time": "time_limit"}  # a SIGTERM is no rule: status "interrupted", stop "signal"


@dataclasses.dataclass
class AsyncSGDResult(Result):
    # status: converged (info["stop"] "epsilon"), finished ("max_steps" or "max_gradients"), time_limit ("max_time")
    # history: HISTORY_COLUMNS, one row per evaluation (time in compute-time units)
    # timings: seconds (wall): total, and for mpi the run's wall time
    # info: stop, problem, method and its parameters, runtime, tau model and the workers' mean times, settings,
    #       epsilon, predicted times (mpiopt.asyncsgd.theory), per-worker counts
    x: object                # the final point (the same on every rank)
    steps: int               # steps taken
    gradients: int           # gradients that reached the server (accepted + discarded)
    time: float              # time at the end, in compute-time units (virtual, or wall / time_unit)
    time_to_epsilon: float   # the first evaluation's time with ||grad f||^2 <= epsilon (None if never)
    predicted: dict          # predicted_times(...) for these workers, in the same units (constants dropped)

    SOLUTION = "x"

    @property
    def iterations(self):
        """The steps taken (the core's name for them)."""
        return self.steps

    def __str__(self):
        reached = "not reached" if self.time_to_epsilon is None else f"{self.time_to_epsilon:.6g}"
        return (f"AsyncSGDResult(method={self.info['method']}, status={self.status}, stop={self.info['stop']}, "
                f"steps={self.steps}, gradients={self.gradients}, time={self.time:.6g}, "
                f"time_to_epsilon={reached})")

    def plot_panels(self):
        """||grad f||^2 and f - f_low against time."""
        return curve_panels({None: self})

    def plot(self, path, title=None):
        """||grad f||^2 and f - f_low against time (needs matplotlib)."""
        info = self.info
        super().plot(path, title or f"{info['method']} on {info['problem']['name']}, {info['n_workers']} workers")


def curve_panels(results):
    """The panels of ``plot_panels`` for ``results`` (label -> result; label None: no legend entry), on one
    problem: ||grad f||^2 with the first result's epsilon, and f - f_low, against time."""
    curves = [(label, result.history, result.info["problem"]["f_low"]) for label, result in results.items()]
    xlabel = "time (compute-time units)"
    epsilon = next(iter(results.values())).info["epsilon"]
    return [{"title": "||grad f(x)||^2", "xlabel": xlabel, "yscale": "log", "hlines": [(epsilon, "epsilon")],
             "curves": [(h["time"], h["grad_norm2"], label) for label, h, _ in curves]},
            {"title": "f(x) - f_low", "xlabel": xlabel, "yscale": "log",
             "curves": [(h["time"], [max(v - f_low, 1e-300) for v in h["loss"]], label) for label, h, f_low in curves]}]
