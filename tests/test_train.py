"""Data-parallel training (mpiopt.train): the same model at any rank count, ZeRO stage, bucket size and
overlap; checkpoints that resume bit for bit; memory per rank that falls as 1/p.

Every MPI test runs at any rank count: the serial pass at one rank, ``mpiexec -n K python -m pytest
--only-mpi`` at K.  References are a single-process run (``MPI.COMM_SELF``) of the same global batches.
"""
import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.core.comm import CollectiveError
from mpiopt.core.random import random_stream
from mpiopt.data import load_dataset
from mpiopt.models import get_model
from mpiopt.optim import get_optimizer
from mpiopt.train import TrainResult, train
from mpiopt.train.buckets import BucketLayout, bucket_bounds
from mpiopt.train.overlap import CommunicationQueue

DATA = load_dataset("digits", MPI.COMM_SELF)
FAST = dict(epochs=1, batch_size=64, max_steps=8)


def mlp(hidden=(24, 12)):
    return get_model("mlp", n_features=DATA.n_features, n_classes=DATA.n_classes, hidden=hidden, alpha=1e-3)


def run(comm, model=None, optimizer="adam", **settings):
    options = {"lr": 1e-2} if optimizer == "adam" else {"lr": 0.05, "momentum": 0.9}
    return train(model or mlp(), DATA.X_train, DATA.y_train, get_optimizer(optimizer, **options), comm,
                 **{**FAST, **settings})


