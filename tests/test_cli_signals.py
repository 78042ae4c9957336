"""Checkpoint signals that reach a command-line run at the edges of the run: while it starts, after it ends.

The command line installs its SIGUSR1/SIGTERM handlers before anything else (before MPI starts); a signal
that comes during the setup waits in the process's flags and is acted on at the first iteration, step or
round, by whichever method runs, on every rank together.  Each rank is paused at its first import of a
module (mpi4py: before MPI starts; numpy: the start of every command's setup) until it has the signal, so
the signal provably comes at that point, on a busy machine too.  Once the result is written the run is
done: a signal that comes then leaves the exit status 0.
"""
import json
import os
import signal
import time

import numpy as np
import pytest

from cli_signals import Run, busy_machine, checkpoint_meta
from test_asyncsgd_cli import SMALL as ASYNC_SGD
from test_cli import SOLVE
from test_federated_cli import FEDERATED
from test_train_cli import TRAIN

# command: its arguments, its counter in the checkpoint's metadata, the result's count of it, and the count at
# the first iteration (working sets read the flags after their first certificate, before any ADMM iteration)
COMMANDS = {
    "solve": (SOLVE + ["--max-iter", "40"], lambda meta: meta["iteration"], "iterations", 1),
    "working-sets": ([a for a in SOLVE if a not in ("--working-set", "off")] + ["--max-iter", "400"],
                     lambda meta: meta["iterations"], "iterations", 0),
    "train": (TRAIN + ["--quiet", "--max-steps", "6"], lambda meta: meta["sampler"]["step"], "steps", 1),
    "federated": (FEDERATED[:-12] + ["--rounds", "3"] + FEDERATED[-10:] + ["--quiet"], lambda meta: meta["round"],
                  "rounds", 1),
    "async-sgd": (ASYNC_SGD + ["--method", "asgd", "--max-steps", "40", "--no-stop-at-epsilon"],
                  lambda meta: meta["steps"], "steps", 1),
    "async-sgd-mpi": ([a for a in ASYNC_SGD if a not in ("--workers", "4")]
                      + ["--runtime", "mpi", "--method", "asgd", "--max-steps", "40", "--no-stop-at-epsilon"],
                      lambda meta: meta["steps"], "steps", 0),  # the server reads the flags before step 1
}
# the four subcommands, async-sgd on MPI ranks (the simulator runs on one rank)
SUBCOMMANDS = ["solve", "train", "federated", "async-sgd-mpi"]
# the ranks that hold a part of their own in the checkpoint: ADMM's local variables on every rank, the
# async-sgd workers' streams (not the server's); training and these federated clients keep none
# flags that make each run seconds long, where a signal at its first line stops it at its first iterations
LONG_RUNS = {"solve": [("--max-iter", "20000")], "train": [("--epochs", "200"), ("--max-steps", "20000")],
             "federated": [("--rounds", "500")], "async-sgd-mpi": [("--max-steps", "50000")]}
RANK_PARTS = {"solve": [0, 1], "train": [], "federated": [], "async-sgd-mpi": [1]}


def run_with_signal_in_setup(tmp_path, command, number):
    """Run ``command`` at 2 ranks with a checkpoint, send ``number`` while every rank is in its setup;
    (the run, its exit status, its result, the checkpoint's counter)."""
    arguments, counter, count, _ = COMMANDS[command]
    run = Run(2, [*arguments, "--checkpoint", "state.npz", "--output", "out.json"], tmp_path, pause_at="numpy",
              copy="state.npz")
    run.signal_in_setup(number)
    status = run.finish()
    assert (tmp_path / "out.json").exists(), run.output()[1]
    return run, status, json.loads((tmp_path / "out.json").read_text()), counter


@pytest.mark.parametrize("command", ["solve", "train", "federated", "async-sgd"])
def test_a_sigusr1_during_setup_writes_a_checkpoint_at_the_first_iteration(tmp_path, command):
    run, status, result, counter = run_with_signal_in_setup(tmp_path, command, signal.SIGUSR1)
    assert status == 0, run.output()[1]
    assert os.path.exists(run.path("state.npz.1")), "the signal during setup must write a checkpoint"
    assert counter(checkpoint_meta(run.path("state.npz.1"))) == 1, "at the first iteration"
    written = sorted(name for name in os.listdir(tmp_path) if name.startswith("state.npz."))
    assert written == ["state.npz.1", "state.npz.2"], "then one at the end"
    assert counter(checkpoint_meta(run.path("state.npz.2"))) == result[COMMANDS[command][2]]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_sigterm_during_setup_stops_at_the_first_iteration_with_a_checkpoint(tmp_path, command):
    run, status, result, counter = run_with_signal_in_setup(tmp_path, command, signal.SIGTERM)
    _, _, count, first = COMMANDS[command]
    assert status == 3, run.output()[1]
    assert result["status"] == "interrupted" and result[count] == first
    assert counter(checkpoint_meta(run.path("state.npz"))) == first


