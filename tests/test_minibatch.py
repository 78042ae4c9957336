"""Training data: per-rank minibatches of one global sequence, and the bundled data sets, at any rank count."""
import sys

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.core import CollectiveError
from mpiopt.core.partition import row_range
from mpiopt.core.random import random_stream
from mpiopt.data import MinibatchSampler, load_dataset
from mpiopt.models import LogisticRegression
from mpiopt.optim import SGD

pytestmark = pytest.mark.many_ranks  # global batches split over any rank count


def gathered(comm, local):
    """Every rank's array, concatenated in rank order."""
    return np.concatenate(comm.allgather(local))


def expected_batches(n_samples, batch_size, seed, epochs, shuffle=True, drop_last=False):
    """The global batches, written from the definition (per-epoch permutations cut into batches)."""
    batches = []
    for epoch in range(epochs):
        order = random_stream(seed, "minibatch", epoch).permutation(n_samples) if shuffle else np.arange(n_samples)
        stop = n_samples - n_samples % batch_size if drop_last else n_samples
        batches += [order[start:min(start + batch_size, stop)] for start in range(0, stop, batch_size)]
    return batches


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("n_samples, batch_size, shuffle, drop_last",
                         [(23, 5, True, False), (23, 5, True, True), (12, 4, True, False), (7, 7, False, False),
                          (9, 2, False, True), (5, 12, True, False)])
def test_gathered_rank_batches_equal_the_single_process_sequence(comm, n_samples, batch_size, shuffle, drop_last):
    sampler = MinibatchSampler(n_samples, batch_size, seed=4, comm=comm, shuffle=shuffle, drop_last=drop_last)
    single = MinibatchSampler(n_samples, batch_size, seed=4, comm=MPI.COMM_SELF, shuffle=shuffle,
                              drop_last=drop_last)
    expected = expected_batches(n_samples, batch_size, 4, epochs=3, shuffle=shuffle, drop_last=drop_last)
    assert len(sampler) == single.steps_per_epoch == len(expected) // 3
    for step, batch in enumerate(expected):
        local = sampler.batch(step)
        assert local.dtype == np.int64
        assert np.array_equal(gathered(comm, local), batch)
        assert np.array_equal(single.batch(step), batch) and np.array_equal(sampler.global_batch(step), batch)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_batches_smaller_than_the_rank_count_leave_the_last_ranks_empty(comm):
    sampler = MinibatchSampler(10, 1, seed=0, comm=comm)
    for step in range(12):
        local = sampler.batch(step)
        assert local.size == (comm.rank == 0)
        assert np.array_equal(gathered(comm, local), sampler.global_batch(step))
    small = MinibatchSampler(10, 3, seed=0, comm=comm)  # batches of 3, 3, 3, 1
    for step, global_size in enumerate([3, 3, 3, 1]):
        start, stop = row_range(global_size, comm.rank, comm.size)
        assert small.batch(step).size == stop - start


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("drop_last", [False, True])
def test_each_epoch_visits_every_sample_once_in_a_new_order(comm, drop_last):
    sampler = MinibatchSampler(22, 4, seed=9, comm=comm, drop_last=drop_last)
    assert sampler.steps_per_epoch == (5 if drop_last else 6)
    orders = []
    for epoch in range(3):
        assert sampler.epoch == epoch
        visited = np.concatenate([gathered(comm, local) for local in sampler])
        assert visited.size == (20 if drop_last else 22) and np.unique(visited).size == visited.size
        if not drop_last:
            assert np.array_equal(np.sort(visited), np.arange(22))
        orders.append(visited)
    assert sampler.step == 3 * sampler.steps_per_epoch
    assert not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2])


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_resuming_mid_epoch_from_a_state_dict_continues_the_sequence(comm):
    uninterrupted = MinibatchSampler(30, 4, seed=2, comm=comm)
    reference = [local for _ in range(2) for local in uninterrupted]
    interrupted = MinibatchSampler(30, 4, seed=2, comm=comm)
    taken = []
    for local in interrupted:
        taken.append(local)
        if len(taken) == 5:
            break
    state = interrupted.state_dict()
    assert state == {"step": 5, "n_samples": 30, "batch_size": 4, "seed": 2, "shuffle": True, "drop_last": False}
    resumed = MinibatchSampler(30, 4, seed=2, comm=comm)
    resumed.load_state_dict({key: np.asarray(value) for key, value in state.items()})  # as np.load gives it back
    assert resumed.epoch == 0
    rest = list(resumed) + list(resumed)
    assert all(np.array_equal(a, b) for a, b in zip(taken + rest, reference, strict=True))


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_state_saved_at_one_rank_resumes_at_any_rank_count(comm):
    single = MinibatchSampler(17, 5, seed=6, comm=MPI.COMM_SELF)
    for _ in range(6):
        next(iter(single))
    resumed = MinibatchSampler(17, 5, seed=6, comm=comm)
    resumed.load_state_dict(single.state_dict())
    assert resumed.step == 6 and resumed.epoch == 1
    for local in resumed:
        assert np.array_equal(gathered(comm, local), single.global_batch(resumed.step - 1))


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_bad_sampler_arguments_raise_the_same_error_on_every_rank(comm):
    for arguments, message in [(dict(n_samples=0, batch_size=1), "n_samples must be an integer >= 1, got 0"),
                               (dict(n_samples=5, batch_size=2.5), "batch_size must be an integer >= 1, got 2.5"),
                               (dict(n_samples=5, batch_size=2, seed=-3), "seed must be an integer >= 0, got -3"),
                               (dict(n_samples=5, batch_size=6, drop_last=True), "drop_last with batch_size=6")]:
        with pytest.raises(CollectiveError, match=message) as caught:
            MinibatchSampler(**{"seed": 0, **arguments}, comm=comm)
        messages = comm.allgather(str(caught.value))
        assert all(text == messages[0] for text in messages)
    sampler = MinibatchSampler(5, 2, seed=0, comm=comm)
    with pytest.raises(CollectiveError, match="the saved batch_size=3 differs from this sampler's 2"):
        sampler.load_state_dict(dict(sampler.state_dict(), batch_size=3))
    with pytest.raises(ValueError, match="step must be an integer >= 0, got -1"):
        sampler.batch(-1)
    if comm.size > 1:
        with pytest.raises(CollectiveError, match=f"rank {comm.size - 1}: seed=1 differs from rank 0's 0"):
            MinibatchSampler(5, 2, seed=int(comm.rank == comm.size - 1), comm=comm)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_data_parallel_sgd_weighting_ranks_by_rows_equals_the_single_process_run(comm):
    data = load_dataset("breast_cancer", comm=comm)
    model = LogisticRegression(data.n_features, alpha=1e-3)

    def train(communicator, steps=25):
        sampler = MinibatchSampler(data.n_train, 3, seed=1, comm=communicator)  # 3 rows: some ranks idle
        optimizer, params = SGD(0.1, momentum=0.9), model.init_params(0)
        for step in range(steps):
            rows = sampler.batch(step)
            grad = model.loss_and_grad(params, data.X_train[rows], data.y_train[rows])[1]
            total = np.empty_like(grad)
            communicator.Allreduce(grad * rows.size, total)
            optimizer.step(params, total / sampler.global_batch(step).size)
        return params

    assert np.allclose(train(comm), train(MPI.COMM_SELF), rtol=1e-12, atol=1e-14)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, samples, features, classes", [("digits", 1797, 64, 10), ("breast_cancer", 569, 30, 2)])
def test_dataset_split_is_the_same_on_every_rank_and_at_any_rank_count(comm, name, samples, features, classes):
    data = load_dataset(name, comm=comm, seed=3)
    alone = load_dataset(name, comm=MPI.COMM_SELF, seed=3)
    assert (data.n_features, data.n_classes, data.n_train + data.n_test) == (features, classes, samples)
    assert data.n_test == round(0.25 * samples) and data.train_rows == (0, data.n_train)
    for field in ("X_train", "y_train", "X_test", "y_test"):
        mine = getattr(data, field)
        assert np.array_equal(mine, getattr(alone, field))
        assert all(np.array_equal(mine, other) for other in comm.allgather(mine))
    assert data.X_train.dtype == np.float64 and data.y_train.dtype == np.int64
    assert set(np.unique(data.y_train)) == set(range(classes))
    other_seed = load_dataset(name, comm=comm, seed=4)
    assert not np.array_equal(other_seed.y_train, data.y_train)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_sharded_dataset_rows_concatenate_to_the_whole_split(comm):
    whole = load_dataset("digits", comm=comm, test_fraction=0.3)
    shard = load_dataset("digits", comm=comm, test_fraction=0.3, shard=True)
    assert shard.train_rows == row_range(whole.n_train, comm.rank, comm.size)
    assert shard.test_rows == row_range(whole.n_test, comm.rank, comm.size)
    for field in ("X_train", "y_train", "X_test", "y_test"):
        assert np.array_equal(gathered(comm, getattr(shard, field)), getattr(whole, field))


def test_standardization_uses_the_training_statistics_and_keeps_the_raw_rows():
    from sklearn.datasets import load_breast_cancer
    X, y = load_breast_cancer(return_X_y=True)
    raw = load_dataset("breast_cancer", comm=MPI.COMM_SELF, standardize=False, seed=5)
    scaled = load_dataset("breast_cancer", comm=MPI.COMM_SELF, seed=5)
    rows = {row.tobytes(): label for row, label in zip(X, y)}
    together = np.vstack([raw.X_train, raw.X_test])
    assert len({row.tobytes() for row in together}) == len(rows)
    assert all(rows[row.tobytes()] == label for row, label in zip(together, np.concatenate([raw.y_train,
                                                                                          raw.y_test])))
    mean, scale = raw.X_train.mean(axis=0), raw.X_train.std(axis=0)
    assert np.allclose(scaled.X_train.mean(axis=0), 0, atol=1e-12) and np.allclose(scaled.X_train.std(axis=0), 1)
    assert np.allclose(scaled.X_test, (raw.X_test - mean) / scale)
    digits = load_dataset("digits", comm=MPI.COMM_SELF)
    constant = np.ptp(load_dataset("digits", comm=MPI.COMM_SELF, standardize=False).X_train, axis=0) == 0
    assert constant.any() and not np.any(digits.X_train[:, constant]) and np.all(np.isfinite(digits.X_test))


def test_bad_dataset_arguments_raise_collective_errors():
    with pytest.raises(CollectiveError, match="dataset must be one of digits, breast_cancer, got 'mnist'"):
        load_dataset("mnist", comm=MPI.COMM_SELF)
    with pytest.raises(CollectiveError, match=r"test_fraction must be in \(0, 1\), got 1.0"):
        load_dataset("digits", comm=MPI.COMM_SELF, test_fraction=1.0)
    with pytest.raises(CollectiveError, match="seed must be an integer >= 0, got 'a'"):
        load_dataset("digits", comm=MPI.COMM_SELF, seed="a")


def test_missing_scikit_learn_is_named_in_the_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(CollectiveError, match=r"cannot load data set 'digits': this data set ships with scikit-learn, "
                                              r"which is not installed \(pip install 'mpiopt\[sklearn\]'\)"):
        load_dataset("digits", comm=MPI.COMM_SELF)
