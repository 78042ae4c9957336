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
