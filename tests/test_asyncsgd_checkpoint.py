"""A heterogeneous-worker SGD run checkpoints and resumes: a simulated one bit for bit, one
on the mpi runtime between sessions (real SIGTERM and SIGUSR1 sent to its server mid-run).

The reference is the same run without interruption: after SIGTERM at any event, or SIGUSR1, or
``checkpoint_every``, the resumed run must give bitwise its point, history, trace, per-worker counts and
clock, for every method, with fixed and random compute times.
"""
import json
import os
import signal

import numpy as np
import pytest

from conftest import run_mpi
from mpiopt.asyncsgd import async_sgd, get_problem
from mpiopt.asyncsgd import checkpoint as checkpoints
from mpiopt.core.comm import CollectiveError
from test_asyncsgd_cli import SMALL

CASES = [("rennala", {"batch": 3}), ("rennala", {"batch": 2, "restart": False}), ("asgd", {}),
         ("ringmaster", {"threshold": 3, "stop_computations": True}), ("minibatch", {})]


def settings(method, options, tau, **more):
    return {**dict(method=method, method_options=options, tau=tau, n_workers=6, max_gradients=600, seed=4,
                   stop_at_epsilon=False, eval_every=7, trace=True), **more}


def signalling_problem(at, number):
    """The quadratic problem, sending this process ``number`` at its ``at``-th stochastic gradient."""
    problem, calls = get_problem("quadratic", dim=8, noise=1e-2, seed=4), [0]
    plain = problem.stochastic_grad

    def stochastic_grad(x, rng):
        calls[0] += 1
        if calls[0] == at:
            os.kill(os.getpid(), number)
        return plain(x, rng)
    problem.stochastic_grad = stochastic_grad
    return problem


def same(a, b):
    assert np.array_equal(a.x, b.x) and a.steps == b.steps and a.gradients == b.gradients
    assert a.time == b.time and a.time_to_epsilon == b.time_to_epsilon
    assert a.history == b.history and a.info["trace"] == b.info["trace"]
    assert a.info["workers"] == b.info["workers"] and a.status == b.status


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("method, options", CASES)
@pytest.mark.parametrize("tau", ["sqrt", "lognormal"])
def test_sigterm_at_any_event_then_resume_is_bitwise_the_uninterrupted_run(tmp_path, comm, method, options, tau):
    reference = async_sgd(get_problem("quadratic", dim=8, noise=1e-2, seed=4), comm=comm,
                          **settings(method, options, tau))
    assert reference.status == "finished" and reference.info["stop"] == "max_gradients"
    path = comm.bcast(str(tmp_path / "run.npz") if comm.rank == 0 else None)  # the simulating rank's file
    for at in (1, 97, 333):  # three interruptions of one run: each resumes where the last one stopped
        interrupted = async_sgd(signalling_problem(at, signal.SIGTERM), comm=comm,
                                **settings(method, options, tau, checkpoint=path))
        assert interrupted.status == "interrupted" and interrupted.info["stop"] == "signal"
    resumed = async_sgd(get_problem("quadratic", dim=8, noise=1e-2, seed=4), comm=comm,
                        **settings(method, options, tau, checkpoint=path))
    same(resumed, reference)
    assert resumed.info["resumed_at"] == interrupted.steps > 0
    again = async_sgd(get_problem("quadratic", dim=8, noise=1e-2, seed=4), comm=comm,
                      **settings(method, options, tau, checkpoint=path))
    same(again, reference)  # a finished run's file gives the same result again


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_sigusr1_and_checkpoint_every_write_and_go_on(tmp_path, comm, monkeypatch):
    written = []
    original = checkpoints.Checkpoint.write

    def write(self, simulation, recorder):
        written.append(simulation.method.k)
        original(self, simulation, recorder)
    monkeypatch.setattr(checkpoints.Checkpoint, "write", write)
    reference = async_sgd(get_problem("quadratic", dim=8, noise=1e-2, seed=4), comm=comm,
                          **settings("asgd", {}, "sqrt"))
    path = comm.bcast(str(tmp_path / "a.npz") if comm.rank == 0 else None)
    run = async_sgd(signalling_problem(50, signal.SIGUSR1), comm=comm,
                    **settings("asgd", {}, "sqrt", checkpoint=path, checkpoint_every=200))
    same(run, reference)
    if comm.rank == 0:
        # the end (step 600) is written once, though a periodic checkpoint is due there too
        assert written == [50, 200, 400, 600], "SIGUSR1 at step 50, every 200 steps, and at the end"
        assert os.path.exists(tmp_path / "a.npz")


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_file_of_another_run_and_the_mpi_runtime_are_refused(tmp_path, comm):
    path = comm.bcast(str(tmp_path / "b.npz") if comm.rank == 0 else None)  # the simulating rank's file
    async_sgd("quadratic", comm=comm, **settings("asgd", {}, "sqrt", max_gradients=50, checkpoint=path))
    with pytest.raises(CollectiveError, match="belongs to another problem: rank 0's seed was 4, now 5"):
        async_sgd("quadratic", comm=comm, **settings("asgd", {}, "sqrt", checkpoint=path, seed=5))
    with pytest.raises(CollectiveError, match="belongs to another problem: rank 0's n_workers was 6, now 5"):
        async_sgd("quadratic", comm=comm, **settings("asgd", {}, "sqrt", checkpoint=path, n_workers=5,
                                                     step_size=1 / 12))
    with pytest.raises(CollectiveError, match="cannot write checkpoint .*: "):
        async_sgd("quadratic", comm=comm, **settings("asgd", {}, "sqrt", checkpoint=comm.bcast(str(tmp_path))))


