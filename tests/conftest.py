"""Shared test helpers.

MPI tests carry ``@pytest.mark.mpi`` (pytest-mpi): the serial pass runs them at
one rank with ``--with-mpi``; ``mpiexec -n K python -m pytest --only-mpi`` runs
them at K ranks.  Every test has a timeout (pytest.ini), so a rank that hangs
fails the run instead of blocking it; pytest-timeout's thread method exits the
process, which makes mpiexec end the other ranks.

Which MPI tests run at which rank count: every MPI test runs at 1 and 2 ranks.
At 3 ranks (where ranks outnumber this machine's 2 cores and each collective
waits on a rank that has no core) only the tests whose outcome can depend on
the rank count beyond 2 run: those marked ``many_ranks`` (a module's
``pytestmark`` or a test's own mark: the same answer at any rank count,
clients or workers spread over ranks) and those parametrized with an
``uneven`` or ``empty`` shard layout.  At 4 ranks only the tests marked
``every_rank_count`` run: the collectives, whose own steps and partners change
again at a power of two (recursive doubling, the node-aware reducers), and a
few tests of what is built on them (mpiopt.torch's hooks and optimizer, state
kept per client); the rest take the same code path at 4 ranks as at 3.  The
others are deselected there.

On which communicator: the ``comm`` fixture has two variants, as mpi4py's
suite runs its tests on WORLD, SELF and duplicated communicators: ``world``
is ``MPI.COMM_WORLD``; ``split`` is a communicator split from it with every
rank in it in reversed order (rank r of COMM_WORLD is rank size - 1 - r
there), so a test or a piece of mpiopt that uses COMM_WORLD or a world rank
instead of the ``comm`` it was given fails there.  Each stage runs one of
them, so that every test meets both: ``split`` at 2 ranks (where every rank
has another number in it), ``world`` at 1, 3 and 4 ranks (at 1 rank the two
are the same one-rank group).  The other variant is deselected.
"""
import os
import subprocess
import sys
from pathlib import Path

from mpiopt.core.threads import THREAD_VARIABLES, limit_process_threads, set_blas_threads_from_mpi, threads_per_rank

# Before numpy is imported: one BLAS pool per core, not per rank, nor per pytest-xdist worker.  The serial
# stage's workers share the cores as ranks do (several threads per worker spin against each other).  A worker
# inherits the thread variables the controller set for itself at one rank (and any the user set): in a worker
# they are all replaced by the workers' share of the cores.
_XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
if "PYTEST_XDIST_WORKER" in os.environ and _XDIST_WORKERS > 1:
    for _name in THREAD_VARIABLES:
        os.environ.pop(_name, None)
    limit_process_threads(threads_per_rank(_XDIST_WORKERS), f"{_XDIST_WORKERS} pytest-xdist workers share the cores")
else:
    set_blas_threads_from_mpi()

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from mpi4py import MPI  # noqa: E402

from mpiopt.core.comm import mpi_vendor  # noqa: E402
from mpiopt.data.partition import row_range  # noqa: E402

MPIEXEC = Path(sys.executable).parent / "mpiexec"
# What the mpiexec beside sys.executable needs here, by MPI: Open MPI refuses to run as root and to start more
# ranks than cores unless told (--allow-run-as-root, --oversubscribe: Open MPI 5 and 4 read these variables
# instead); MPICH needs nothing.  Set for the whole test process, so that every mpiexec a test starts gets them.
MPIEXEC_ENVIRONMENT = {
    "openmpi": {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe", "OMPI_MCA_rmaps_base_oversubscribe": "1"},
}.get(mpi_vendor(), {})
for _name, _value in MPIEXEC_ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)


def shard_bounds(total_rows, comm, layout):
    """Rows [start, stop) of this rank under a named layout.

    even:   as equal as possible;
    uneven: rank r gets a share proportional to (r + 1)^2;
    empty:  rank 0 holds no rows (the others split them evenly).
    """
    size, rank = comm.size, comm.rank
    if layout == "even":
        return row_range(total_rows, rank, size)
    if layout == "uneven":
        weights = np.arange(1, size + 1) ** 2
        edges = np.concatenate([[0], np.round(np.cumsum(weights) / weights.sum() * total_rows)]).astype(int)
        return int(edges[rank]), int(edges[rank + 1])
    if layout == "empty":
        if size == 1:
            return 0, total_rows
        if rank == 0:
            return 0, 0
        start, stop = row_range(total_rows, rank - 1, size - 1)
        return start, stop
    raise ValueError(layout)


