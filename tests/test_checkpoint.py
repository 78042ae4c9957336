"""Checkpoints that cannot be read or written fail alike on every rank; the fingerprint pins the problem down.

Each failure used to reach rank 0 only, leaving the other ranks waiting forever;
the timeouts turn such a hang into a failure.
"""
import errno
import functools
import io
import os
import zipfile

import numpy as np
import pytest
from mpi4py import MPI

from conftest import error_everywhere
from mpiopt.admm import solve as solve_with_defaults

from mpiopt.admm.engine import ConsensusADMM
from mpiopt.core import CollectiveError

# These tests are about the full solver's checkpoints (its file layout, the corruptions it must refuse); the
# working sets' checkpoints, on the same core Checkpointer, are tested in test_admm_workingset.py.
solve = functools.partial(solve_with_defaults, working_set=False)


def problem(comm, seed=3, rows=40, n=6):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((rows * comm.size, n))
    b = A @ rng.standard_normal(n) + 0.1 * rng.standard_normal(rows * comm.size)
    return A[comm.rank::comm.size], b[comm.rank::comm.size]


def shared_folder(comm, tmp_path_factory, name):
    return comm.bcast(str(tmp_path_factory.mktemp(name)) if comm.rank == 0 else None)


def truncated(data):
    return data[:len(data) // 2]


def bad_crc(data):
    start = data.index(b"\x93NUMPY", data.index(b"z.npy")) + 130  # inside z's values, past its 128-byte header
    flipped = bytearray(data)
    flipped[start] ^= 0xFF
    return bytes(flipped)


def without(entry):
    def rewrite(data):
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
            for item in source.infolist():
                if item.filename != entry:
                    target.writestr(item, source.read(item.filename))
        return out.getvalue()
    return rewrite


def garbage(data):
    return b"not a checkpoint at all\n" * 10


CORRUPTIONS = [(truncated, ""), (bad_crc, "Bad CRC"), (without("z.npy"), "entries z are missing"),
               (without("rank0_u.npy"), "entries rank0_u are missing"), (without("meta.npy"), "no 'meta' entry"),
               (garbage, "")]


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("corrupt, detail", CORRUPTIONS, ids=[c[0].__name__ if c[0].__name__ != "rewrite" else
                                                              f"without-{i}" for i, c in enumerate(CORRUPTIONS)])
def test_unreadable_checkpoint_raises_the_same_error_on_every_rank_and_is_left_untouched(
        comm, tmp_path_factory, corrupt, detail):
    A, b = problem(comm)
    path = os.path.join(shared_folder(comm, tmp_path_factory, "corrupt"), "state.npz")
    solve(A, b, "squared", "l1", 1.0, comm, checkpoint=path, max_iter=30, eps_abs=0, eps_rel=0)
    if comm.rank == 0:
        with open(path, "rb") as stream:
            damaged = corrupt(stream.read())
        with open(path, "wb") as stream:
            stream.write(damaged)
    comm.Barrier()
    error = error_everywhere(comm, lambda: solve(A, b, "squared", "l1", 1.0, comm, checkpoint=path, max_iter=60))
    assert f"cannot read checkpoint {path}" in str(error) or "is not an mpiopt ADMM checkpoint" in str(error)
    assert detail in str(error)
    if comm.rank == 0:
        with open(path, "rb") as stream:
            assert stream.read() == damaged, "a checkpoint that cannot be read must be left as it is"


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_checkpoint_in_a_folder_that_is_a_file_fails_before_the_first_iteration(comm, tmp_path_factory, monkeypatch):
    A, b = problem(comm)
    folder = shared_folder(comm, tmp_path_factory, "notafolder")
    if comm.rank == 0:
        with open(os.path.join(folder, "plain-file"), "w") as stream:
            stream.write("x")
    comm.Barrier()
    path = os.path.join(folder, "plain-file", "state.npz")

    def never(*args, **kwargs):
        raise AssertionError("the solver started iterating although its checkpoint cannot be written")
    monkeypatch.setattr(ConsensusADMM, "solve", never)
    error = error_everywhere(comm, lambda: solve(A, b, "squared", "l1", 1.0, comm, checkpoint=path))
    assert f"cannot write checkpoint {path}" in str(error) and "is not a folder" in str(error)
    assert set(error.problems) == {0}


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_checkpoint_write_failing_mid_run_reaches_every_rank(comm, tmp_path_factory, monkeypatch):
    A, b = problem(comm)
    path = os.path.join(shared_folder(comm, tmp_path_factory, "diskfull"), "state.npz")
    if comm.rank == 0:
        def full_disk(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr("mpiopt.core.checkpoint.write_atomic", full_disk)
    error = error_everywhere(comm, lambda: solve(A, b, "squared", "l1", 1.0, comm, checkpoint=path,
                                                 checkpoint_every=3, eps_abs=0, eps_rel=0, max_iter=20))
    assert f"cannot write checkpoint {path}: [Errno {errno.ENOSPC}] No space left on device" in str(error)
    assert set(error.problems) == {0}
    assert not os.path.exists(path)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_checkpoint_through_a_symlink_writes_its_target(comm, tmp_path_factory):
    A, b = problem(comm)
    folder = shared_folder(comm, tmp_path_factory, "link")
    link, target = os.path.join(folder, "state.npz"), os.path.join(folder, "real-state.npz")
    if comm.rank == 0:
        os.symlink("real-state.npz", link)
    comm.Barrier()
    first = solve(A, b, "squared", "l1", 1.0, comm, checkpoint=link, max_iter=5, eps_abs=0, eps_rel=0)
    assert os.path.islink(link) and os.path.isfile(target)
    resumed = solve(A, b, "squared", "l1", 1.0, comm, checkpoint=link, max_iter=8, eps_abs=0, eps_rel=0)
    assert first.iterations == 5 and resumed.info["resumed_at"] == 5 and resumed.iterations == 8


def refused(comm, call):
    error = error_everywhere(comm, call)
    assert "belongs to another problem" in str(error)
    return error


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_fingerprint_refuses_a_checkpoint_of_a_slightly_different_problem(comm, tmp_path_factory):
    A, b = problem(comm)
    folder = shared_folder(comm, tmp_path_factory, "fingerprint")
    lam = 1.2345678
    path = f"{folder}/lasso.npz"
    converged = solve(A, b, "squared", "l1", lam, comm, checkpoint=path)
    assert converged.status == "converged"
    error = refused(comm, lambda: solve(A, b, "squared", "l1", lam * 1.0004, comm, checkpoint=path))
    assert repr(lam * 1.0004) in str(error), "the parameters are recorded at full precision"
    refused(comm, lambda: solve(A, b, "squared", "l1", np.nextafter(lam, 2.0), comm, checkpoint=path))
    refused(comm, lambda: solve(A, b, "squared", "elastic_net", lam, comm, checkpoint=path, l1_ratio=0.9))

    path = f"{folder}/huber.npz"
    solve(A, b, "huber", "l1", 0.1, comm, delta=1.0, checkpoint=path)
    refused(comm, lambda: solve(A, b, "huber", "l1", 0.1, comm, delta=1.5, checkpoint=path))

    path = f"{folder}/groups.npz"
    groups = [0, 0, 1, 1, 2, 2]
    solve(A, b, "squared", "group_lasso", 0.5, comm, groups=groups, checkpoint=path)
    refused(comm, lambda: solve(A, b, "squared", "group_lasso", 0.5, comm, groups=[0, 1, 0, 1, 2, 2],
                                checkpoint=path))

    path = f"{folder}/box.npz"
    solve(A, b, "squared", "box", None, comm, lower=-0.5, upper=0.5, checkpoint=path)
    refused(comm, lambda: solve(A, b, "squared", "box", None, comm, lower=-0.5, upper=0.5000001, checkpoint=path))

    same = solve(A, b, "squared", "l1", lam, comm, checkpoint=f"{folder}/lasso.npz")
    assert same.info["resumed_at"] == converged.iterations and np.array_equal(same.x, converged.x)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_fingerprint_tells_sparse_shards_with_the_same_values_apart(comm, tmp_path_factory):
    import scipy.sparse
    folder = shared_folder(comm, tmp_path_factory, "sparse")
    dense = np.zeros((20, 5))
    dense[np.arange(20), np.arange(20) % 5] = 1.0 + comm.rank
    moved = np.roll(dense, 1, axis=1)  # the same stored values, in other columns
    b = np.linspace(-1.0, 1.0, 20)
    path = f"{folder}/state.npz"
    solve(scipy.sparse.csr_matrix(dense), b, "squared", "l1", 0.1, comm, checkpoint=path, max_iter=5)
    refused(comm, lambda: solve(scipy.sparse.csr_matrix(moved), b, "squared", "l1", 0.1, comm, checkpoint=path,
                                max_iter=5))


def test_a_checkpoint_of_the_old_format_is_refused_with_a_clear_message(tmp_path):
    A, b = problem(MPI.COMM_SELF)
    path = tmp_path / "state.npz"
    solve(A, b, "squared", "l1", 1.0, MPI.COMM_SELF, checkpoint=str(path), max_iter=3)
    with np.load(path, allow_pickle=False) as stored:
        arrays = {key: stored[key] for key in stored.files}
    arrays["meta"] = np.array(str(arrays["meta"]).replace("mpiopt-admm-checkpoint-2", "mpiopt-admm-checkpoint-1"))
    np.savez(path, **arrays)
    with pytest.raises(CollectiveError, match="has format mpiopt-admm-checkpoint-1; this mpiopt reads"):
        solve(A, b, "squared", "l1", 1.0, MPI.COMM_SELF, checkpoint=str(path), max_iter=3)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_checkpoint_with_anderson_memory_of_the_wrong_shape_is_refused_everywhere(comm, tmp_path_factory):
    A, b = problem(comm)
    path = os.path.join(shared_folder(comm, tmp_path_factory, "anderson"), "state.npz")
    solve(A, b, "squared", "l1", 1.0, comm, checkpoint=path, max_iter=12, eps_abs=0, eps_rel=0, rho=50.0,
          adaptive_rho="none")
    if comm.rank == 0:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {key: stored[key] for key in stored.files}
        assert "rank0_aa_residuals" in arrays, "the run must have Anderson memory to damage"
        arrays["rank0_aa_residuals"] = arrays["rank0_aa_residuals"][:, :-1]
        np.savez(path, **arrays)
    comm.Barrier()
    error = error_everywhere(comm, lambda: solve(A, b, "squared", "l1", 1.0, comm, checkpoint=path, max_iter=30,
                                                 rho=50.0, adaptive_rho="none"))
    assert f"cannot read checkpoint {path}" in str(error) and "aa_residuals" in str(error)
