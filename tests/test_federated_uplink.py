"""Compressed uploads: error feedback and EF21 as client state, the bytes exact, every compressor usable.

References outside the code under test: FedAvg with EF / EF21 transcribed
here with full-batch clients and a Top-K written here (np.argsort on the
magnitudes); the compressors' own payload sizes for the byte counts.
"""
import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.compression import get_compressor
from mpiopt.core.registry import names
from mpiopt.data import load_dataset
from mpiopt.federated import partition, run_federated, split_clients
from mpiopt.models import get_model

DATA = load_dataset("digits", MPI.COMM_SELF, test_fraction=0.25, seed=0)
PARTS = split_clients(DATA.X_train[:800], DATA.y_train[:800], partition("iid", DATA.y_train[:800], 10, 0))


def softmax():
    return get_model("softmax", n_features=64, n_classes=10, alpha=1e-3)


def linear_clients(n_clients=6, seed=2):
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(n_clients):
        X = rng.standard_normal((8 + 2 * k, 5))
        parts.append((X, X @ np.arange(1.0, 6.0) + k + 0.1 * rng.standard_normal(X.shape[0])))
    return parts


def top_k(x, k):
    """The k entries of largest magnitude (ties to the lower index), the rest zero."""
    kept = np.zeros_like(x)
    order = np.argsort(-np.abs(x), kind="stable")[:k]
    kept[order] = x[order]
    return kept


def fedavg_reference(parts, result, mode, k, lr=0.05, epochs=3):
    model = get_model("linear", n_features=5)
    w = model.init_params(1)
    memory = {c: np.zeros(6) for c in range(len(parts))}
    for round in range(result.rounds):
        sampled = result.history["sampled_clients"][round]
        received, weights = [], []
        for c in sampled:
            local = w.copy()
            for _ in range(epochs):
                local = local - lr * model.loss_and_grad(local, *parts[c])[1]
            delta = local - w
            if mode == "ef":
                corrected = delta + memory[c]
                sent = top_k(corrected, k)
                memory[c] = corrected - sent
            elif mode == "ef21":
                memory[c] = memory[c] + top_k(delta - memory[c], k)
                sent = memory[c]
            else:
                sent = top_k(delta, k)
            received.append(sent)
            weights.append(parts[c][1].size)
        total = sum(weights)
        step = np.zeros(6)
        for sent, n in zip(received, weights):
            step += (n / total) * sent
        w = w + step
    return w


@pytest.mark.mpi
@pytest.mark.many_ranks  # the clients' feedback state is spread over the ranks
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["none", "ef", "ef21"])
def test_topk_uploads_with_each_feedback_are_their_transcription_at_any_rank_count(comm, mode):
    parts = linear_clients()
    options = dict(rounds=7, fraction=0.5, lr=0.05, local_epochs=3, batch_size=None, seed=1, compressor="topk",
                   compressor_options={"k": 2}, uplink_feedback=mode)
    result = run_federated(get_model("linear", n_features=5), parts, "fedavg", comm, **options)
    np.testing.assert_allclose(result.params, fedavg_reference(parts, result, mode, 2), rtol=1e-12, atol=1e-13)
    alone = run_federated(get_model("linear", n_features=5), parts, "fedavg", MPI.COMM_SELF, **options)
    assert np.array_equal(result.params, alone.params)
    # uplink: the five scalars and the payload (2 float64 values, 2 int32 indices) of each reporting client
    assert result.history["bytes_sent"] == [8.0 * 5 * 3 + 3 * 2 * 12] * 7
    assert result.history["bytes_received"] == [3.0 * 6 * 8] * 7


def test_feedback_converges_where_the_plain_top_1_percent_upload_does_not():
    common = dict(rounds=30, fraction=1.0, lr=0.1)
    dense = run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF, **common)
    losses = {mode: run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF, compressor="topk",
                                  compressor_options={"ratio": 0.01}, uplink_feedback=mode, **common).loss
              for mode in ("none", "ef", "ef21")}
    assert losses["none"] > 4 * dense.loss, losses
    assert losses["ef"] < 1.2 * dense.loss and losses["ef21"] < 1.6 * dense.loss, (losses, dense.loss)


@pytest.mark.parametrize("name", [name for name in names("compressor") if name != "none"])
def test_every_compressor_uploads_with_its_exact_bytes_and_auto_feedback(name):
    result = run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF, rounds=3, fraction=0.5, lr=0.1,
                           compressor=name)
    payload = get_compressor(name).payload_bytes(softmax().n_params, np.float64)
    assert result.history["bytes_sent"] == [5.0 * (8 * 5 + payload)] * 3
    assert np.isfinite(result.params).all()
    assert result.loss < run_federated(softmax(), PARTS, "fedavg", MPI.COMM_SELF, rounds=0).loss


def test_compressed_scaffold_compresses_both_uploads():
    result = run_federated(softmax(), PARTS, "scaffold", MPI.COMM_SELF, rounds=10, fraction=0.5, lr=0.1,
                           compressor="qsgd8")
    payload = get_compressor("qsgd8").payload_bytes(softmax().n_params, np.float64)
    assert result.history["bytes_sent"][0] == 5 * (8 * 5 + 2 * payload)
    assert result.loss < 0.6
