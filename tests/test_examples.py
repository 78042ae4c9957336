"""The examples run as a user runs them, and say what they should."""
import json
from pathlib import Path

import pytest

from conftest import run_mpi

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(240)
def test_three_hospitals_compares_central_admm_fedavg_and_fedprox(tmp_path):
    output = tmp_path / "three.json"
    completed = run_mpi(3, "-m", "mpi4py", str(ROOT / "examples" / "three_hospitals.py"), "--rounds", "10",
                        "--output", str(output), timeout=200)
    assert completed.returncode == 0, completed.stderr
    runs = {run["method"]: run for run in json.loads(output.read_text())["runs"]}
    assert runs["central"]["relative_gap"] == 0.0
    assert abs(runs["consensus ADMM"]["relative_gap"]) < 1e-8, "ADMM solves the same convex problem"
    assert runs["FedAvg"]["relative_gap"] > 0 and runs["FedProx (mu = 0.1)"]["relative_gap"] > 0
    assert runs["consensus ADMM, site C offline every other round"]["rounds"] == 2 * runs["consensus ADMM"]["rounds"]
    assert runs["FedAvg, site C offline every other round"]["relative_gap"] > runs["FedAvg"]["relative_gap"]
    noisy = runs["FedAvg + DP (S = 1.0, z = 1.0)"]
    assert noisy["epsilon"] > 0 and noisy["epsilon"] < runs["FedAvg + DP (S = 1.0, z = 0.1)"]["epsilon"]
    assert completed.stdout.count("| method |") == 1, "the table is printed once, by rank 0"
