"""mpiopt.asyncsgd on MPI ranks: the mpi runtime against the simulator, slow workers, errors, counts.

MPI tests run at any rank count (the serial pass at one rank, ``mpiexec -n K python -m pytest --only-mpi``
at K); the mpi runtime needs a server and a worker, so its tests skip at one rank.  Rank 0 serves and
worker w is rank w + 1.  Results are broadcast, so every rank makes the same assertions.
"""
import json
import time

import numpy as np
import pytest
from mpi4py import MPI

from conftest import run_mpi
from mpiopt.asyncsgd import async_sgd
from mpiopt.asyncsgd.problems import DataProblem, Quadratic
from mpiopt.core.comm import CollectiveError
from mpiopt.models import get_model

pytestmark = pytest.mark.many_ranks  # rank 0 serves; only 3 and 4 ranks have several workers

SELF = MPI.COMM_SELF

# Fixed times per number of workers whose finishing times (each worker restarting as it finishes) stay
# at least 0.3 units apart over the first EVENTS[n] arrivals, and keep their order when every time grows by
# the runtime's few milliseconds of messaging per gradient (searched offline; checked in the test).
SEPARATED_TAUS = {1: [2.0], 2: [2.3, 2.65], 3: [2.25, 2.55, 2.9], 4: [2.3, 2.65, 3.2, 3.7]}
EVENTS = {1: 4, 2: 8, 3: 12, 4: 12}  # every case takes a step; Ringmaster discards from 2 workers on
TIME_UNIT = 0.15


def needs_workers(comm, minimum=1):
    if comm.size - 1 < minimum:
        pytest.skip(f"the mpi runtime needs {minimum + 1} or more ranks here")


def same_on_every_rank(comm, value):
    return all(np.array_equal(np.asarray(other), np.asarray(value)) for other in comm.allgather(value))


def counts_are_consistent(result):
    workers = result.info["workers"]
    n = result.info["n_workers"]
    assert all(len(column) == n for column in workers.values())
    assert sum(workers["computed"]) == result.gradients
    assert [a + d for a, d in zip(workers["accepted"], workers["discarded"])] == workers["computed"]
    assert min(min(column) for column in workers.values()) >= 0


# -- the mpi runtime reproduces the simulator's order of events -------------------------------------------
ORDER_CASES = {
    "asgd": dict(method="asgd"),
    "ringmaster": dict(method="ringmaster", threshold=1),
    "rennala-no-restart": dict(method="rennala", batch=2, restart=False),
    "rennala": dict(method="rennala", batch=2, restart=True),
    "malenia": dict(method="malenia", batch=4),
    "asgd-qsgd4": dict(method="asgd", compressor="qsgd4"),
    "minibatch-randomk": dict(method="minibatch", compressor="randomk", coordinates=2),
}


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(ORDER_CASES))
def test_the_mpi_runtime_sees_the_simulators_events_in_the_same_order(comm, case):
    needs_workers(comm)
    n = comm.size - 1
    if n not in SEPARATED_TAUS:
        pytest.skip(f"no separated compute times chosen for {n} workers")
    settings = dict(ORDER_CASES[case], tau=SEPARATED_TAUS[n], max_gradients=EVENTS[n], max_steps=None,
                    stop_at_epsilon=False, trace=True, step_size=0.2, seed=7, delay_adaptive=True)
    problem = {"dim": 6, "noise": 1.0}
    simulated = async_sgd("quadratic", comm=SELF, problem_options=problem, n_workers=n, **settings)
    times = sorted({event[0] for event in simulated.info["trace"]})
    if len(times) > 1:  # the finishing times are far apart compared with the runtime's jitter
        assert min(np.diff(times)) >= 0.29
    run = async_sgd("quadratic", comm=comm, problem_options=problem, runtime="mpi", time_unit=TIME_UNIT, **settings)
    sequence = [tuple(event[1:]) for event in run.info["trace"]]
    expected = [tuple(event[1:]) for event in simulated.info["trace"]]
    assert sequence == expected
    np.testing.assert_allclose(run.x, simulated.x, rtol=1e-12, atol=1e-12)
    assert run.steps == simulated.steps and run.gradients == simulated.gradients
    assert run.status == simulated.status
    assert run.info["workers"]["accepted"] == simulated.info["workers"]["accepted"]
    assert run.info["workers"]["discarded"] == simulated.info["workers"]["discarded"]
    assert run.info["runtime"] == "mpi" and run.info["time_unit"] == TIME_UNIT
    # wall-clock time in units is the simulated time plus the messaging's few milliseconds per gradient
    assert simulated.time <= run.time <= simulated.time + 0.1 * run.gradients + 1.0
    if case == "ringmaster" and n >= 2:
        assert sum(run.info["workers"]["discarded"]) > 0
    counts_are_consistent(run)
    assert same_on_every_rank(comm, run.x)


