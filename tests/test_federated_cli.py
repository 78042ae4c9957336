"""``mpiopt federated`` under mpiexec, as a user runs it: the Python API's model, CSV, checkpoints, errors."""
import csv
import json

import numpy as np
import pytest
from mpi4py import MPI

from cli_signals import shim_environment
from conftest import run_mpi
from mpiopt.data import load_dataset
from mpiopt.federated import partition, run_federated, split_clients
from mpiopt.models import get_model
from mpiopt.slurm import render_script

FEDERATED = ["-m", "mpiopt", "federated", "--strategy", "fedprox", "--mu", "0.01", "--data", "digits",
             "--partition", "dirichlet", "--alpha", "0.5", "--clients", "20", "--fraction", "0.3", "--rounds", "4",
             "--local-epochs", "2", "--batch-size", "10", "--lr", "0.05", "--dropout", "0.1", "--stragglers", "0.5"]


def test_cli_federated_at_two_ranks_matches_the_python_api(tmp_path):
    output, table = tmp_path / "fed.json", tmp_path / "fed.csv"
    completed = run_mpi(2, *FEDERATED, "--output", str(output), "--csv", str(table))
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count("mpiopt federated learning") == 1, "log must come from rank 0 only"
    assert "result written to" in completed.stdout
    result = json.loads(output.read_text())
    assert result["status"] == "finished" and result["rounds"] == 4 and result["info"]["ranks"] == 2
    assert result["source"]["partition"] == "dirichlet" and 0 < result["test_accuracy"] <= 1
    assert [row["round"] for row in csv.DictReader(open(table))] == ["1", "2", "3", "4"]
    data = load_dataset("digits", MPI.COMM_SELF)
    clients = split_clients(data.X_train, data.y_train, partition("dirichlet", data.y_train, 20, 0, alpha=0.5))
    model = get_model("softmax", n_features=64, n_classes=10, alpha=0.0)
    direct = run_federated(model, clients, "fedprox", MPI.COMM_SELF, strategy_options={"mu": 0.01}, fraction=0.3,
                           rounds=4, local_epochs=2, batch_size=10, lr=0.05, dropout=0.1, stragglers=0.5)
    assert np.array_equal(result["params"], direct.params)



def test_cli_federated_runs_the_new_strategies_attacks_and_compressed_uploads_as_the_python_api(tmp_path):
    output = tmp_path / "fed.json"
    completed = run_mpi(2, "-m", "mpiopt", "federated", "--strategy", "trimmed_mean", "--strategy-opt", "beta=0.25",
                        "--clients", "12", "--fraction", "0.5", "--rounds", "3", "--lr", "0.05", "--byzantine", "0.25",
                        "--attack", "gaussian", "--attack-opt", "scale=2", "--compressor", "topk", "--compressor-opt",
                        "ratio=0.1", "--uplink-feedback", "ef21", "--quiet", "--output", str(output))
    assert completed.returncode == 0, completed.stderr
    result = json.loads(output.read_text())
    data = load_dataset("digits", MPI.COMM_SELF)
    clients = split_clients(data.X_train, data.y_train, partition("iid", data.y_train, 12, 0))
    model = get_model("softmax", n_features=64, n_classes=10, alpha=0.0)
    direct = run_federated(model, clients, "trimmed_mean", MPI.COMM_SELF, strategy_options={"beta": 0.25},
                           fraction=0.5, rounds=3, lr=0.05, byzantine=0.25, attack="gaussian",
                           attack_options={"scale": 2.0}, compressor="topk", compressor_options={"ratio": 0.1},
                           uplink_feedback="ef21")
    assert np.array_equal(result["params"], direct.params)
    assert result["history"]["byzantine_clients"] == direct.history["byzantine_clients"]
    assert result["history"]["bytes_sent"] == direct.history["bytes_sent"]
    refused = run_mpi(2, "-m", "mpiopt", "federated", "--strategy", "fedadam", "--server-lr", "0.5", "--rounds",
                      "1", "--quiet", "--output", str(tmp_path / "refused.json"))
    assert refused.returncode == 2 and "strategy fedadam takes no server_lr" in refused.stderr


