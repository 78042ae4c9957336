"""The result of a federated run, on the core's Result: the global model, per-round history, CSV and a plot."""
import csv
import dataclasses
import io

from ..core.io import write_atomic
from ..core.result import Result, require_plotting  # noqa: F401 (imported from here by tests and benchmarks)

SCALAR_COLUMNS = ("round", "sampled", "participants", "dropped", "stragglers", "failed", "loss", "test_loss",
                  "test_accuracy", "bytes_sent", "bytes_received", "epsilon", "time")
# who took part in each round, as lists of client ids (JSON; in the CSV as space-separated ids)
LIST_COLUMNS = ("sampled_clients", "dropped_clients", "straggler_clients", "failed_clients", "byzantine_clients")


@dataclasses.dataclass
class FederatedResult(Result):
    # status: "finished" (info["stop"] "rounds": every round, or every server step of FedBuff) or
    # "interrupted" (stop "signal": SIGTERM, the checkpoint written)
    # history: per-round columns (see SCALAR_COLUMNS, plus "failures": [{"client", "error"}] and "note")
    # timings: seconds setup, rounds, total;  info: ranks, model, strategy, clients, settings, placement, stop
    params: object          # the global model after the last round, the same on every rank
    rounds: int             # rounds run in all (with earlier runs, when resumed)
    loss: float             # the final model's loss over every client's rows (weighted by n_k)
    accuracy: float         # its accuracy over every client's rows (None for a regression)
    test_accuracy: float    # its accuracy on the test data (None without test data or for a regression)

    SOLUTION = "params"

    @property
    def iterations(self):
        """The rounds run in all (``rounds``; FedBuff's server steps)."""
        return self.rounds

    def __str__(self):
        accuracy = "" if self.test_accuracy is None else f", test_accuracy={self.test_accuracy:.4f}"
        return f"FederatedResult(status={self.status}, rounds={self.rounds}, loss={self.loss:.8g}{accuracy})"

    def to_csv(self, path):
        """One row per round of the scalar history columns, the lists of clients (space-separated ids) and the
        failures ('client: error; ...'), written atomically."""
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        lists = [column for column in LIST_COLUMNS if column in self.history]
        writer.writerow(SCALAR_COLUMNS + tuple(lists) + ("failures", "note"))
        for index in range(len(self.history["round"])):
            failures = "; ".join(f"{f['client']}: {f['error']}" for f in self.history["failures"][index])
            writer.writerow([_cell(self.history[column][index]) for column in SCALAR_COLUMNS]
                            + [" ".join(str(k) for k in self.history[column][index]) for column in lists]
                            + [failures, self.history["note"][index] or ""])
        write_atomic(path, buffer.getvalue())

    def plot_panels(self):
        """Training loss (of the reporting clients), test accuracy and participants against the round; a
        round without a value (no report, no evaluation) is left out of its curve."""
        h, panels = self.history, []
        for column, title in (("loss", "training loss (reporting clients)"), ("test_accuracy", "test accuracy"),
                              ("participants", "participants")):
            points = [(r, v) for r, v in zip(h["round"], h[column]) if v is not None]
            panels.append({"title": title, "xlabel": "round",
                           "curves": [([r for r, _ in points], [v for _, v in points], None)]})
        return panels


def _cell(value):
    return "" if value is None else value