def rank_parts(path):
    """{rank: the names of its arrays} in a checkpoint file."""
    with np.load(path, allow_pickle=False) as archive:
        names = list(archive.files)
    parts = {}
    for name in names:
        if name.startswith("rank") and "_" in name:
            rank, key = name[4:].split("_", 1)
            parts.setdefault(int(rank), set()).add(key)
    return parts


def assert_stopped_at_the_first_iteration(run, status, tmp_path, command):
    _, counter, count, first = COMMANDS[command]
    assert status == 3, run.output()[1]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["status"] == "interrupted" and result[count] == first
    assert counter(checkpoint_meta(run.path("state.npz"))) == first
    assert sorted(rank_parts(run.path("state.npz"))) == RANK_PARTS[command], "every rank's part of the state"


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_a_sigterm_to_each_rank_before_mpi_starts_stops_at_the_first_iteration(tmp_path, command):
    # each rank pauses at its first import of mpi4py (MPI_Init comes with it) and is signalled there itself
    arguments = COMMANDS[command][0]
    run = Run(2, [*arguments, "--checkpoint", "state.npz", "--output", "out.json"], tmp_path, pause_at="mpi4py")
    run.signal_in_setup(signal.SIGTERM, ranks=[0, 1])
    assert_stopped_at_the_first_iteration(run, run.finish(), tmp_path, command)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_one_ranks_sigterm_in_setup_stops_every_rank_at_the_first_iteration(tmp_path, command):
    # rank 1 alone pauses in its setup and alone has the signal; rank 0 goes on to its first collective
    arguments = COMMANDS[command][0]
    run = Run(2, [*arguments, "--checkpoint", "state.npz", "--output", "out.json"], tmp_path, pause_at="numpy",
              pause_ranks=[1])
    run.signal_in_setup(signal.SIGTERM, ranks=[1])
    assert_stopped_at_the_first_iteration(run, run.finish(), tmp_path, command)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_a_sigterm_at_the_first_printed_line_on_a_busy_machine_stops_at_its_checkpoint(tmp_path, command):
    # the scheduler's case: the job has printed its first line, the machine is loaded, every rank is signalled
    arguments = [a for a in COMMANDS[command][0] if a != "--quiet"]
    for flag, value in LONG_RUNS[command]:  # a run long enough that the signal comes before its end
        arguments[arguments.index(flag) + 1] = value
    with busy_machine():
        run = Run(2, [*arguments, "--checkpoint", "state.npz", "--output", "out.json"], tmp_path)
        run.wait_for(lambda: os.path.getsize(run.path("stdout")) > 0, "the job never printed a line")
        assert run.signal_ranks(signal.SIGTERM) == [0, 1], "the job ended before the signal"
        status = run.finish()
    assert status == 3, run.output()[1]
    assert json.loads((tmp_path / "out.json").read_text())["status"] == "interrupted"
    assert os.path.exists(run.path("state.npz"))


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_signals_after_the_result_is_written_leave_the_exit_status_0(tmp_path, command):
    # SIGUSR1 and SIGTERM by turns to each rank, from the moment the result file exists until the job ends
    arguments = COMMANDS[command][0]
    run = Run(2, [*arguments, "--checkpoint", "state.npz", "--output", "out.json"], tmp_path)
    run.wait_for(lambda: os.path.exists(run.path("out.json")), "the result was never written", timeout=300)
    sent, turn = 0, 0
    while run.process.poll() is None:
        sent += len(run.signal_ranks((signal.SIGUSR1, signal.SIGTERM)[turn % 2]))
        turn += 1
        time.sleep(0.005)
    assert run.finish() == 0, (sent, run.output()[1])
    assert json.loads((tmp_path / "out.json").read_text())["status"] != "interrupted"