# -- slow workers ---------------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("method, extra", [("asgd", {}), ("ringmaster", {"threshold": 2, "stop_computations": True}),
                                           ("rennala", {"batch": 2})])
def test_a_very_slow_worker_does_not_hold_up_the_run(comm, method, extra):
    needs_workers(comm, 2)
    n = comm.size - 1
    taus = [1.0] * (n - 1) + [10000.0]
    started = time.perf_counter()
    result = async_sgd("quadratic", comm=comm, problem_options={"dim": 3}, runtime="mpi", method=method,
                       tau=taus, time_unit=0.01, max_steps=20, stop_at_epsilon=False, step_size=0.1, **extra)
    elapsed = comm.allreduce(time.perf_counter() - started, op=MPI.MAX)
    assert elapsed < 10
    assert result.status == "finished" and result.info["stop"] == "max_steps" and result.steps == 20
    assert result.info["workers"]["computed"][-1] == 0
    assert result.time < 1000  # units: far less than the slow worker's one gradient
    counts_are_consistent(result)
    # the slow worker is cancelled exactly as in the simulator: never (asgd), whenever its delay reaches R
    # (ringmaster with stops), at every step (rennala's restarts)
    simulated = async_sgd("quadratic", comm=SELF, problem_options={"dim": 3}, method=method, n_workers=n, tau=taus,
                          max_steps=20, stop_at_epsilon=False, step_size=0.1, **extra)
    assert result.info["workers"]["cancelled"][-1] == simulated.info["workers"]["cancelled"][-1]
    assert result.info["workers"]["cancelled"][-1] == {"asgd": 0, "ringmaster": 10, "rennala": 20}[method]


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_minibatch_waits_for_the_slowest_worker_until_max_time(comm):
    needs_workers(comm)
    n = comm.size - 1
    taus = [1.0] * (n - 1) + [10000.0]
    started = time.perf_counter()
    result = async_sgd("quadratic", comm=comm, problem_options={"dim": 3}, runtime="mpi", method="minibatch",
                       tau=taus, time_unit=0.01, max_time=40, stop_at_epsilon=False, step_size=0.1)
    elapsed = comm.allreduce(time.perf_counter() - started, op=MPI.MAX)
    assert elapsed < 10
    assert result.status == "time_limit" and result.info["stop"] == "max_time" and result.steps == 0
    assert 40 <= result.time < 100
    assert result.info["workers"]["computed"] == [1] * (n - 1) + [0]
    assert result.info["workers"]["cancelled"] == [0] * n
    counts_are_consistent(result)


# -- errors reach every rank ------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_wrong_number_of_workers_is_the_same_error_on_every_rank(comm):
    with pytest.raises(CollectiveError) as raised:
        async_sgd("quadratic", comm=comm, runtime="mpi", n_workers=comm.size + 1, max_steps=2)
    message = str(raised.value)
    if comm.size == 1:
        assert "the mpi runtime needs at least 2 ranks" in message
    else:
        assert f"n_workers={comm.size + 1} but there are {comm.size - 1} worker ranks" in message
    assert same_on_every_rank(comm, message)


