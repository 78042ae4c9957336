"""The core fields of an asynchronous SGD result: the solution is ``x``, ``iterations`` the steps,
the status one word of STATUSES with the rule that ended the run in ``info["stop"]``, the log to
``log_stream``, and ``plot`` (one run, or every method of ``--method all``) through the core's helper.

The MPI tests run at any rank count (the serial pass at one rank, ``mpiexec -n K python -m pytest --only-mpi``
at K); the mpi runtime's needs two ranks or more.
"""
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

from mpiopt.asyncsgd import AsyncSGDResult, AsyncSGDSettings, async_sgd, available_methods as methods
from mpiopt.asyncsgd.result import STATUS_OF_STOP, curve_panels
from mpiopt.core.result import STATUSES

PNG = b"\x89PNG\r\n\x1a\n"
QUADRATIC = {"dim": 4, "noise": 0.0, "mu": 0.2}


def run(comm=MPI.COMM_SELF, **settings):
    settings = {"method": "asgd", "n_workers": 3, "tau": [1.0, 2.0, 3.0], "step_size": 0.2, **settings}
    return async_sgd("quadratic", comm=comm, problem_options=QUADRATIC, **settings)


def assert_core_fields(result, status, stop):
    assert isinstance(result, AsyncSGDResult)
    assert result.status == status and result.status in STATUSES and result.info["stop"] == stop
    assert STATUS_OF_STOP[stop] == status
    assert result.solution is result.x and result.iterations == result.steps
    assert result.history["step"][-1] == result.steps and result.history["gradients"][-1] == result.gradients
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["status"] == status and payload["info"]["stop"] == stop
    assert payload["x"] == pytest.approx(np.asarray(result.solution).tolist())
    assert f"status={status}, stop={stop}" in str(result)


def test_every_rule_that_ends_a_run_has_a_status_of_the_core():
    assert set(STATUS_OF_STOP) == {"epsilon", "max_steps", "max_gradients", "max_time"}
    assert set(STATUS_OF_STOP.values()) <= set(STATUSES)


def test_a_run_that_reaches_epsilon_is_converged_with_stop_epsilon():
    result = run(epsilon=1e-3)
    assert_core_fields(result, "converged", "epsilon")
    assert result.history["grad_norm2"][-1] <= 1e-3 and result.time_to_epsilon == result.time


def test_a_run_out_of_gradients_is_finished_with_stop_max_gradients():
    result = run(epsilon=1e-12, max_gradients=7)
    assert_core_fields(result, "finished", "max_gradients")
    assert result.gradients == 7 and result.time_to_epsilon is None


def test_a_run_to_max_steps_is_finished_with_stop_max_steps():
    result = run(method="minibatch", max_steps=4, stop_at_epsilon=False)
    assert_core_fields(result, "finished", "max_steps")
    assert result.iterations == 4 and result.gradients == 12


def test_a_run_past_max_time_stops_with_status_time_limit():
    result = run(max_time=5.5, max_steps=None, stop_at_epsilon=False)
    assert_core_fields(result, "time_limit", "max_time")
    assert result.time == 5.5 and result.info["workers"]["computed"] == [5, 2, 1]


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_a_simulated_run_gives_every_rank_the_same_core_fields(comm):
    result = run(comm, max_gradients=9, epsilon=1e-12)
    assert_core_fields(result, "finished", "max_gradients")
    assert comm.allgather(result.x.tobytes()) == [result.x.tobytes()] * comm.size


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_the_mpi_runtime_gives_the_same_core_fields(comm):
    if comm.size < 2:
        pytest.skip("the mpi runtime needs a server and a worker: two ranks")
    workers = comm.size - 1
    result = async_sgd("quadratic", comm=comm, problem_options=QUADRATIC, method="asgd", runtime="mpi",
                       tau=[1.0] * workers, step_size=0.2, max_steps=6, stop_at_epsilon=False, time_unit=1e-4)
    assert_core_fields(result, "finished", "max_steps")
    assert result.iterations == 6 and result.info["runtime"] == "mpi"


def test_the_log_goes_to_log_stream(capsys):
    stream = io.StringIO()
    result = run(epsilon=1e-3, verbose=True, log_stream=stream)
    log = stream.getvalue()
    assert "mpiopt async-sgd" in log and "status: converged (epsilon)" in log
    assert f"steps {result.steps}, gradients {result.gradients}" in log
    assert capsys.readouterr().out == "", "nothing on stdout"
    run(epsilon=1e-3, verbose=False, log_stream=stream)
    assert stream.getvalue() == log, "verbose=False: no log"


def test_the_panels_show_grad_norm_and_loss_against_time_one_curve_per_run():
    one, two = run(epsilon=1e-3), run(method="rennala", epsilon=1e-3)
    first, second = one.plot_panels()
    assert first["yscale"] == second["yscale"] == "log"
    assert first["hlines"] == [(one.info["epsilon"], "epsilon")]
    [(times, norms, label)] = first["curves"]
    assert times == one.history["time"] and norms == one.history["grad_norm2"] and label is None
    f_low = one.info["problem"]["f_low"]
    assert second["curves"][0][1] == [max(v - f_low, 1e-300) for v in one.history["loss"]]
    panels = curve_panels({"asgd": one, "rennala": two})
    assert [label for _, _, label in panels[0]["curves"]] == ["asgd", "rennala"]
    assert panels[1]["curves"][1][0] == two.history["time"]


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    result = run(epsilon=1e-3)
    result.plot(tmp_path / "run.png")
    result.plot(tmp_path / "titled.png", title="asgd, three workers")
    assert (tmp_path / "run.png").read_bytes()[:8] == PNG and (tmp_path / "titled.png").read_bytes()[:8] == PNG


def test_methods_come_in_registration_order_slowest_theory_first():
    assert methods()[:4] == ["minibatch", "asgd", "rennala", "ringmaster"]


@pytest.mark.timeout(90)
def test_the_command_line_method_all_plots_every_method_and_shows_the_stop(tmp_path):
    pytest.importorskip("matplotlib")
    environment = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    completed = subprocess.run([sys.executable, "-m", "mpiopt", "async-sgd", "--method", "all", "--problem",
                                "quadratic", "--dim", "10", "--workers", "4", "--tau", "sqrt", "--quiet",
                                "--max-gradients", "30", "--output", "all.json", "--plot", "all.png"],
                               capture_output=True, text=True, timeout=80, cwd=tmp_path, env=environment)
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "all.png").read_bytes()[:8] == PNG
    payload = json.loads((tmp_path / "all.json").read_text())
    assert payload["methods"] == methods(AsyncSGDSettings(), "quadratic")
    lines = completed.stdout.splitlines()
    header = next(line for line in lines if line.startswith("method "))
    assert header.split()[1] == "status" and header.split()[-1] == "stop"
    for name in payload["methods"]:
        result, comparison = payload["results"][name], payload["comparison"][name]
        assert result["status"] in STATUSES and comparison["stop"] == result["info"]["stop"]
        row = next(line for line in lines if line.startswith(name + " ")).split()
        assert row[1] == result["status"] and row[-1] == result["info"]["stop"]
    assert payload["results"]["minibatch"]["info"]["stop"] == "max_gradients"
    assert payload["results"]["minibatch"]["status"] == "finished"
