"""The result of a federated run, on the core's Result: the global model, per-round history, CSV and a plot."""
import csv
import dataclasses
import io

from ..core.io import write_atomic
from ..core.result import Result

def require_plotting():
    """matplotlib's pyplot on the Agg backend, or an ImportError that says how to install it.

    Call it before the first round where a plot is asked for (``mpiopt federated --plot``), so that a
    missing matplotlib stops the run at once, not after every round has run.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(f"plotting needs matplotlib: pip install 'mpiopt[plots]' ({error})") from None
    return plt


SCALAR_COLUMNS = ("round", "sampled", "participants", "dropped", "stragglers", "failed", "loss", "test_loss",
                  "test_accuracy", "bytes_sent", "bytes_received", "epsilon", "time")


@dataclasses.dataclass
class FederatedResult(Result):
    # status: "finished" (every round) or "interrupted" (SIGTERM; checkpoint written)
    # history: per-round columns (see SCALAR_COLUMNS, plus "failures": [{"client", "error"}] and "note")
    # timings: seconds setup, rounds, total;  info: ranks, model, strategy, clients, settings, placement
    params: object          # the global model after the last round, the same on every rank
    rounds: int             # rounds run in all (with earlier runs, when resumed)
    loss: float             # the final model's loss over every client's rows (weighted by n_k)
    accuracy: float         # its accuracy over every client's rows (None for a regression)
    test_accuracy: float    # its accuracy on the test data (None without test data or for a regression)

    def __str__(self):
        accuracy = "" if self.test_accuracy is None else f", test_accuracy={self.test_accuracy:.4f}"
        return f"FederatedResult(status={self.status}, rounds={self.rounds}, loss={self.loss:.8g}{accuracy})"

    def to_csv(self, path):
        """One row per round of the scalar history columns (and the failures as 'client: error; ...'), atomically."""
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(SCALAR_COLUMNS + ("failures", "note"))
        for index in range(len(self.history["round"])):
            failures = "; ".join(f"{f['client']}: {f['error']}" for f in self.history["failures"][index])
            writer.writerow([_cell(self.history[column][index]) for column in SCALAR_COLUMNS]
                            + [failures, self.history["note"][index] or ""])
        write_atomic(path, buffer.getvalue())

    def plot(self, path):
        """Training loss, test accuracy and participants per round in one figure (needs matplotlib:
        :func:`require_plotting`)."""
        plt = require_plotting()
        h = self.history
        figure, axes = plt.subplots(1, 3, figsize=(12, 3.5))
        for axis, column, title in zip(axes, ("loss", "test_accuracy", "participants"),
                                       ("training loss (reporting clients)", "test accuracy", "participants")):
            points = [(r, v) for r, v in zip(h["round"], h[column]) if v is not None]
            axis.plot([r for r, _ in points], [v for _, v in points], marker=".")
            axis.set_xlabel("round")
            axis.set_title(title)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format=str(path).rsplit(".", 1)[-1] if "." in str(path) else "png")
        plt.close(figure)
        write_atomic(path, buffer.getvalue(), mode="wb")


def _cell(value):
    return "" if value is None else value
