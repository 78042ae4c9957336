"""The federated results' core fields (mpiopt.core.result): ``solution`` is ``params``, ``iterations`` the rounds,
``status`` one of STATUSES with the detail in ``info["stop"]``, for ``run_federated`` and ``run_fedbuff``;
FedBuff's checkpoints (a resumed run is the uninterrupted one bit for bit) and the plot.

FedBuff needs two ranks: its MPI tests skip at one rank and, above two, run on the first two ranks, where the
run is deterministic (one worker).
"""
import importlib.util
import io
import os
import signal

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.core.comm import CollectiveError
from mpiopt.core.result import STATUSES
from mpiopt.data import load_dataset
from mpiopt.federated import FederatedResult, partition, run_fedbuff, run_federated, split_clients
from mpiopt.models.softmax import SoftmaxRegression

DATA = load_dataset("digits", MPI.COMM_SELF)
X, Y = DATA.X_train[:480], DATA.y_train[:480]
TEST = (DATA.X_test[:200], DATA.y_test[:200])
PNG = b"\x89PNG\r\n\x1a\n"


class TermAt(SoftmaxRegression):
    """Softmax regression that sends itself SIGTERM at its ``term_at``-th local gradient (None: never)."""
    term_at, gradients = None, 0

    def loss_and_grad(self, params, X, y):
        self.gradients += 1
        if self.gradients == self.term_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().loss_and_grad(params, X, y)


def softmax(term_at=None):
    model = TermAt(n_features=64, n_classes=10, alpha=1e-3)
    model.term_at = term_at
    return model


def iid_clients(n_clients=8):
    return split_clients(X, Y, partition("iid", Y, n_clients, 3))


def first_two(comm):
    """The first two ranks of ``comm`` (None on the others; skips at one rank): FedBuff with one worker."""
    if comm.size < 2:
        pytest.skip("FedBuff needs a server and at least one worker")
    return comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)


def assert_core_fields(result, rounds):
    assert isinstance(result, FederatedResult)
    assert result.solution is result.params and result.iterations == result.rounds == rounds
    assert result.status in STATUSES and result.status == "finished" and result.info["stop"] == "rounds"
    assert set(result.to_dict()) >= {"status", "history", "timings", "info", "params", "rounds"}


def test_run_federated_result_has_the_core_fields():
    result = run_federated(softmax(), iid_clients(), "fedavg", MPI.COMM_SELF, rounds=3, fraction=0.5)
    assert_core_fields(result, 3)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_run_federated_interrupted_says_so_in_status_and_stop(comm, tmp_path):
    path = comm.bcast(str(tmp_path), root=0) + "/fed.ckpt.npz"
    model = softmax(term_at=3 if comm.rank == 0 else None)
    result = run_federated(model, iid_clients(), "fedavg", comm, rounds=4, fraction=1.0, checkpoint=path)
    assert result.status == "interrupted" and result.info["stop"] == "signal" and result.iterations < 4


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_run_fedbuff_result_has_the_core_fields_and_a_log(comm):
    pair = first_two(comm)
    if pair == MPI.COMM_NULL:
        return
    log = io.StringIO()
    result = run_fedbuff(softmax(), iid_clients(), pair, buffer_size=3, server_steps=4, test_data=TEST,
                         verbose=True, log_stream=log)
    pair.Free()
    assert_core_fields(result, 4)
    assert set(result.timings) == {"setup", "rounds", "total"} and result.info["resumed_at"] == 0
    assert ("mpiopt federated learning, asynchronous (fedbuff)" in log.getvalue()) == (comm.rank == 0)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_fedbuff_resumed_from_its_checkpoint_matches_an_uninterrupted_run_bit_for_bit(comm, tmp_path):
    """K = 3 with two clients a pull: sessions end with a part-filled buffer and a worker between its clients."""
    folder = comm.bcast(str(tmp_path), root=0)
    pair = first_two(comm)
    if pair == MPI.COMM_NULL:
        return
    options = dict(buffer_size=3, concurrency=2, server_steps=8, lr=0.05, test_data=TEST)
    straight = run_fedbuff(softmax(), iid_clients(), pair, **options)
    sessions = run_fedbuff(softmax(), iid_clients(), pair, checkpoint=f"{folder}/every.npz", checkpoint_every=3,
                           **options)
    path = f"{folder}/term.npz"
    stopped = run_fedbuff(softmax(term_at=40 if pair.rank == 1 else None), iid_clients(), pair, checkpoint=path,
                          **options)
    resumed = run_fedbuff(softmax(), iid_clients(), pair, checkpoint=path, **options)
    again = run_fedbuff(softmax(), iid_clients(), pair, checkpoint=path, **options)
    with pytest.raises(CollectiveError, match="belongs to another problem: rank 0's lr was 0.05, now 0.1"):
        run_fedbuff(softmax(), iid_clients(), pair, checkpoint=path, **dict(options, lr=0.1))
    pair.Free()
    assert stopped.status == "interrupted" and stopped.info["stop"] == "signal" and 0 < stopped.rounds < 8
    assert resumed.status == "finished" and resumed.info["resumed_at"] == stopped.rounds
    for run in (sessions, resumed, again):
        assert np.array_equal(run.params, straight.params)
        assert run.history["loss"] == straight.history["loss"]
        assert run.history["staleness"] == straight.history["staleness"]
        assert run.history["clients"] == straight.history["clients"]
        assert run.info["discarded"] == straight.info["discarded"] and run.rounds == 8
    assert again.info["resumed_at"] == 8 and len(sessions.info["server"]["sessions"]) > 1


def test_federated_result_plot_writes_a_png(tmp_path):
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("plotting needs matplotlib")
    result = run_federated(softmax(), iid_clients(), "fedavg", MPI.COMM_SELF, rounds=3, test_data=TEST,
                           eval_every=2)
    assert [panel["xlabel"] for panel in result.plot_panels()] == ["round"] * 3
    result.plot(tmp_path / "fed.png", title="FedAvg")
    assert (tmp_path / "fed.png").read_bytes()[:8] == PNG
