"""The ADMM logs a user reads: the working sets' banner names the BLAS threads (as the full solver's does), and
a resumed run's time line adds up (its parts are this run's, as the full solver's timings are)."""
import re

import numpy as np
import pytest

from conftest import shard_bounds
from mpiopt.admm import lasso
from mpiopt.core.threads import plan_blas_threads


def data(comm, rows=120, cols=40, seed=3):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((rows, cols))
    b = A[:, :4] @ np.array([2.0, -1.5, 1.0, 0.5]) + 0.1 * rng.standard_normal(rows)
    start, stop = shard_bounds(rows, comm, "uneven")
    return A[start:stop], b[start:stop]


def time_line(text):
    """(total, setup, gather, ADMM, gaps) of the working sets' footer line."""
    match = re.search(r"time: +([\d.]+) s \(setup ([\d.]+), gather ([\d.]+), ADMM ([\d.]+), gaps ([\d.]+)\)", text)
    assert match, text
    return [float(value) for value in match.groups()]


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("working_set", [True, False])
def test_the_log_names_the_blas_threads_of_both_solvers(comm, capsys, working_set):
    A, b = data(comm)
    result = lasso(A, b, comm=comm, lam_ratio=0.1, verbose=True, working_set=working_set)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("threads:")]
    expected = plan_blas_threads(None, comm).describe()  # the process's plan, as the solve made it
    if comm.rank == 0:
        assert lines == [f"threads:  {expected}"]
    assert result.info["blas_threads_reason"] == plan_blas_threads(None, comm).reason


@pytest.mark.mpi(min_size=1)
def test_a_resumed_working_set_run_times_this_run_only(comm, capsys, tmp_path_factory):
    """Cut by max_iter, resumed, then resumed once more when finished: each run's parts add up to at most its
    total, and the run that finds the problem already solved ran no ADMM iteration (0 s of ADMM)."""
    A, b = data(comm)
    folder = comm.bcast(str(tmp_path_factory.mktemp("ws_log")) if comm.rank == 0 else None)
    settings = dict(lam_ratio=0.05, gap_tol=1e-10, checkpoint=f"{folder}/state.npz", verbose=True)
    whole = lasso(A, b, comm=comm, lam_ratio=0.05, gap_tol=1e-10)
    assert whole.iterations >= 4
    capsys.readouterr()
    lasso(A, b, comm=comm, max_iter=whole.iterations // 2, **settings)
    capsys.readouterr()
    resumed = lasso(A, b, comm=comm, **settings)
    resumed_text = capsys.readouterr().out
    again = lasso(A, b, comm=comm, **settings)
    again_text = capsys.readouterr().out
    assert resumed.info["resumed_at"] == whole.iterations // 2 and resumed.iterations == whole.iterations
    assert resumed.info["iterations_run"] == whole.iterations - whole.iterations // 2
    assert again.info["iterations_run"] == 0 and again.timings["solve"] == 0.0
    for result in (resumed, again):
        parts = result.timings["setup"] + result.timings["gather"] + result.timings["solve"] + result.timings["gap"]
        assert parts <= result.timings["total"] * (1 + 1e-9)
    if comm.rank == 0:
        for text in (resumed_text, again_text):
            total, *parts = time_line(text)
            assert sum(parts) <= total + 0.003, text  # each printed to the millisecond
            assert "this run's, resumed at iteration" in text
        assert time_line(again_text)[3] == 0.0
