import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.core import CollectiveError
from mpiopt.data import make_lasso, read_npz_range, read_npz_rows, row_range
from mpiopt.data.synthetic import lasso_rows

from conftest import gather_messages


@pytest.mark.parametrize("total, size", [(0, 1), (1, 3), (10, 3), (7, 7), (5, 8), (100000, 4)])
def test_row_ranges_cover_all_rows_once_and_differ_by_at_most_one(total, size):
    ranges = [row_range(total, rank, size) for rank in range(size)]
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(size - 1))
    counts = [stop - start for start, stop in ranges]
    assert max(counts) - min(counts) <= 1


def test_synthetic_rows_do_not_depend_on_how_they_are_split():
    m, n = 9000, 7  # spans three generator blocks
    A, b = lasso_rows(m, n, 0, m, seed=3)
    for start, stop in [(0, 1), (4095, 4097), (5000, 9000), (8999, 9000), (10, 10)]:
        part_A, part_b = lasso_rows(m, n, start, stop, seed=3)
        assert np.array_equal(part_A, A[start:stop]) and np.array_equal(part_b, b[start:stop])
    A, b = lasso_rows(m, n, 0, m, seed=3, correlation=0.5)
    part_A, part_b = lasso_rows(m, n, 4000, 8200, seed=3, correlation=0.5)
    assert np.array_equal(part_A, A[4000:8200]) and np.array_equal(part_b, b[4000:8200])


def test_synthetic_problem_has_requested_sparsity_and_noise():
    A, b, x_true = make_lasso(4000, 200, density=0.1, noise=0.0, seed=1, comm=MPI.COMM_SELF)
    assert np.count_nonzero(x_true) == 20
    assert np.allclose(A @ x_true, b)
    assert abs(np.linalg.norm(A, axis=0).mean() - 1.0) < 0.05


def test_correlated_design_has_the_requested_column_correlation():
    A, _, _ = make_lasso(20000, 30, correlation=0.6, seed=2, comm=MPI.COMM_SELF)
    correlations = np.corrcoef(A, rowvar=False)[np.triu_indices(30, 1)]
    assert abs(correlations.mean() - 0.6) < 0.02
    A0, _, _ = make_lasso(20000, 30, correlation=0.0, seed=2, comm=MPI.COMM_SELF)
    assert abs(np.corrcoef(A0, rowvar=False)[np.triu_indices(30, 1)].mean()) < 0.02


def test_make_lasso_rejects_bad_shape_collectively():
    with pytest.raises(CollectiveError, match="m must be an integer >= 1"):
        make_lasso(0, 5, comm=MPI.COMM_SELF)
    with pytest.raises(CollectiveError, match=r"correlation must be in \[0, 1\), got 1.0"):
        make_lasso(10, 5, correlation=1.0, comm=MPI.COMM_SELF)


@pytest.fixture(params=["savez", "savez_compressed", "fortran"])
def npz_file(request, tmp_path):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((13, 5)).astype(np.float32)
    b = rng.standard_normal(13)
    path = tmp_path / "data.npz"
    if request.param == "fortran":
        np.savez(path, A=np.asfortranarray(A), b=b)
    else:
        getattr(np, request.param)(path, A=A, b=b)
    return path, A, b


@pytest.mark.parametrize("start, stop", [(0, 13), (0, 0), (3, 9), (12, 13)])
def test_npz_row_range_reads_exactly_those_rows(npz_file, start, stop):
    path, A, b = npz_file
    part_A, part_b = read_npz_range(path, ("A", "b"), start, stop)
    assert part_A.dtype == np.float32 and np.array_equal(part_A, A[start:stop])
    assert np.array_equal(part_b, b[start:stop])


def test_npz_refuses_object_arrays_and_missing_keys(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, A=np.array([[1, None]], dtype=object), b=np.zeros(1))
    with pytest.raises(CollectiveError, match="object dtype"):
        read_npz_rows(path, comm=MPI.COMM_SELF)
    good = tmp_path / "good.npz"
    np.savez(good, A=np.zeros((2, 2)), b=np.zeros(2))
    with pytest.raises(CollectiveError, match="no array 'C' in the file .it holds A, b."):
        read_npz_rows(good, ("A", "C"), comm=MPI.COMM_SELF)


def test_npz_refuses_row_counts_that_disagree(tmp_path):
    path = tmp_path / "mismatch.npz"
    np.savez(path, A=np.zeros((4, 2)), b=np.zeros(3))
    with pytest.raises(CollectiveError, match="same number of rows"):
        read_npz_rows(path, comm=MPI.COMM_SELF)


@pytest.mark.mpi
@pytest.mark.parametrize("broken", ["features", "labels"])
def test_load_dataset_refuses_nan_on_every_rank_before_casting_the_labels(comm, broken):
    from mpiopt.core.registry import register, unregister
    from mpiopt.data import load_dataset

    def with_nan():
        X = np.arange(40.0).reshape(20, 2)
        y = np.arange(20.0) % 3
        (X if broken == "features" else y)[7] = np.nan
        return X, y
    register("dataset", "test-with-nan", with_nan)
    try:
        with pytest.raises(CollectiveError) as caught:
            load_dataset("test-with-nan", comm)
    finally:
        unregister("dataset", "test-with-nan")
    message = f"data set 'test-with-nan': {broken} contains NaN or inf"
    assert message in str(caught.value)
    assert set(gather_messages(comm, caught.value)) == {str(caught.value)}
