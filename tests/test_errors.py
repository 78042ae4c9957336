"""Bad input on any rank gives the same clear error on every rank, and no hang."""
import numpy as np
import pytest
from mpi4py import MPI

from conftest import gather_messages, run_mpi
from mpiopt.admm import lasso
from mpiopt.core import CollectiveError, check_collectively


def shard(comm, rows=30, n=6):
    rng = np.random.default_rng(comm.rank)
    return rng.standard_normal((rows, n)), rng.standard_normal(rows)


def last_rank(comm):
    return comm.size - 1


def with_nan_in_A(comm):
    A, b = shard(comm)
    if comm.rank == last_rank(comm):
        A[3, 2] = np.nan
    return (A, b, 0.1), {}


def with_inf_in_b(comm):
    A, b = shard(comm)
    if comm.rank == last_rank(comm):
        b[0] = np.inf
    return (A, b, 0.1), {}


def with_extra_column(comm):
    A, b = shard(comm, n=7 if comm.rank == last_rank(comm) else 6)
    return (A, b, 0.1), {}


def with_short_b(comm):
    A, b = shard(comm)
    return (A, b[:-1] if comm.rank == last_rank(comm) else b, 0.1), {}


def with_integer_A(comm):
    A, b = shard(comm)
    return ((A * 10).astype(np.int64) if comm.rank == last_rank(comm) else A, b, 0.1), {}


def with_complex_b(comm):
    A, b = shard(comm)
    return (A, b.astype(np.complex128) if comm.rank == last_rank(comm) else b, 0.1), {}


def with_negative_lam(comm):
    A, b = shard(comm)
    return (A, b, -1.0), {}


def with_lam_differing(comm):
    A, b = shard(comm)
    return (A, b, 0.1 if comm.rank != last_rank(comm) else 0.2), {}


def with_zero_rho(comm):
    A, b = shard(comm)
    return (A, b, 0.1), {"rho": 0.0}


def with_unknown_setting(comm):
    A, b = shard(comm)
    return (A, b, 0.1), {"rhoo": 1.0}


def with_unknown_reducer(comm):
    A, b = shard(comm)
    return (A, b, 0.1), {"reducer": "tree"}


def with_no_rows_anywhere(comm):
    return (np.zeros((0, 4)), np.zeros(0), 0.1), {}


CASES = [
    (with_nan_in_A, "last", "A_local contains NaN or inf"),
    (with_inf_in_b, "last", "b_local contains NaN or inf"),
    (with_extra_column, "last", "n=7 differs from rank 0's 6"),
    (with_short_b, "last", "A_local has 30 rows but b_local has 29 entries"),
    (with_integer_A, "last", "A_local has a non-float dtype int64"),
    (with_complex_b, "last", "b_local has complex dtype complex128"),
    (with_negative_lam, "all", "lam must be a finite number >= 0, got -1.0"),
    (with_lam_differing, "last", "lam=0.2 differs from rank 0's 0.1"),
    (with_zero_rho, "all", "rho must be a finite number > 0, got 0.0"),
    (with_unknown_setting, "all", "unknown ADMM setting(s) 'rhoo'"),
    (with_unknown_reducer, "all", "reducer must be one of mpi, ring"),
    (with_no_rows_anywhere, "first", "no rank holds any rows of A"),
]


@pytest.mark.mpi
@pytest.mark.parametrize("make_input, culprit, message", CASES, ids=[case[0].__name__ for case in CASES])
def test_bad_input_raises_same_error_on_every_rank(comm, make_input, culprit, message):
    if culprit == "last" and comm.size == 1 and make_input in (with_extra_column, with_lam_differing):
        pytest.skip("needs a second rank to disagree with")
    args, settings = make_input(comm)
    error = None
    try:
        lasso(*args, comm=comm, **settings)
    except CollectiveError as caught:
        error = caught
    messages = gather_messages(comm, error)
    assert all(m == messages[0] for m in messages), f"ranks raised different errors: {messages}"
    assert error is not None, "no error raised"
    assert message in str(error)
    expected_rank = {"last": comm.size - 1, "first": 0}.get(culprit)
    if expected_rank is not None:
        assert set(error.problems) == {expected_rank}
    else:
        assert set(error.problems) == set(range(comm.size))
        assert (f"ranks 0-{comm.size - 1}:" if comm.size > 1 else "rank 0:") in str(error)


@pytest.mark.mpi
def test_check_collectively_passes_when_all_is_well(comm):
    check_collectively(comm, None, {"n": 5, "lam": 0.5})


def test_collective_error_groups_ranks_with_the_same_message():
    error = CollectiveError({0: "bad", 1: "bad", 2: "bad", 4: "worse", 5: "bad"})
    assert str(error) == "ranks 0, 1, 2, 5: bad; rank 4: worse"


def test_uncaught_exception_on_one_rank_aborts_the_job_without_hanging(tmp_path):
    script = tmp_path / "fail_on_one_rank.py"
    script.write_text(
        "import sys\n"
        "from mpi4py import MPI\n"
        "from mpiopt.core.comm import run_collectively\n"
        "def work():\n"
        "    if MPI.COMM_WORLD.rank == 1:\n"
        "        raise RuntimeError('deliberate failure on rank 1')\n"
        "    MPI.COMM_WORLD.Barrier()\n"
        "sys.exit(run_collectively(work))\n")
    completed = run_mpi(3, str(script), timeout=60)
    assert completed.returncode != 0
    assert "deliberate failure on rank 1" in completed.stderr
    assert "aborting all 3 ranks" in completed.stderr


@pytest.mark.mpi
def test_huge_finite_values_are_told_apart_from_nan(comm):
    A, b = shard(comm)
    A[:, 1] = 1e308
    with pytest.raises(CollectiveError, match="A_local has values so large that their sums overflow"):
        lasso(A, b, 0.1, comm=comm)
