"""The result of data-parallel training, on the core's Result: the parameters and two histories."""
import dataclasses

from ..core.result import Result


@dataclasses.dataclass
class TrainResult(Result):
    # status: "finished" (every epoch), "max_steps", "time_limit" or "interrupted" (SIGTERM; checkpoint written)
    # history: per-step columns step, epoch, loss, accuracy, rows, bytes_sent, time, communication, exposed
    # timings: seconds setup, train, compute, communication, exposed, hidden, optimizer, total; overlap_fraction
    # info: ranks, model, n_params, the settings, buckets, memory per rank (bytes), notes
    params: object            # the final parameters, the whole flat vector, the same on every rank
    loss: float               # the training loss at the final parameters over the whole training set
    accuracy: float           # the training accuracy there (None for a regression)
    steps: int                # optimizer steps taken in all (with earlier runs, when resumed)
    epoch_history: dict       # per-epoch columns epoch, steps, loss, accuracy, bytes_sent, time

    def __str__(self):
        accuracy = "" if self.accuracy is None else f", accuracy={self.accuracy:.4f}"
        return (f"TrainResult(status={self.status}, steps={self.steps}, loss={self.loss:.8g}{accuracy}, "
                f"train={self.timings['train']:.3g}s)")
