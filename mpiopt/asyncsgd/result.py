"""The result of a heterogeneous-worker SGD run, on the core's Result, with a plot of loss against time."""
import dataclasses
import io

from ..core.io import write_atomic
from ..core.result import Result

HISTORY_COLUMNS = ("time", "step", "gradients", "loss", "grad_norm2")


@dataclasses.dataclass
class AsyncSGDResult(Result):
    # status: "epsilon" (||grad f||^2 <= epsilon reached), "max_steps", "max_gradients" or "max_time"
    # history: HISTORY_COLUMNS, one row per evaluation (time in compute-time units)
    # timings: seconds (wall): total, and for mpi the run's wall time
    # info: problem, method and its parameters, runtime, tau model and the workers' mean times, settings,
    #       epsilon, predicted times (mpiopt.asyncsgd.theory), per-worker counts
    x: object                # the final point (the same on every rank)
    steps: int               # steps taken
    gradients: int           # gradients that reached the server (accepted + discarded)
    time: float              # time at the end, in compute-time units (virtual, or wall / time_unit)
    time_to_epsilon: float   # the first evaluation's time with ||grad f||^2 <= epsilon (None if never)
    predicted: dict          # predicted_times(...) for these workers, in the same units (constants dropped)

    def __str__(self):
        reached = "not reached" if self.time_to_epsilon is None else f"{self.time_to_epsilon:.6g}"
        return (f"AsyncSGDResult(method={self.info['method']}, status={self.status}, steps={self.steps}, "
                f"gradients={self.gradients}, time={self.time:.6g}, time_to_epsilon={reached})")

    def plot(self, path):
        """||grad f||^2 and f - f_low against time (needs matplotlib)."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as error:
            raise ImportError(f"plotting needs matplotlib (pip install matplotlib): {error}") from None
        figure, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        h, f_low = self.history, self.info["problem"]["f_low"]
        axes[0].semilogy(h["time"], h["grad_norm2"])
        axes[0].axhline(self.info["epsilon"], color="gray", linestyle="--", label="epsilon")
        axes[0].set_title("||grad f(x)||^2")
        axes[1].semilogy(h["time"], [max(v - f_low, 1e-300) for v in h["loss"]])
        axes[1].set_title("f(x) - f_low")
        for axis in axes:
            axis.set_xlabel("time (compute-time units)")
        figure.suptitle(f"{self.info['method']} on {self.info['problem']['name']}, {self.info['n_workers']} workers")
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        plt.close(figure)
        write_atomic(path, buffer.getvalue(), mode="wb")
