"""Per-rank loading: each rank reads only its rows, and the rows together are the whole file."""
import numpy as np
import pytest
import scipy.sparse
from mpi4py import MPI
from sklearn.datasets import dump_svmlight_file, load_svmlight_file

from mpiopt.core import CollectiveError
from mpiopt.data import load_rows, read_svmlight_rows, split_file

pytestmark = pytest.mark.many_ranks  # each rank's byte and row ranges change with the rank count


def shared_folder(comm, factory, name):
    return comm.bcast(str(factory.mktemp(name)) if comm.rank == 0 else None)


def gathered(comm, A, b):
    """All ranks' rows, in rank order, on every rank."""
    parts = comm.allgather((A.toarray() if scipy.sparse.issparse(A) else np.asarray(A), np.asarray(b)))
    return np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def sample(rows=57, columns=9, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((rows, columns))
    A[rng.random(A.shape) < 0.6] = 0.0
    return A, rng.integers(0, 2, rows).astype(float)


@pytest.mark.mpi
@pytest.mark.parametrize("zero_based", [False, True])
def test_svmlight_rows_over_ranks_are_the_whole_file(comm, tmp_path_factory, zero_based):
    folder = shared_folder(comm, tmp_path_factory, "svm")
    A, y = sample()
    A[:, -1] = 1.0  # the last column is used, so the column count is known from the file
    path = f"{folder}/data.svm"
    if comm.rank == 0:
        dump_svmlight_file(A, y, path, zero_based=zero_based, comment="made by the test")
    comm.Barrier()
    local_A, local_y = read_svmlight_rows(path, comm, zero_based=zero_based)
    assert scipy.sparse.isspmatrix_csr(local_A) or scipy.sparse.issparse(local_A)
    whole_A, whole_y = gathered(comm, local_A, local_y)
    reference_A, reference_y = load_svmlight_file(path, zero_based=zero_based)
    assert np.array_equal(whole_A, reference_A.toarray()) and np.array_equal(whole_y, reference_y)
    assert abs(local_A.shape[0] - A.shape[0] / comm.size) <= 3, "rows split near-evenly"


@pytest.mark.mpi
def test_svmlight_parse_error_is_reported_on_every_rank(comm, tmp_path_factory):
    folder = shared_folder(comm, tmp_path_factory, "bad")
    path = f"{folder}/bad.svm"
    if comm.rank == 0:
        with open(path, "w") as stream:
            stream.write("1 1:0.5 2:1\n" * 5 + "0 3:x\n" + "1 1:2\n" * 5)
    comm.Barrier()
    with pytest.raises(CollectiveError, match="cannot parse line b'0 3:x"):
        read_svmlight_rows(path, comm)


@pytest.mark.mpi
def test_hdf5_rows_over_ranks_are_the_whole_file(comm, tmp_path_factory):
    h5py = pytest.importorskip("h5py")
    folder = shared_folder(comm, tmp_path_factory, "h5")
    A, b = sample(31, 4)
    path = f"{folder}/data.h5"
    if comm.rank == 0:
        with h5py.File(path, "w") as handle:
            handle["A"], handle["b"] = A, b
    comm.Barrier()
    whole = gathered(comm, *load_rows(path, comm))
    assert np.array_equal(whole[0], A) and np.array_equal(whole[1], b)
    with pytest.raises(CollectiveError, match="no dataset 'C'"):
        load_rows(path, comm, keys=("A", "C"))


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["npz", "svm"])
def test_split_file_shards_load_back_for_the_same_rank_count(comm, tmp_path_factory, kind):
    folder = shared_folder(comm, tmp_path_factory, f"split-{kind}")
    A, b = sample(40, 6)
    A[:, -1] = 1.0
    source = f"{folder}/data.{kind}"
    if comm.rank == 0:
        if kind == "npz":
            np.savez(source, A=A, b=b)
        else:
            dump_svmlight_file(A, b, source)
        split_file(source, comm.size, f"{folder}/shards")
        split_file(source, comm.size + 1, f"{folder}/other")
    comm.Barrier()
    if kind == "svm":  # text holds 16 significant digits: compare with what the file says
        A, b = load_svmlight_file(source)
        A = A.toarray()
    whole = gathered(comm, *load_rows(f"{folder}/shards", comm))
    assert np.array_equal(whole[0], A) and np.array_equal(whole[1], b)
    with pytest.raises(CollectiveError, match=f"was not split for {comm.size} ranks"):
        load_rows(f"{folder}/other", comm)


@pytest.mark.mpi
def test_lasso_on_svmlight_rows_matches_dense(comm, tmp_path_factory):
    from mpiopt.admm import lasso
    folder = shared_folder(comm, tmp_path_factory, "fit")
    A, _ = sample(80, 7, seed=3)
    A[:, -1] = 1.0
    b = A @ np.arange(7.0) + 0.1
    path = f"{folder}/fit.svm"
    if comm.rank == 0:
        dump_svmlight_file(A, b, path)
    comm.Barrier()
    local_A, local_b = load_rows(path, comm)
    sparse = lasso(local_A, local_b, 0.5, comm, eps_abs=1e-10, eps_rel=1e-10)
    dense = lasso(A, b, 0.5, MPI.COMM_SELF, eps_abs=1e-10, eps_rel=1e-10)
    assert np.allclose(sparse.x, dense.x, atol=1e-7)