class FailsOnLastRank(Quadratic):
    """A problem whose stochastic gradient fails on the last rank of ``comm``, at its third gradient."""

    def __init__(self, comm):
        super().__init__(dim=3, noise=1.0)
        self.comm = comm
        self.calls = 0

    def stochastic_grad(self, x, rng):
        self.calls += 1
        if self.comm.size > 1 and self.comm.rank == self.comm.size - 1 and self.calls >= 3:
            raise FloatingPointError("the gradient overflowed here")
        return super().stochastic_grad(x, rng)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["asgd", "minibatch"])
def test_a_worker_whose_gradient_fails_is_named_in_the_same_error_on_every_rank(comm, method):
    needs_workers(comm)
    worker = comm.size - 2
    started = time.perf_counter()
    with pytest.raises(CollectiveError) as raised:
        async_sgd(FailsOnLastRank(comm), comm=comm, runtime="mpi", method=method, tau="constant", time_unit=0.002,
                  max_steps=1000, stop_at_epsilon=False, step_size=0.1, idle_timeout=20)
    message = str(raised.value)
    assert f"worker {worker} (rank {worker + 1}) failed" in message
    assert "FloatingPointError: the gradient overflowed here" in message
    assert same_on_every_rank(comm, message)
    assert comm.allreduce(time.perf_counter() - started, op=MPI.MAX) < 15
    # nothing was left in flight: the communicator serves the next run
    result = async_sgd("quadratic", comm=comm, problem_options={"dim": 3}, runtime="mpi", method="asgd",
                       tau="constant", time_unit=0.002, max_steps=10, stop_at_epsilon=False, step_size=0.1)
    assert result.steps == 10 and same_on_every_rank(comm, result.x)


class NoSmoothness(Quadratic):
    """L = 0: the delay-adaptive step cannot be built (the server's setup fails)."""

    def __init__(self):
        super().__init__(dim=3)
        self.L = 0.0


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["method", "taus"])
def test_a_setup_failing_on_the_server_releases_the_workers(comm, case):
    needs_workers(comm, 2 if case == "taus" else 1)
    if case == "method":
        problem, settings = NoSmoothness(), dict(method="asgd", delay_adaptive=True, step_size=0.1)
        expected = "delay-adaptive step size needs the smoothness constant L > 0"
    else:  # times for fewer workers than there are: refused at set-up, on every rank alike
        problem, settings = "quadratic", dict(tau=[1.0] * (comm.size - 2))
        expected = f"the times given are for {comm.size - 2} workers but there are {comm.size - 1} worker ranks"
    started = time.perf_counter()
    with pytest.raises(CollectiveError) as raised:
        async_sgd(problem, comm=comm, runtime="mpi", max_steps=5, idle_timeout=20, **settings)
    assert expected in str(raised.value)
    assert same_on_every_rank(comm, str(raised.value))
    assert comm.allreduce(time.perf_counter() - started, op=MPI.MAX) < 15


class RankData(DataProblem):
    """Least squares on this rank's own small data set (a user's problem built on every rank)."""

    name = "rank-data"

    def __init__(self, X, y):
        super().__init__(get_model("linear", n_features=X.shape[1]), X, y, batch_size=2, seed=0)
        self.L, self.sigma2, self.options = 1.0, 0.1, {}


def rank_data(comm, bad=None, value=np.nan):
    """Every rank's data; ``bad`` ("features" or "targets") holds ``value`` on the last rank only."""
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((12, 3)), rng.standard_normal(12)
    if comm.rank == comm.size - 1:
        if bad == "features":
            X[4, 1] = value
        elif bad == "targets":
            y[7] = value
    return RankData(X, y)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("runtime", ["simulator", "mpi"])
@pytest.mark.parametrize("bad, value", [("features", np.nan), ("features", np.inf), ("targets", np.nan),
                                        ("targets", -np.inf)])
