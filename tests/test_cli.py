"""The command line under mpiexec, as a user runs it."""
import json

import numpy as np
import pytest
from mpi4py import MPI

from conftest import run_mpi
from mpiopt.admm import lasso
from mpiopt.data.synthetic import lasso_rows


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_cli_synthetic_lasso_matches_single_process_reference(tmp_path, ranks):
    output = tmp_path / "result.json"
    completed = run_mpi(ranks, "-m", "mpiopt", "lasso", "--synthetic", "3000x40", "--eps-abs", "1e-9",
                        "--eps-rel", "1e-9", "--output", str(output))
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count("status:      converged") == 1, "log must come from rank 0 only"
    assert "relative objective difference" in completed.stdout
    result = json.loads(output.read_text())
    assert result["info"]["ranks"] == ranks and result["status"] == "converged"
    assert abs(result["reference"]["relative_objective_difference"]) <= 1e-6
    assert result["reference"]["relative_distance"] <= 1e-5
    A, b = lasso_rows(3000, 40, 0, 3000)
    direct = lasso(A, b, comm=MPI.COMM_SELF, lam_ratio=0.1, eps_abs=1e-9, eps_rel=1e-9)
    assert np.allclose(result["x"], direct.x, atol=1e-7)


def test_cli_reads_each_rank_rows_from_npz(tmp_path):
    rng = np.random.default_rng(5)
    A = rng.standard_normal((101, 12))
    b = A @ rng.standard_normal(12) + 0.1 * rng.standard_normal(101)
    np.savez(tmp_path / "problem.npz", A=A, b=b)
    output = tmp_path / "out.json"
    completed = run_mpi(3, "-m", "mpiopt", "lasso", "--data", str(tmp_path / "problem.npz"), "--lam", "0.5",
                        "--eps-abs", "1e-10", "--eps-rel", "1e-10", "--quiet", "--output", str(output))
    assert completed.returncode == 0, completed.stderr
    result = json.loads(output.read_text())
    direct = lasso(A, b, 0.5, comm=MPI.COMM_SELF, eps_abs=1e-10, eps_rel=1e-10)
    assert result["info"]["rows"] == 101 and result["source"] == {"data": str(tmp_path / "problem.npz")}
    assert abs(result["objective"] - direct.objective) <= 1e-9 * direct.objective


@pytest.mark.parametrize("arguments, message", [
    (["--data", "missing.npz"], "ranks 0-1: cannot read missing.npz"),
    (["--synthetic", "200x10", "--rho", "-1"], "ranks 0-1: rho must be a finite number > 0, got -1.0"),
    (["--synthetic", "200x10", "--lam", "nan"], "ranks 0-1: lam must be a finite number >= 0, got nan"),
])
def test_cli_bad_input_exits_with_one_clear_message(tmp_path, arguments, message):
    completed = run_mpi(2, "-m", "mpiopt", "lasso", "--quiet", *arguments, cwd=tmp_path, timeout=60)
    assert completed.returncode == 2
    assert completed.stderr.count(message) == 1, completed.stderr
    assert not (tmp_path / "mpiopt_lasso.json").exists(), "no result file after an error"


SOLVE = ["-m", "mpiopt", "solve", "--synthetic", "4000x40", "--loss", "logistic", "--lam", "1", "--intercept",
         "--eps-abs", "0", "--eps-rel", "0", "--quiet"]


def test_cli_solve_resumes_from_its_checkpoint_bitwise(tmp_path):
    whole = run_mpi(2, *SOLVE, "--max-iter", "300", "--output", str(tmp_path / "whole.json"))
    assert whole.returncode == 0, whole.stderr
    first = run_mpi(2, *SOLVE, "--max-iter", "120", "--checkpoint", str(tmp_path / "state.npz"),
                    "--output", str(tmp_path / "first.json"))
    assert first.returncode == 0, first.stderr
    resumed = run_mpi(2, *SOLVE, "--max-iter", "300", "--checkpoint", str(tmp_path / "state.npz"),
                      "--output", str(tmp_path / "resumed.json"))
    assert resumed.returncode == 0, resumed.stderr
    expected = json.loads((tmp_path / "whole.json").read_text())
    result = json.loads((tmp_path / "resumed.json").read_text())
    assert result["info"]["resumed_at"] == 120 and result["iterations"] == 300
    assert result["x"] == expected["x"], "a resumed run must give the uninterrupted answer bit for bit"


def test_cli_sigusr1_checkpoints_and_sigterm_stops_then_resume_matches(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    from conftest import MPIEXEC
    environment = dict(__import__("os").environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    state = tmp_path / "state.npz"
    command = [str(MPIEXEC), "-n", "2", sys.executable, *SOLVE, "--max-iter", "3000",
               "--checkpoint", str(state), "--output", str(tmp_path / "stopped.json")]
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        process.send_signal(signal.SIGUSR1)  # mpiexec forwards it to every rank
        deadline = time.time() + 30
        while not state.exists() and time.time() < deadline:
            time.sleep(0.05)
        assert state.exists(), "SIGUSR1 must write a checkpoint"
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    stopped = json.loads((tmp_path / "stopped.json").read_text())
    if stopped["status"] != "interrupted":
        pytest.fail(f"the run finished before SIGTERM arrived ({stopped['iterations']} iterations); "
                    "make it longer")
    assert process.returncode == 3, stderr
    resumed = run_mpi(2, *SOLVE, "--max-iter", "3000", "--checkpoint", str(state),
                      "--output", str(tmp_path / "resumed.json"), timeout=120)
    whole = run_mpi(2, *SOLVE, "--max-iter", "3000", "--output", str(tmp_path / "whole.json"), timeout=120)
    assert resumed.returncode == 0 and whole.returncode == 0, resumed.stderr + whole.stderr
    result = json.loads((tmp_path / "resumed.json").read_text())
    assert result["info"]["resumed_at"] == stopped["iterations"]
    assert result["x"] == json.loads((tmp_path / "whole.json").read_text())["x"]
