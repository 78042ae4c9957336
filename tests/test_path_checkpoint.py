"""A regularization path checkpoints and resumes: interrupted by SIGTERM at any weight and
resumed, it gives the path of a run without interruption, on every rank, at several rank counts."""
import os
import signal

import numpy as np
import pytest

from mpiopt.admm import solver
from mpiopt.admm.path import regularization_path
from mpiopt.core.comm import CollectiveError
from mpiopt.core.partition import row_range
from mpiopt.data.synthetic import lasso_rows

ROWS, COLUMNS = 1500, 40


def shard(comm, rows=ROWS, n=COLUMNS):
    start, stop = row_range(rows, comm.rank, comm.size)
    A, b = lasso_rows(rows, n, 0, rows)
    return A[start:stop], b[start:stop]


def folder(comm, tmp_path_factory):
    return comm.bcast(str(tmp_path_factory.mktemp("path")) if comm.rank == 0 else None)


def terminating_at(monkeypatch, solve_number):
    """Send this process SIGTERM as its ``solve_number``-th weight's solve starts (every rank alike)."""
    original, calls = solver.Problem.solve, [0]

    def solve(self, *args, **keywords):
        calls[0] += 1
        if calls[0] == solve_number:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, *args, **keywords)
    monkeypatch.setattr(solver.Problem, "solve", solve)


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("loss, extra", [("squared", {}), ("logistic", {"working_set": False})])
def test_a_path_interrupted_at_any_weight_resumes_to_the_uninterrupted_path(comm, tmp_path_factory, monkeypatch,
                                                                             loss, extra):
    A, b = shard(comm)
    if loss == "logistic":
        b = (b > 0).astype(float)
    where = folder(comm, tmp_path_factory)
    settings = dict(n_lams=5, eps_abs=1e-8, eps_rel=1e-8, **extra)
    reference = regularization_path(A, b, loss, comm=comm, checkpoint=os.path.join(where, "ref.npz"), **settings)
    path = os.path.join(where, "path.npz")
    for solve_number in (1, 4):  # SIGTERM as weight 0's solve starts, then (resumed there) as weight 3's
        with monkeypatch.context() as patch:
            terminating_at(patch, solve_number)
            interrupted = regularization_path(A, b, loss, comm=comm, checkpoint=path, **settings)
        assert interrupted.status == "interrupted" and interrupted.statuses[-1] == "interrupted"
        assert os.path.exists(f"{path}.weight{len(interrupted.lams) - 1}.npz"), "the weight in progress"
    assert len(interrupted.lams) == 4, "weights 0-2 recorded, weight 3 interrupted"
    resumed = regularization_path(A, b, loss, comm=comm, checkpoint=path, **settings)
    assert resumed.status == reference.status == "converged"
    assert np.array_equal(resumed.lams, reference.lams) and np.array_equal(resumed.coefs, reference.coefs)
    assert np.array_equal(resumed.objectives, reference.objectives)
    assert np.array_equal(resumed.iterations, reference.iterations) and resumed.statuses == reference.statuses
    assert resumed.history["relative_gap"] == reference.history["relative_gap"]
    if comm.rank == 0:
        assert sorted(os.listdir(where)) == ["path.npz", "ref.npz"], "the weights' own files are removed"
    unchecked = regularization_path(A, b, loss, comm=comm, **settings)
    assert np.allclose(unchecked.coefs, reference.coefs, atol=1e-6), "the same path as without checkpoints"


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_path_file_of_other_weights_or_data_is_refused(comm, tmp_path_factory):
    A, b = shard(comm)
    path = os.path.join(folder(comm, tmp_path_factory), "p.npz")
    regularization_path(A, b, comm=comm, checkpoint=path, n_lams=3)
    with pytest.raises(CollectiveError, match="belongs to another problem: rank 0's lams was"):
        regularization_path(A, b, comm=comm, checkpoint=path, n_lams=4)
    with pytest.raises(CollectiveError, match="belongs to another problem: rank 0's checksum was"):
        regularization_path(A, 2 * b, comm=comm, checkpoint=path, lams=regularization_path(
            A, b, comm=comm, checkpoint=path, n_lams=3).lams)