def run_mpi(ranks, *args, timeout=120, cwd=None, env=None):
    """Run ``mpiexec -n ranks python args...`` from the test environment; return the CompletedProcess."""
    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec beside {sys.executable}")
    environment = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env or {}))
    return subprocess.run([str(MPIEXEC), "-n", str(ranks), sys.executable, *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=environment)


COMMUNICATORS = ("world", "split")  # the ``comm`` fixture's variants (see the module docstring)


@pytest.fixture
def torch_group(comm):
    """torch.distributed's default group on ``comm``, set up once per process (a process has one default group),
    through mpiopt.torch; returns ``comm``.  torch is imported here, when a torch test asks for it."""
    dist = pytest.importorskip("torch.distributed", reason="PyTorch is not installed (pip install 'mpiopt[torch]')")
    from mpiopt.torch import init_process_group
    if not dist.is_initialized():
        init_process_group(comm)
    assert dist.get_rank() == comm.rank and dist.get_world_size() == comm.size
    return comm


@pytest.fixture(params=COMMUNICATORS)
def comm(request):
    """COMM_WORLD, or a communicator of every rank in reversed rank order, freed after the test."""
    world = MPI.COMM_WORLD
    if request.param == "world":
        yield world
        return
    reversed_ranks = world.Split(color=0, key=world.size - 1 - world.rank)
    yield reversed_ranks
    reversed_ranks.Free()


def gather_messages(comm, error):
    """Every rank's error message, gathered to all ranks."""
    return comm.allgather(str(error) if error is not None else None)


def error_everywhere(comm, call, nothing="no CollectiveError raised"):
    """Run ``call`` on every rank; return the CollectiveError after checking every rank raised the same one
    (``nothing``: the failure's text when none was raised)."""
    from mpiopt.core import CollectiveError
    error = None
    try:
        call()
    except CollectiveError as caught:
        error = caught
    messages = gather_messages(comm, error)
    assert error is not None, nothing
    assert all(message == messages[0] for message in messages), f"ranks raised different errors: {messages}"
    return error


def gpu_available():
    """Whether CuPy imports and sees at least one CUDA device (the ``gpu`` tests run only then)."""
    from mpiopt.core.backend import device_count
    return device_count() > 0


# For tests marked ``gpu``: ``@requires_gpu`` skips them cleanly without CuPy or a device.
requires_gpu = pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA GPU")


RANK_COUNT_LAYOUTS = {"uneven", "empty"}  # layouts whose shards change with the rank count


def needs_many_ranks(item):
    """Whether an MPI test also runs at 3 ranks (see the module docstring)."""
    if item.get_closest_marker("many_ranks"):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(isinstance(value, str) and value in RANK_COUNT_LAYOUTS for value in params.values())


def pytest_configure(config):
    config.addinivalue_line("markers", "many_ranks: an MPI test that also runs at 3 ranks")
    config.addinivalue_line("markers", "every_rank_count: an MPI test that also runs at 3 and 4 ranks")
    if MPI.COMM_WORLD.rank > 0:
        config.option.durations = None  # the slowest tests once per stage, from rank 0


def communicator_variant(item):
    """The ``comm`` fixture's variant a test runs on, or None when it does not take that fixture."""
    return getattr(getattr(item, "callspec", None), "params", {}).get("comm")


def runs_at_this_rank_count(item, size):
    """Whether an MPI test runs at ``size`` ranks (see the module docstring)."""
    variant = communicator_variant(item)
    if variant is not None and variant != ("split" if size == 2 else "world"):
        return False
    if size <= 2:
        return True
    if item.get_closest_marker("every_rank_count"):
        return True
    return size == 3 and needs_many_ranks(item)


def pytest_collection_modifyitems(config, items):
    size = MPI.COMM_WORLD.size
    kept, deselected = [], []
    only_mpi = config.getoption("--only-mpi", default=False)
    for item in items:
        mpi = item.get_closest_marker("mpi")
        wanted = runs_at_this_rank_count(item, size) if mpi else not only_mpi
        (kept if wanted else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    # The Slurm jobs mostly wait on the scheduler (a requeue takes minutes): started first, that wait overlaps
    # the rest of the stage on pytest-xdist's other workers instead of trailing it.
    items[:] = sorted(kept, key=lambda item: not item.get_closest_marker("slurm"))


def pytest_runtest_logreport(report):
    """At two ranks and more, a rank's failure is written out at once, traceback and all: a rank that fails
    a collective test and then waits in the next one (its peers still in the first) is ended by a timeout that
    exits the process, and pytest's end-of-run summary, where the traceback would be, never comes."""
    if report.failed and MPI.COMM_WORLD.size > 1:
        rank = MPI.COMM_WORLD.rank
        sys.__stderr__.write(f"\n[rank {rank}] FAILED {report.nodeid} ({report.when}):\n{report.longreprtext}\n"
                             f"[rank {rank}] end of {report.nodeid}\n")
        sys.__stderr__.flush()


def check_async_sgd_resumes_bit_for_bit(tmp_path, name, problem, hook, call, **common):
    """An async-sgd run on ``problem`` (built as registered ``name``) SIGTERMed at the ``call``-th call of its
    method ``hook`` (in the middle of a round) writes its checkpoint; resumed from it, the run ends as one
    that never stopped: the same iterate, history, trace, time and per-worker counts."""
    import signal

    from mpiopt.asyncsgd import async_sgd
    reference = async_sgd(name, comm=MPI.COMM_SELF, trace=True, **common)
    plain, calls = getattr(problem, hook), [0]

    def interrupting(*args):
        calls[0] += 1
        if calls[0] == call:
            os.kill(os.getpid(), signal.SIGTERM)
        return plain(*args)
    setattr(problem, hook, interrupting)
    path = str(tmp_path / "run.npz")
    interrupted = async_sgd(problem, comm=MPI.COMM_SELF, checkpoint=path, trace=True, **common)
    assert interrupted.status == "interrupted" and 0 < interrupted.steps < common["max_steps"]
    resumed = async_sgd(name, comm=MPI.COMM_SELF, checkpoint=path, trace=True, **common)
    np.testing.assert_array_equal(resumed.x, reference.x)
    assert resumed.history == reference.history and resumed.info["trace"] == reference.info["trace"]
    assert resumed.time == reference.time and resumed.info["workers"] == reference.info["workers"]


def check_mpi_run_is_the_simulated_one(comm, name, taus, separation, time_unit, **common):
    """``common`` (an async-sgd run with trace=True) on the mpi runtime of ``comm`` (its workers timed by
    ``taus[n]``) against the simulator's run: the fixed times keep the simulated arrivals ``separation`` units
    apart (checked), so the real ranks see the same events in the same order and give the same bits, on every
    rank.  Returns (simulated, run); skips without a server and a worker, or with no times for n workers."""
    from mpiopt.asyncsgd import async_sgd
    n = comm.size - 1
    if n not in taus:
        pytest.skip(f"the mpi runtime needs a server and {min(taus)}-{max(taus)} workers here")
    simulated = async_sgd(name, comm=MPI.COMM_SELF, n_workers=n, tau=taus[n], **common)
    times = sorted({event[0] for event in simulated.info["trace"]})
    assert len(times) < 2 or min(np.diff(times)) >= separation
    run = async_sgd(name, comm=comm, runtime="mpi", time_unit=time_unit, tau=taus[n], **common)
    assert [tuple(e[1:]) for e in run.info["trace"]] == [tuple(e[1:]) for e in simulated.info["trace"]]
    np.testing.assert_array_equal(run.x, simulated.x)
    assert run.info["workers"] == {**simulated.info["workers"], "cancelled": run.info["workers"]["cancelled"]}
    assert simulated.time <= run.time <= simulated.time + 0.1 * run.gradients + 1.0
    assert all(np.array_equal(other, run.x) for other in comm.allgather(run.x))
    return simulated, run