def test_a_method_with_state_a_checkpoint_cannot_hold_is_refused_by_name():
    from mpiopt.asyncsgd import Method

    class Odd(Method):
        name = "odd"

        def __init__(self):
            super().__init__(np.zeros(2), 2, 0.1)
            self.seen = {1: {2}}
    with pytest.raises(TypeError, match="asyncsgd-method 'odd' keeps 'seen' \\(dict\\)"):
        Odd().state()
    method = Method(np.zeros(2), 2, 0.1)
    arrays, values = method.state()
    fresh = Method(np.ones(2), 3, 0.5)
    fresh.load_state(arrays, values)
    assert np.array_equal(fresh.x, method.x) and fresh.n_workers == 2 and fresh.step_size == 0.1


@pytest.mark.timeout(120)
def test_the_command_line_resumes_from_its_checkpoint_and_refuses_one_for_every_method(tmp_path):
    arguments = [*SMALL, "--method", "ringmaster", "--no-stop-at-epsilon", "--checkpoint", "s.npz"]
    first = run_mpi(2, *arguments, "--max-gradients", "300", "--output", "a.json", cwd=tmp_path, timeout=120)
    assert first.returncode == 0, first.stderr
    second = run_mpi(2, *arguments, "--max-gradients", "500", "--output", "b.json", cwd=tmp_path, timeout=120)
    assert second.returncode == 0, second.stderr
    whole = run_mpi(2, *arguments[:-2], "--max-gradients", "500", "--output", "c.json", cwd=tmp_path, timeout=120)
    assert whole.returncode == 0, whole.stderr
    a, b, c = (json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json", "c.json"))
    assert b["info"]["resumed_at"] == a["steps"] > 0 and b["gradients"] == 500
    assert b["x"] == c["x"] and b["info"]["workers"] == c["info"]["workers"], "300 then 500 gradients: as 500"
    refused = run_mpi(2, *SMALL, "--method", "all", "--checkpoint", "t.npz", cwd=tmp_path, timeout=120)
    assert refused.returncode == 2
    assert refused.stderr.count("--checkpoint holds one method's run: give --method NAME") == 1
    assert not (tmp_path / "t.npz").exists()


def signalling_worker_problem(comm, at, number):
    """The quadratic problem; worker 1 sends the server ``number`` at its ``at``-th stochastic gradient."""
    server, problem, calls = comm.bcast(os.getpid(), root=0), get_problem("quadratic", dim=8, noise=1e-2,
                                                                          seed=4), [0]
    plain = problem.stochastic_grad

    def stochastic_grad(x, rng):
        calls[0] += 1
        if comm.rank == 1 and calls[0] == at:
            os.kill(server, number)
        return plain(x, rng)
    problem.stochastic_grad = stochastic_grad
    return problem


def mpi_run_file(comm, tmp_path):
    """The server's checkpoint path (skips below 2 ranks: the mpi runtime needs a server and a worker)."""
    if comm.size < 2:
        pytest.skip("the mpi runtime needs a server and a worker")
    return comm.bcast(str(tmp_path / "mpi.npz") if comm.rank == 0 else None)


MPI_RUN = dict(runtime="mpi", method="asgd", tau="sqrt", time_unit=2e-4, max_gradients=300, seed=4,
               stop_at_epsilon=False, idle_timeout=60.0)


@pytest.mark.mpi
@pytest.mark.many_ranks  # more workers, more jobs in flight at a checkpoint
@pytest.mark.timeout(120)
def test_the_mpi_runtime_stops_on_sigterm_and_resumes_its_run(tmp_path, comm):
    path = mpi_run_file(comm, tmp_path)
    first = async_sgd(signalling_worker_problem(comm, 40, signal.SIGTERM), comm=comm, checkpoint=path, **MPI_RUN)
    assert first.status == "interrupted" and first.info["stop"] == "signal" and 0 < first.gradients < 300
    resumed = async_sgd(get_problem("quadratic", dim=8, noise=1e-2, seed=4), comm=comm, checkpoint=path, **MPI_RUN)
    assert resumed.status == "finished" and resumed.info["stop"] == "max_gradients"
    assert resumed.info["resumed_at"] == first.steps and resumed.gradients == 300
    assert resumed.history["step"][:len(first.history["step"])] == first.history["step"], "the history goes on"
    assert np.all(np.diff(resumed.history["step"]) > 0) and np.all(np.diff(resumed.history["time"]) >= 0)
    workers = resumed.info["workers"]
    assert sum(workers["accepted"]) == resumed.steps == 300, "asgd steps on every gradient it receives"
    assert all(c >= a for c, a in zip(workers["computed"], workers["accepted"]))
    assert np.all(np.isfinite(resumed.x))


@pytest.mark.mpi
@pytest.mark.many_ranks  # more workers, more jobs in flight at a checkpoint
@pytest.mark.timeout(120)
def test_the_mpi_runtime_checkpoints_on_sigusr1_and_goes_on(tmp_path, comm):
    path = mpi_run_file(comm, tmp_path)
    run = async_sgd(signalling_worker_problem(comm, 30, signal.SIGUSR1), comm=comm, checkpoint=path,
                    checkpoint_every=100, **MPI_RUN)
    assert run.status == "finished" and run.gradients == 300 and run.info["resumed_at"] == 0
    again = async_sgd("quadratic", problem_options={"dim": 8, "noise": 1e-2}, comm=comm, checkpoint=path,
                      **MPI_RUN)
    assert again.info["resumed_at"] == run.steps and again.gradients == 300 and np.array_equal(again.x, run.x)
    with pytest.raises(CollectiveError, match="belongs to another problem: rank 0's seed was 4, now 5"):
        async_sgd("quadratic", problem_options={"dim": 8, "noise": 1e-2}, comm=comm, checkpoint=path,
                  **dict(MPI_RUN, seed=5))
