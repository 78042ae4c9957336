"""The core fields of a training result (issue 20): the solution is ``params``, ``iterations`` the steps, the
status one word of STATUSES with the detail in ``info["stop"]``, and ``plot`` writes the curves.

Every MPI test runs at any rank count (the serial pass at one rank, ``mpiexec -n K python -m pytest
--only-mpi`` at K).
"""
import contextlib

import numpy as np
import pytest
from mpi4py import MPI

import mpiopt.train.trainer as trainer
from mpiopt.core.result import STATUSES
from mpiopt.data import load_dataset
from mpiopt.models import get_model
from mpiopt.optim import get_optimizer
from mpiopt.train import TrainResult, train

DATA = load_dataset("digits", MPI.COMM_SELF)


def run(comm, **settings):
    model = get_model("mlp", n_features=DATA.n_features, n_classes=DATA.n_classes, hidden=(8,), alpha=1e-3)
    return train(model, DATA.X_train, DATA.y_train, get_optimizer("adam", lr=1e-2), comm,
                 **{"epochs": 1, "batch_size": 256, **settings})


def assert_core_fields(result, status, stop):
    assert isinstance(result, TrainResult)
    assert result.status == status and result.status in STATUSES and result.info["stop"] == stop
    assert result.solution is result.params and result.iterations == result.steps
    assert result.steps == len(result.history["step"])
    payload = result.to_dict()
    assert payload["status"] == status and payload["info"]["stop"] == stop


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_run_through_its_epochs_is_finished_with_stop_epochs(comm):
    result = run(comm, epochs=2)
    assert_core_fields(result, "finished", "epochs")
    assert result.iterations == 2 * result.info["steps_per_epoch"]


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_run_to_max_steps_is_finished_with_stop_max_steps(comm):
    result = run(comm, epochs=2, max_steps=3)
    assert_core_fields(result, "finished", "max_steps")
    assert result.iterations == 3


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_run_past_its_time_limit_stops_with_status_time_limit(comm):
    result = run(comm, epochs=2, time_limit=1e-9)  # spent after the first step, on every rank
    assert_core_fields(result, "time_limit", "time_limit")
    assert result.iterations == 1


class TermAtStep:
    """SignalFlags that report SIGTERM from the given step on (as the real flags would after the signal)."""

    def __init__(self, step):
        self.step, self.taken = step, 0

    def __call__(self, enabled=True):
        return contextlib.nullcontext(self)

    def take(self):
        self.taken += 1
        return 0.0, float(self.taken >= self.step)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_signalled_run_is_interrupted_with_stop_signal(comm, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer, "SignalFlags", TermAtStep(2))
    path = f"{comm.bcast(str(tmp_path), root=0)}/interrupted.npz"
    result = run(comm, epochs=2, checkpoint=path)
    assert_core_fields(result, "interrupted", "signal")
    assert result.iterations == 2
    monkeypatch.undo()
    resumed = run(comm, epochs=2, checkpoint=path)
    assert_core_fields(resumed, "finished", "epochs")
    assert resumed.info["resumed_at"] == 2


def test_plot_writes_the_training_curves_as_png(tmp_path):
    pytest.importorskip("matplotlib")
    result = run(MPI.COMM_SELF, max_steps=4)
    panels = result.plot_panels()
    assert [panel["title"] for panel in panels] == ["loss", "accuracy"]
    assert panels[0]["curves"][0][0] == [1, 2, 3, 4]
    path = tmp_path / "train.png"
    result.plot(path, title="digits")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_shows_test_columns_when_the_history_has_them():
    history = {"step": [1, 2], "loss": [0.5, 0.25], "accuracy": [None, None], "test_loss": [0.6, 0.4]}
    result = TrainResult(status="finished", history=history, timings={}, info={"stop": "epochs"},
                         params=np.zeros(3), loss=0.25, accuracy=None, steps=2, epoch_history={})
    (panel,) = result.plot_panels()  # a regression: no accuracy panel
    assert [label for _, _, label in panel["curves"]] == ["training (batch)", "test"]