def test_non_finite_data_on_one_rank_is_the_same_error_on_every_rank(comm, runtime, bad, value):
    if runtime == "mpi":
        needs_workers(comm)
    settings = dict(runtime=runtime, method="asgd", tau="constant", max_steps=5, stop_at_epsilon=False,
                    step_size=0.1, time_unit=0.002, idle_timeout=20)
    with pytest.raises(CollectiveError) as raised:
        async_sgd(rank_data(comm, bad, value), comm=comm, **settings)
    name = {"features": "X (features)", "targets": "y (targets)"}[bad]
    last = comm.size - 1
    assert raised.value.problems == {last: f"{name} contains NaN or inf"}
    assert same_on_every_rank(comm, str(raised.value))
    result = async_sgd(rank_data(comm), comm=comm, **settings)  # the same problem with finite data runs
    assert result.steps == 5 and np.all(np.isfinite(result.x)) and same_on_every_rank(comm, result.x)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_the_mpi_runtime_uses_nothing_that_arrives_after_max_time(comm):
    """The simulator's rule on wall time: an arrival at or before max_time counts, none after it."""
    needs_workers(comm)
    n = comm.size - 1
    result = async_sgd("quadratic", comm=comm, problem_options={"dim": 3}, runtime="mpi", method="asgd",
                       tau=[1.0 + w for w in range(n)], time_unit=0.01, max_time=12, max_steps=None,
                       stop_at_epsilon=False, step_size=0.1, trace=True)
    assert result.status == "time_limit" and result.info["stop"] == "max_time" and result.time == 12
    assert result.gradients == len(result.info["trace"]) > 0
    assert all(event[0] <= 12 for event in result.info["trace"])
    counts_are_consistent(result)


class SlowGradients(Quadratic):
    """A stochastic gradient that takes a few milliseconds of real time, more on higher ranks of ``comm``."""

    def __init__(self, comm, **options):
        super().__init__(**options)
        self.comm = comm

    def stochastic_grad(self, x, rng):
        time.sleep(0.002 * self.comm.rank)
        return super().stochastic_grad(x, rng)


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("method, extra", [("rennala", {"batch": 2}),
                                           ("ringmaster", {"threshold": 1, "stop_computations": True})])
def test_gradients_of_cancelled_jobs_that_arrive_late_are_dropped(comm, method, extra):
    """With real computing times a cancelled worker finishes its gradient before it sees the new job: the
    server must drop that gradient (it was counted as cancelled), never use or discard it."""
    needs_workers(comm)
    result = async_sgd(SlowGradients(comm, dim=3), comm=comm, runtime="mpi", method=method, tau="real", max_steps=30,
                       stop_at_epsilon=False, step_size=0.1, trace=True, **extra)
    workers = result.info["workers"]
    counts_are_consistent(result)
    assert workers["discarded"] == [0] * (comm.size - 1)
    per_step = 2 if method == "rennala" else 1
    for used, (_, _, k_at, accepted) in enumerate(result.info["trace"]):
        assert accepted and k_at == used // per_step  # every gradient used was computed at the current point
    assert sum(workers["accepted"]) == per_step * result.steps
    if comm.size >= 3:
        assert sum(workers["cancelled"]) > 0


# -- Rennala with equal times is Minibatch SGD on MPI too -----------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_rennala_with_equal_times_and_batch_n_is_minibatch_sgd_on_mpi(comm):
    needs_workers(comm)
    n = comm.size - 1
    common = dict(tau="constant", step_size=0.2, max_steps=15, stop_at_epsilon=False, seed=3,
                  problem_options={"dim": 5, "noise": 0.5})
    reference = async_sgd("quadratic", comm=SELF, method="minibatch", n_workers=n, **common)
    rennala = async_sgd("quadratic", comm=comm, runtime="mpi", time_unit=0.02, method="rennala", batch=n, **common)
    minibatch = async_sgd("quadratic", comm=comm, runtime="mpi", time_unit=0.01, method="minibatch", **common)
    for result in (rennala, minibatch):
        assert result.steps == 15
        np.testing.assert_allclose(result.x, reference.x, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(result.history["grad_norm2"], reference.history["grad_norm2"], rtol=1e-9)
        assert result.info["workers"]["accepted"] == [15] * n
        counts_are_consistent(result)
    assert minibatch.info["workers"]["cancelled"] == [0] * n


# -- counts -----------------------------------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("method, extra", [
    ("ringmaster", {"threshold": 2, "stop_computations": True}), ("ringmaster", {"threshold": 1}),
    ("rennala", {"batch": 3, "restart": False}), ("rennala", {"batch": 3}), ("asgd", {"delay_adaptive": True})])