def test_cli_federated_client_sampling_poisson_is_the_python_apis(tmp_path):
    output = tmp_path / "fed.json"
    arguments = [*FEDERATED[:FEDERATED.index("--dropout")], "--client-sampling", "poisson"]
    completed = run_mpi(2, *arguments, "--output", str(output))
    assert completed.returncode == 0, completed.stderr
    result = json.loads(output.read_text())
    assert "poisson" in json.dumps(result["info"]["sampling"])
    data = load_dataset("digits", MPI.COMM_SELF)
    clients = split_clients(data.X_train, data.y_train, partition("dirichlet", data.y_train, 20, 0, alpha=0.5))
    model = get_model("softmax", n_features=64, n_classes=10, alpha=0.0)
    direct = run_federated(model, clients, "fedprox", MPI.COMM_SELF, strategy_options={"mu": 0.01}, fraction=0.3,
                           rounds=4, local_epochs=2, batch_size=10, lr=0.05, client_sampling="poisson")
    fixed = run_federated(model, clients, "fedprox", MPI.COMM_SELF, strategy_options={"mu": 0.01}, fraction=0.3,
                          rounds=4, local_epochs=2, batch_size=10, lr=0.05)
    assert np.array_equal(result["params"], direct.params) and not np.array_equal(direct.params, fixed.params)

def test_cli_federated_resumes_from_its_checkpoint(tmp_path):
    checkpoint = tmp_path / "fed.ckpt.npz"
    straight = run_mpi(2, *FEDERATED, "--quiet", "--output", str(tmp_path / "straight.json"))
    first = run_mpi(2, *FEDERATED[:-12], "--rounds", "2", *FEDERATED[-10:], "--quiet", "--checkpoint",
                    str(checkpoint), "--output", str(tmp_path / "first.json"))
    assert straight.returncode == first.returncode == 0, straight.stderr + first.stderr
    resumed = run_mpi(2, *FEDERATED, "--quiet", "--checkpoint", str(checkpoint), "--output",
                      str(tmp_path / "resumed.json"))
    assert resumed.returncode == 0, resumed.stderr
    before, after = (json.loads((tmp_path / name).read_text()) for name in ("first.json", "resumed.json"))
    assert before["rounds"] == 2 and after["info"]["resumed_at"] == 2
    assert after["params"] == json.loads((tmp_path / "straight.json").read_text())["params"]


def test_cli_federated_bad_options_exit_with_one_clear_message(tmp_path):
    for arguments, message in ((["--strategy", "fedavg", "--mu", "0.1"], "fedavg takes no mu"),
                               (["--fraction", "2"], "fraction must be in (0, 1]")):
        completed = run_mpi(2, "-m", "mpiopt", "federated", "--clients", "10", "--rounds", "1", *arguments,
                            "--output", str(tmp_path / "bad.json"))
        assert completed.returncode == 2 and completed.stderr.count(message) == 1, completed.stderr
        assert not (tmp_path / "bad.json").exists()


def test_federated_is_a_resumable_slurm_workload():
    script = render_script("federated", ["--rounds", "100"], ntasks=4)
    assert "-m mpiopt federated --rounds 100 --checkpoint \"$CHECKPOINT\"" in script


@pytest.mark.parametrize("arguments, hidden, message", [
    (["--plot", "rounds.png"], "matplotlib", "--plot: plotting needs matplotlib"),
    (["--dp-clip", "1.0"], "dp_accounting", "the privacy accountant needs the dp-accounting package"),
    (["--data", "breast_cancer"], "sklearn", "pip install 'mpiopt[sklearn]'"),
])
def test_cli_federated_refuses_an_option_whose_package_is_missing_before_the_first_round(tmp_path, arguments,
                                                                                         hidden, message):
    # issue 19, item 9: --plot without matplotlib failed after all the rounds (the JSON written, then a traceback)
    environment = shim_environment(tmp_path, block=[hidden])
    completed = run_mpi(2, "-m", "mpiopt", "federated", "--clients", "10", "--rounds", "2", *arguments,
                        "--output", "fed.json", cwd=tmp_path, env=environment, timeout=120)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.count(message) == 1 and completed.stderr.count("\n") == 1, completed.stderr
    assert "Traceback" not in completed.stderr and not (tmp_path / "fed.json").exists()


def test_cli_federated_refuses_a_robust_rule_no_round_can_satisfy_before_the_first_round(tmp_path):
    # the defaults sample 10 of 100 clients a round; Bulyan with f = 2 needs 4 f + 3 = 11 of them
    completed = run_mpi(2, "-m", "mpiopt", "federated", "--strategy", "bulyan", "--strategy-opt", "num_malicious=2",
                        "--byzantine", "0.2", "--attack", "alie", "--output", "fed.json", cwd=tmp_path, timeout=120)
    message = ("ranks 0-1: bulyan needs at least 11 reporting clients a round (n >= 4 f + 3 with f = 2), and a round "
               "has at most 10 (10 of the 100 clients sampled, fraction 0.1)")
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.count(message) == 1 and completed.stderr.count("\n") == 1, completed.stderr
    assert "mpiopt federated learning" not in completed.stdout and not (tmp_path / "fed.json").exists()
