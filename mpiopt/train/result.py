"""The result of data-parallel training, on the core's Result: the parameters and two histories."""
import dataclasses

from ..core.result import Result

# How a run ended: info["stop"] -> status (one of mpiopt.core.result.STATUSES).
STOPS = {"epochs": "finished", "max_steps": "finished", "time_limit": "time_limit", "signal": "interrupted"}


@dataclasses.dataclass
class TrainResult(Result):
    # status: "finished" (info["stop"] "epochs": every epoch; "max_steps": the step budget), "time_limit"
    # (stop "time_limit") or "interrupted" (stop "signal": SIGTERM, the checkpoint written)
    # history: per-step columns step, epoch, loss, accuracy, rows, bytes_sent, time, communication, exposed
    # timings: seconds setup, train, compute, communication, exposed, hidden, optimizer, total; overlap_fraction
    # info: ranks, model, n_params, the settings, buckets, memory per rank (bytes), stop, notes
    params: object            # the final parameters, the whole flat vector, the same on every rank
    loss: float               # the training loss at the final parameters over the whole training set
    accuracy: float           # the training accuracy there (None for a regression)
    steps: int                # optimizer steps taken in all (with earlier runs, when resumed)
    epoch_history: dict       # per-epoch columns epoch, steps, loss, accuracy, bytes_sent, time

    SOLUTION = "params"

    @property
    def iterations(self):
        """The optimizer steps taken in all (``steps``)."""
        return self.steps

    def plot_panels(self):
        """The batches' training loss against the step (and their accuracy for a classifier); the test loss
        and accuracy too when the history has ``test_loss`` or ``test_accuracy`` columns."""
        h = self.history
        steps = h["step"]
        loss = [(steps, h["loss"], "training (batch)")]
        if "test_loss" in h:
            loss.append((steps, h["test_loss"], "test"))
        panels = [{"title": "loss", "xlabel": "step", "ylabel": "loss", "curves": loss,
                   "yscale": "log" if steps and min(h["loss"]) > 0 else None}]
        accuracy = []
        if any(value is not None for value in h.get("accuracy", ())):
            accuracy.append((steps, [float("nan") if a is None else a for a in h["accuracy"]], "training (batch)"))
        if "test_accuracy" in h:
            accuracy.append((steps, [float("nan") if a is None else a for a in h["test_accuracy"]], "test"))
        if accuracy:
            panels.append({"title": "accuracy", "xlabel": "step", "ylabel": "accuracy", "curves": accuracy})
        return panels

    def __str__(self):
        accuracy = "" if self.accuracy is None else f", accuracy={self.accuracy:.4f}"
        return (f"TrainResult(status={self.status}, stop={self.info.get('stop')}, steps={self.steps}, "
                f"loss={self.loss:.8g}{accuracy}, train={self.timings['train']:.3g}s)")