def relative(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def shared_folder(comm, tmp_path):
    """One folder for every rank (rank 0's tmp_path)."""
    return comm.bcast(str(tmp_path), root=0)


def test_buckets_cover_the_vector_from_its_end_and_split_at_layers():
    layers = [(0, 10), (10, 13), (13, 30)]
    assert bucket_bounds(layers, 8, False) == [(22, 30), (14, 22), (6, 14), (0, 6)]
    assert bucket_bounds(layers, 8, True) == [(22, 30), (14, 22), (13, 14), (10, 13), (2, 10), (0, 2)]
    assert bucket_bounds(layers, 100, False) == [(0, 30)]
    for size in (1, 2, 3, 5):
        owned = np.zeros(30, dtype=int)
        for rank in range(size):
            layout = BucketLayout(layers, 64, True, rank, size)
            for bucket in layout.buckets:
                owned[slice(*bucket.chunk)] += 1
            assert layout.shard_size == sum(b.chunk[1] - b.chunk[0] for b in layout.buckets)
            assert np.array_equal(layout.pack(np.arange(30.0)),
                                  np.concatenate([np.arange(*bucket.chunk) for bucket in layout.buckets]))
        assert (owned == 1).all(), "every entry belongs to exactly one rank's shard"


def test_buckets_of_whole_tensors_never_cut_a_tensor():
    """PyTorch DDP's rule for a compressor that needs each tensor in its shape: tensors from the end, a bucket
    closed before the next tensor would take it past the limit; a larger tensor is a bucket of its own."""
    shapes = [(4, 5), (5,), (5, 2), (2,)]            # entries [0, 20), [20, 25), [25, 35), [35, 37)
    layers = [(0, 25), (25, 37)]
    assert bucket_bounds(layers, 12, False, [20, 5, 10, 2]) == [(25, 37), (20, 25), (0, 20)]
    assert bucket_bounds(layers, 17, False, [20, 5, 10, 2]) == [(20, 37), (0, 20)]
    assert bucket_bounds(layers, 17, True, [20, 5, 10, 2]) == [(25, 37), (20, 25), (0, 20)]
    assert bucket_bounds(layers, 1, False, [20, 5, 10, 2]) == [(35, 37), (25, 35), (20, 25), (0, 20)]
    assert bucket_bounds(layers, 100, False, [20, 5, 10, 2]) == [(0, 37)]
    layout = BucketLayout(layers, 8 * 17, False, 0, 1, tensor_shapes=shapes)
    assert [bucket.shapes for bucket in layout.buckets] == [((5,), (5, 2), (2,)), ((4, 5),)]
    assert BucketLayout(layers, 8 * 17, False, 0, 1).buckets[0].shapes is None


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_any_rank_count_gives_the_single_process_model(comm, optimizer):
    distributed = run(comm, optimizer=optimizer, epochs=2, max_steps=None)
    single = run(MPI.COMM_SELF, optimizer=optimizer, epochs=2, max_steps=None)
    assert isinstance(distributed, TrainResult) and distributed.status == "finished"
    assert distributed.steps == single.steps == 2 * 22
    assert relative(distributed.params, single.params) <= 1e-12
    assert np.allclose(distributed.history["loss"], single.history["loss"], rtol=1e-12, atol=0)
    assert abs(distributed.loss - single.loss) <= 1e-12 * single.loss
    assert distributed.epoch_history["epoch"] == [0, 1] and distributed.epoch_history["steps"] == [22, 22]
    everyone = comm.allgather(distributed.params)
    assert all(np.array_equal(params, everyone[0]) for params in everyone), "the same parameters on every rank"


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_every_zero_stage_takes_the_unsharded_steps(comm, stage):
    unsharded = run(comm, zero_stage=0, bucket_bytes=1024)
    sharded = run(comm, zero_stage=stage, bucket_bytes=1024)
    assert sharded.info["zero_stage"] == stage
    assert relative(sharded.params, unsharded.params) <= 1e-12
    assert np.allclose(sharded.history["loss"], unsharded.history["loss"], rtol=1e-12, atol=0)
    if stage == 1:  # the same all-reduce and elementwise updates: the same bits
        assert np.array_equal(sharded.params, unsharded.params)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("stage", [0, 2, 3])
def test_bucket_sizes_give_the_same_model(comm, stage):
    one = run(comm, zero_stage=stage, bucket_bytes=1 << 20, max_steps=4)
    assert one.info["buckets"]["count"] == (1 if stage < 2 else 3)  # stages 2 and 3 also cut at the 3 layers
    for bucket_bytes in (8 * 37, 8 * 500, 1000):  # many, uneven, and not a multiple of 8
        other = run(comm, zero_stage=stage, bucket_bytes=bucket_bytes, max_steps=4)
        assert other.info["buckets"]["count"] > 3
        assert relative(other.params, one.params) <= 1e-12


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("stage", [0, 2, 3])
def test_overlap_on_and_off_take_the_same_steps_bit_for_bit(comm, stage):
    on = run(comm, zero_stage=stage, bucket_bytes=512, overlap=True)
    off = run(comm, zero_stage=stage, bucket_bytes=512, overlap=False)
    assert on.info["overlap"] and not off.info["overlap"]
    assert np.array_equal(on.params, off.params)
    for result in (on, off):
        t = result.timings
        assert 0 <= t["hidden"] <= t["communication"] and t["exposed"] >= 0
        assert len(t["bucket_communication"]) == result.info["buckets"]["count"]
    assert off.timings["hidden"] == 0 and off.timings["exposed"] == pytest.approx(off.timings["communication"])


def test_exposed_seconds_are_communication_that_the_main_thread_waited_for():
    """A wait that is longer than the collective it waits for (the worker busy with something that is no
    collective: on a busy machine, not yet scheduled) exposes only the collective's seconds; the rest is waiting
    (it used to be counted as exposed, so exposed exceeded communication and the summary said 0 s hidden)."""
    queue = CommunicationQueue(overlap=True)
    if not queue.threaded:
        pytest.skip("MPI is not at MPI_THREAD_MULTIPLE: no background thread")
    try:
        started = threading.Event()
        queue.executor.submit(lambda: started.set() or time.sleep(0.05))  # not a collective: not timed
        started.wait()
        queue.wait(queue.submit(("reduce", 0), sum, [1.0, 2.0]))
        assert 0 <= queue.exposed <= queue.communication, (queue.exposed, queue.communication)
        assert queue.waited > 0.04
        assert queue.by_label[("reduce", 0)] == [queue.communication, queue.exposed]
    finally:
        queue.close()
    inline = CommunicationQueue(overlap=False)  # the main thread runs the collectives: all of them exposed
    for bucket in range(3):
        assert inline.wait(inline.submit(("reduce", bucket), sum, [1.0, float(bucket)])) == 1.0 + bucket
    assert inline.exposed == inline.communication > 0 and inline.waited >= inline.communication


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("stage", [0, 3])
def test_the_summary_adds_up_the_steps_and_never_hides_less_than_nothing(comm, stage, capsys):
    result = run(comm, zero_stage=stage, bucket_bytes=512, max_steps=6, verbose=True, log_every=1)
    t, h = result.timings, result.history
    assert t["communication"] == pytest.approx(sum(h["communication"]), rel=1e-12)
    assert t["exposed"] == pytest.approx(sum(h["exposed"]), rel=1e-12)
    assert all(0 <= exposed <= communication for exposed, communication in zip(h["exposed"], h["communication"]))
    assert 0 <= t["exposed"] <= t["communication"] and t["hidden"] == pytest.approx(t["communication"] - t["exposed"])
    assert t["overlap_fraction"] == pytest.approx(t["hidden"] / t["communication"])
    assert sum(t["bucket_communication"]) <= t["communication"] * (1 + 1e-9)
    assert comm.allgather((t["communication"], t["hidden"])) == [(t["communication"], t["hidden"])] * comm.size
    printed = capsys.readouterr().out
    if comm.rank == 0:
        assert (f"communication {t['communication']:.3f} s ({t['hidden']:.3f} s hidden, {t['exposed']:.3f} s exposed)"
                in printed)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("stage, optimizer", [(0, "adam"), (1, "sgd"), (3, "adam")])
def test_resumed_training_takes_the_uninterrupted_steps_bit_for_bit(comm, tmp_path, stage, optimizer):
    path = f"{shared_folder(comm, tmp_path)}/train-{stage}.npz"
    straight = run(comm, optimizer=optimizer, zero_stage=stage, epochs=2, max_steps=None, bucket_bytes=2048)
    first = run(comm, optimizer=optimizer, zero_stage=stage, epochs=2, max_steps=27, bucket_bytes=2048,
                checkpoint=path)
    assert first.status == "finished" and first.info["stop"] == "max_steps" and first.steps == 27
    resumed = run(comm, optimizer=optimizer, zero_stage=stage, epochs=2, max_steps=None, bucket_bytes=2048,
                  checkpoint=path)
    assert resumed.status == "finished" and resumed.info["resumed_at"] == 27 and resumed.info["steps_run"] == 44 - 27
    assert np.array_equal(resumed.params, straight.params)
    assert resumed.history["loss"] == straight.history["loss"]
    assert resumed.epoch_history["loss"] == straight.epoch_history["loss"]
    again = run(comm, optimizer=optimizer, zero_stage=stage, epochs=2, max_steps=None, bucket_bytes=2048,
                checkpoint=path)
    assert again.info["steps_run"] == 0 and np.array_equal(again.params, straight.params)
    with pytest.raises(CollectiveError, match="belongs to another problem"):
        run(comm, optimizer=optimizer, zero_stage=stage, epochs=2, batch_size=32, checkpoint=path)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("optimizer, first, second, changed", [
    ("sgd", {"lr": 1e-3}, {"lr": 0.05}, "lr was 0.001, now 0.05"),
    ("sgd", {"lr": 1e-3, "momentum": 0.9}, {"lr": 1e-3, "momentum": 0.5}, "momentum was 0.9, now 0.5"),
    ("sgd", {"lr": 1e-3, "momentum": 0.9}, {"lr": 1e-3, "momentum": 0.9, "nesterov": True}, "nesterov was False, now True"),
    ("sgd", {"lr": 1e-3}, {"lr": 1e-3, "weight_decay": 1e-4}, "weight_decay was 0.0, now 0.0001"),
    ("adam", {"lr": 1e-3}, {"lr": 1e-3, "betas": (0.9, 0.99)}, "beta2 was 0.999, now 0.99"),
    ("adam", {"lr": 1e-3}, {"lr": 1e-3, "eps": 1e-6}, "eps was 1e-08, now 1e-06"),
])
def test_resuming_with_another_optimizer_hyperparameter_is_refused(comm, tmp_path, optimizer, first, second, changed):
    """The checkpoint's hyperparameters used to be restored over the new ones without a word (a resume at
    lr 0.05 went on at 1e-3)."""
    path = f"{shared_folder(comm, tmp_path)}/hyper.npz"
    model = mlp(hidden=(8,))

    def run_with(options, steps):
        return train(model, DATA.X_train, DATA.y_train, get_optimizer(optimizer, **options), comm, epochs=1,
                     batch_size=64, max_steps=steps, checkpoint=path)
    assert run_with(first, 5).steps == 5
    with pytest.raises(CollectiveError) as error:
        run_with(second, 10)
    assert f"optimizer {changed}" in str(error.value) and len(set(comm.allgather(str(error.value)))) == 1
    resumed = run_with(first, 10)
    assert resumed.info["resumed_at"] == 5 and resumed.steps == 10


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_memory_per_rank_falls_as_one_over_p(comm, stage):
    model = mlp(hidden=(48, 48, 48))
    n, p = model.n_params, comm.size
    result = run(comm, model=model, zero_stage=stage, bucket_bytes=4096, max_steps=3)
    ranks = result.info["memory_per_rank"]
    sharded = {"optimizer_state": stage >= 1, "gradients": stage >= 2, "params": stage >= 3}
    for category, per_parameter in (("params", 8), ("gradients", 8), ("optimizer_state", 16)):  # Adam: 2 x float64
        held = [rank[f"{category}_bytes"] for rank in ranks]
        if sharded[category]:
            assert sum(held) == per_parameter * n, "the shards cover the vector exactly once"
            assert max(held) <= 1.1 * per_parameter * n / p, (category, held)
        else:
            assert held == [per_parameter * n] * p
    largest_layer = 8 * max(stop - start for start, stop in model.layer_bounds())
    bound = {0: 0, 1: 2 * 8 * n / p + 4096, 2: max(2 * largest_layer, 8 * n / p + 4096),
             3: 4 * largest_layer + 4096}[stage]  # two layers gathered, two layers' gradients in flight
    assert all(rank["buffers_bytes"] <= bound for rank in ranks), ([rank["buffers_bytes"] for rank in ranks], bound)
    states = result.info["memory"]["model_states_bytes"]
    expected = {0: 32 * n, 1: 16 * n + 16 * n / p, 2: 8 * n + 24 * n / p, 3: 32 * n / p}[stage]
    assert abs(states - expected) <= 0.1 * expected


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_tracemalloc_sees_the_sharded_parameters_go(comm):
    model = mlp(hidden=(256, 256))
    peaks = [run(comm, model=model, zero_stage=stage, max_steps=2, bucket_bytes=1 << 16, trace_memory=True)
             .info["memory"] for stage in (0, 3)]
    for peak in peaks:
        assert peak["tracemalloc_peak_bytes"] >= peak["model_states_bytes"]
    saved = peaks[0]["model_states_bytes"] - peaks[1]["model_states_bytes"]
    if comm.size > 1:
        # the model's backward makes the whole gradient (8 n bytes) at every stage: a model state at stage 0, a
        # transient at stage 3, so the peak falls by the states saved less that vector (0.50 of them here, which
        # the allocator's noise put at 0.49 after other tests had run)
        expected = saved - 8 * model.n_params
        traced = peaks[0]["tracemalloc_peak_bytes"] - peaks[1]["tracemalloc_peak_bytes"]
        assert expected > 0 and traced >= 0.8 * expected, (traced, saved, expected)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_history_has_a_row_per_step_and_per_epoch(comm):
    result = run(comm, epochs=2, max_steps=None, bucket_bytes=2048, batch_size=200)
    steps = 2 * 7
    assert all(len(column) == steps for column in result.history.values())
    assert result.history["step"] == list(range(1, steps + 1))
    assert result.history["rows"][:7] == [200] * 6 + [1348 - 6 * 200]
    assert all(0 <= accuracy <= 1 for accuracy in result.history["accuracy"])
    assert result.history["time"] == sorted(result.history["time"])
    assert result.epoch_history["steps"] == [7, 7]
    rows = np.array(result.history["rows"][:7], dtype=float)
    assert result.epoch_history["loss"][0] == pytest.approx(rows @ result.history["loss"][:7] / rows.sum())
    payload = result.to_dict()
    assert payload["status"] == "finished" and len(payload["params"]) == result.info["n_params"]
    p = comm.size  # the ring all-reduce: every rank sends 2 (p - 1) / p of the gradient
    assert result.history["bytes_sent"][0] == pytest.approx(2 * (p - 1) / p * 8 * result.info["n_params"])


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_one_layer_model_trains_as_one_layer(comm):
    model = get_model("softmax", n_features=DATA.n_features, n_classes=DATA.n_classes, alpha=1e-3)
    single = run(MPI.COMM_SELF, model=model)
    for stage in (0, 3):
        result = run(comm, model=model, zero_stage=stage, bucket_bytes=800)
        assert relative(result.params, single.params) <= 1e-12


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("settings, message", [
    ({"zero_stage": 4}, "zero_stage must be one of 0, 1, 2, 3, got 4"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
    ({"bucket_bytes": 4}, "bucket_bytes must be an integer >= 8"),
    ({"reducer": "nope"}, "reducer must be one of"),
    ({"compressor": "nope"}, "compressor must be None or one of"),
    ({"momentum": 0.9}, "unknown training setting(s) 'momentum'"),
])
def test_bad_settings_raise_the_same_error_on_every_rank(comm, settings, message):
    with pytest.raises(CollectiveError) as error:
        run(comm, **settings)
    assert message in str(error.value)
    assert len(set(comm.allgather(str(error.value)))) == 1


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_data_that_differs_between_ranks_is_refused(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks")
    X = DATA.X_train + comm.rank
    with pytest.raises(CollectiveError) as error:
        train(mlp(), X, DATA.y_train, get_optimizer("sgd", lr=0.1), comm, max_steps=1)
    assert "data (replicated)" in str(error.value) and "rank 1" in str(error.value)


@pytest.mark.mpi
@pytest.mark.many_ranks
@pytest.mark.timeout(60)
@pytest.mark.parametrize("holders", ["last rank", "every rank"])
@pytest.mark.parametrize("where, bad", [("X_local", np.nan), ("X_local", np.inf), ("y_local", -np.inf),
                                        ("y_local", np.nan), ("params", np.nan)])
def test_nan_or_inf_in_the_data_is_refused_on_every_rank(comm, where, bad, holders):
    """As the ADMM solvers refuse it: the same CollectiveError on every rank, naming the rank and the array,
    before any step (it used to train to a NaN loss without a word)."""
    model = get_model("linear", n_features=DATA.n_features)  # a regression: float targets
    X, y, params = DATA.X_train.copy(), DATA.y_train.astype(np.float64), np.zeros(model.n_params)
    holder = comm.size - 1
    if holders == "every rank" or comm.rank == holder:
        {"X_local": X[7], "y_local": y[7:8], "params": params[3:4]}[where][-1] = bad
    with pytest.raises(CollectiveError) as error:
        train(model, X, y, get_optimizer("sgd", lr=0.1), comm, params=params, max_steps=1)
    message = str(error.value)
    named = f"rank {holder}:" if holders == "last rank" or comm.size == 1 else f"ranks 0-{holder}:"
    assert message.startswith(named) and f"{where}" in message and "contains NaN or inf" in message, message
    assert len(set(comm.allgather(message))) == 1


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_log_is_printed_by_rank_zero_only(comm, capsys):
    run(comm, verbose=True, log_every=4)
    printed = capsys.readouterr().out
    if comm.rank == 0:
        assert "mpiopt data-parallel training" in printed
        assert "status:        finished (max_steps) after 8 steps" in printed
    else:
        assert printed == ""


def logistic_problem(rows=2000, features=500):
    """Seeded logistic-regression data, the same on every rank."""
    stream = random_stream(0, "test-train-logistic")
    X = stream.standard_normal((rows, features))
    truth = stream.standard_normal(features) * (stream.random(features) < 0.1)
    y = (X @ truth + 0.5 * stream.standard_normal(rows) > 0).astype(np.int64)
    return get_model("logistic", n_features=features, alpha=1e-2), X, y


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_top1_percent_and_sign_with_error_feedback_reach_the_uncompressed_loss(comm):
    model, X, y = logistic_problem()
    results = {compressor: train(model, X, y, get_optimizer("sgd", lr=0.2), comm, epochs=400, batch_size=y.size,
                                 compressor=compressor, compressor_options=options, error_feedback=True)
               for compressor, options in ((None, None), ("topk", {"ratio": 0.01}), ("sign", None))}
    exact = results[None]
    for compressor in ("topk", "sign"):
        result = results[compressor]
        assert result.steps == exact.steps == 400 and result.info["compressor"] == compressor
        assert abs(result.loss - exact.loss) <= 0.01 * exact.loss, (compressor, result.loss, exact.loss)
        if comm.size > 1:
            assert sum(result.history["bytes_sent"]) < 0.05 * sum(exact.history["bytes_sent"])


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_resumed_compressed_training_keeps_each_bucket_residual(comm, tmp_path):
    model, X, y = logistic_problem(rows=400, features=300)
    path = f"{shared_folder(comm, tmp_path)}/compressed.npz"
    settings = dict(epochs=30, batch_size=100, compressor="topk", compressor_options={"ratio": 0.05},
                    bucket_bytes=1024)
    straight = train(model, X, y, get_optimizer("sgd", lr=0.1), comm, **settings)
    assert straight.info["buckets"]["count"] == 3
    first = train(model, X, y, get_optimizer("sgd", lr=0.1), comm, max_steps=13, checkpoint=path, **settings)
    assert first.status == "finished" and first.info["stop"] == "max_steps"
    resumed = train(model, X, y, get_optimizer("sgd", lr=0.1), comm, checkpoint=path, **settings)
    assert resumed.info["resumed_at"] == 13 and np.array_equal(resumed.params, straight.params)
    assert resumed.history["bytes_sent"] == straight.history["bytes_sent"]