def test_the_per_worker_counts_add_up(comm, method, extra):
    needs_workers(comm)
    result = async_sgd("quadratic", comm=comm, problem_options={"dim": 4}, runtime="mpi", method=method,
                       tau="exponential", time_unit=0.004, max_steps=25, stop_at_epsilon=False, step_size=0.05,
                       trace=True, **extra)
    counts_are_consistent(result)
    workers, trace = result.info["workers"], result.info["trace"]
    assert result.status == "finished" and result.info["stop"] == "max_steps" and result.steps == 25
    assert len(trace) == result.gradients
    assert sum(accepted for *_, accepted in trace) == sum(workers["accepted"])
    for w in range(comm.size - 1):
        assert sum(1 for event in trace if event[1] == w) == workers["computed"][w]
    per_step = extra.get("batch", 1) if method == "rennala" else 1
    assert sum(workers["accepted"]) == per_step * result.steps
    if method == "ringmaster" and extra.get("stop_computations"):
        assert sum(workers["discarded"]) == 0
    assert [event[0] for event in trace] == sorted(event[0] for event in trace)
    assert same_on_every_rank(comm, result.x)


# -- the simulator under mpiexec ---------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.parametrize("method, tau", [("ringmaster", "exponential"), ("rennala", "sqrt"), ("asgd", [1.0, 3.0])])
def test_the_simulator_gives_the_same_answer_at_any_rank_count(comm, method, tau):
    settings = dict(method=method, n_workers=2 if isinstance(tau, list) else 7, tau=tau, max_steps=60,
                    stop_at_epsilon=False, trace=True, seed=2, epsilon=0.2, problem_options={"dim": 5, "noise": 1.0})
    alone = async_sgd("quadratic", comm=SELF, **settings)
    together = async_sgd("quadratic", comm=comm, **settings)
    assert np.array_equal(together.x, alone.x)
    assert together.history == alone.history
    assert together.info["trace"] == alone.info["trace"]
    assert together.info["workers"] == alone.info["workers"]
    assert together.info["runtime"] == "simulator"
    assert same_on_every_rank(comm, together.x)


# Rank 0 simulates a problem whose stochastic gradient raises an exception that is neither a ValueError nor a
# RuntimeError; every rank prints what it raised.  A rank stuck for 30 s dumps its stack and exits.
SIMULATION_FAILING_ON_ROOT = """
import faulthandler, json
faulthandler.dump_traceback_later(30, exit=True)
from mpi4py import MPI
from mpiopt.asyncsgd import async_sgd
from mpiopt.asyncsgd.problems import DataProblem, Quadratic

class Broken(Quadratic):
    def stochastic_grad(self, x, rng):
        return {}[len(x)]  # a KeyError, as a user's problem might raise

try:
    async_sgd(Broken(dim=2), runtime="simulator", n_workers=3, max_steps=5)
    outcome = "no error"
except Exception as error:
    outcome = f"{type(error).__name__}: {error}"
import sys
with open(f"{sys.argv[1]}.{MPI.COMM_WORLD.rank}", "w") as record:  # a file per rank: lines on stdout can mix
    json.dump({"rank": MPI.COMM_WORLD.rank, "outcome": outcome}, record)
"""


@pytest.mark.timeout(90)
def test_any_exception_of_the_simulation_on_rank_0_reaches_every_rank(tmp_path):
    script = tmp_path / "simulation_failing_on_root.py"
    script.write_text(SIMULATION_FAILING_ON_ROOT)
    completed = run_mpi(2, str(script), str(tmp_path / "outcome"), timeout=60)
    outcomes = {}
    for path in tmp_path.glob("outcome.*"):
        record = json.loads(path.read_text())
        outcomes[record["rank"]] = record["outcome"]
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert sorted(outcomes) == [0, 1] and outcomes[0] == outcomes[1]
    assert outcomes[0].startswith("CollectiveError") and "KeyError" in outcomes[0]
