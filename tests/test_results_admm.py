"""ADMM's results in the shared vocabulary (mpiopt.core.result): solution, iterations, a status of STATUSES with
its detail in info["stop"], JSON and a plot, for a converged, a cut, an interrupted and a time-limited solve and
for a regularization path, at any rank count."""
import io
import json
import os
import signal

import numpy as np
import pytest

from conftest import shard_bounds
from mpiopt.admm import solve
from mpiopt.admm.engine import ConsensusADMM
from mpiopt.admm.path import PathResult, regularization_path
from mpiopt.core.result import STATUSES, Result

PNG = b"\x89PNG\r\n\x1a\n"


def data(comm, m=90, n=30, seed=3):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, n))
    b = A[:, :4] @ np.array([2.0, -1.0, 0.5, 1.5]) + 0.1 * rng.standard_normal(m)
    start, stop = shard_bounds(m, comm, "uneven")
    return A[start:stop], b[start:stop]


def assert_core_fields(result, status, stop):
    assert isinstance(result, Result) and result.status in STATUSES
    assert (result.status, result.info["stop"]) == (status, stop)
    assert result.solution is result.x and result.iterations == len(result.history["iter"])
    assert set(result.to_dict()) >= {"status", "history", "timings", "info", "x", "iterations"}


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("working_set", [False, True])
def test_a_converged_solve_says_which_rule_was_met(comm, working_set):
    A, b = data(comm)
    result = solve(A, b, "squared", "l1", lam_ratio=0.1, comm=comm, working_set=working_set)
    assert_core_fields(result, "converged", "gap_tol" if working_set else "tolerances")
    gap = solve(A, b, "squared", "l1", lam_ratio=0.1, comm=comm, working_set=False, gap_tol=1e-3,
                eps_abs=0.0, eps_rel=0.0)
    assert_core_fields(gap, "converged", "gap_tol")


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("working_set", [False, True])
def test_a_solve_cut_at_max_iter_reports_max_iterations(comm, working_set):
    A, b = data(comm)
    result = solve(A, b, "squared", "l1", lam_ratio=0.01, comm=comm, working_set=working_set, max_iter=7,
                   eps_abs=1e-14, eps_rel=1e-14)
    assert_core_fields(result, "max_iterations", "max_iter")
    assert result.iterations == 7 and not result.converged


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("working_set", [False, True])
def test_a_solve_past_its_time_limit_reports_time_limit(comm, working_set):
    A, b = data(comm)
    result = solve(A, b, "squared", "l1", lam_ratio=0.01, comm=comm, working_set=working_set, time_limit=1e-9,
                   eps_abs=1e-14, eps_rel=1e-14)
    assert result.status == "time_limit" and result.info["stop"] == "time_limit"
    assert comm.allgather((result.status, result.iterations)) == [(result.status, result.iterations)] * comm.size


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_sigterm_ends_a_solve_as_interrupted_with_a_checkpoint(comm, tmp_path, monkeypatch):
    relax = ConsensusADMM.relax

    def term_at_the_third(self, x, z):
        if self.iteration == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return relax(self, x, z)

    monkeypatch.setattr(ConsensusADMM, "relax", term_at_the_third)
    path = comm.bcast(str(tmp_path), root=0) + "/term.ckpt.npz"
    A, b = data(comm)
    options = dict(lam_ratio=0.01, comm=comm, working_set=False, eps_abs=1e-14, eps_rel=1e-14, max_iter=40)
    stopped = solve(A, b, "squared", "l1", checkpoint=path, **options)
    assert_core_fields(stopped, "interrupted", "signal")
    assert stopped.iterations == 3 and os.path.exists(path)
    monkeypatch.setattr(ConsensusADMM, "relax", relax)
    resumed = solve(A, b, "squared", "l1", checkpoint=path, **options)
    straight = solve(A, b, "squared", "l1", **options)
    assert resumed.status == "max_iterations" and np.array_equal(resumed.x, straight.x)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_path_has_the_core_fields(comm, tmp_path):
    A, b = data(comm)
    stream = io.StringIO()
    path = regularization_path(A, b, "squared", "l1", comm, n_lams=4, lam_min_ratio=0.05, verbose=True,
                               log_stream=stream)
    assert isinstance(path, PathResult) and path.status == "converged" and path.info["not_converged"] == []
    assert path.solution is path.coefs and path.coefs.shape == (4, 30)
    assert path.total_iterations == sum(r.iterations for r in path.results) == int(path.iterations.sum())
    assert path.history["lam"] == path.lams.tolist() and len(path.history["objective"]) == 4
    assert path.timings["total"] >= path.timings["setup"]
    assert ("mpiopt" in stream.getvalue()) == (comm.rank == 0)
    if comm.rank == 0:
        target = tmp_path / "path.json"
        path.save_json(str(target))
        saved = json.loads(target.read_text())
        assert saved["status"] == "converged" and saved["statuses"] == ["converged"] * 4 and "results" not in saved
        assert np.allclose(saved["coefs"], path.coefs)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_path_that_does_not_converge_everywhere_says_where(comm):
    A, b = data(comm)
    path = regularization_path(A, b, "squared", "l1", comm, n_lams=3, lam_min_ratio=0.01, working_set=False,
                               max_iter=3, eps_abs=1e-14, eps_rel=1e-14)
    assert path.status == "max_iterations" and path.info["stop"] == "max_iter"
    assert path.info["not_converged"] == [k for k, status in enumerate(path.statuses) if status != "converged"]


def test_results_plot_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from mpi4py import MPI
    A, b = data(MPI.COMM_SELF)
    result = solve(A, b, "squared", "l1", lam_ratio=0.1, comm=MPI.COMM_SELF, working_set=False, gap_tol=1e-8,
                   verbose=True, log_stream=io.StringIO())
    assert [panel["title"] for panel in result.plot_panels()] == ["residuals", "objective", "duality gap"]
    result.plot(str(tmp_path / "solve.png"), title="lasso")
    path = regularization_path(A, b, "squared", "l1", MPI.COMM_SELF, n_lams=3)
    path.plot(str(tmp_path / "path.png"))
    for name in ("solve.png", "path.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG
