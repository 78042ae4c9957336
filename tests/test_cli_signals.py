"""Checkpoint signals that reach a command-line run while it is still starting (issue 19, item 11).

The command line installs its SIGUSR1/SIGTERM handlers first; a signal that comes during the setup waits in
the process's flags and is acted on at the first iteration, step or round, by whichever method runs.  Each
rank is paused at its first import of numpy (the start of every command's setup) until it has the signal,
so the signal provably comes during the setup, on a busy machine too.
"""
import json
import os
import signal

import pytest

from cli_signals import Run, checkpoint_meta
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
}


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
