"""``mpiopt train`` under mpiexec, as a user runs it: the same model as the Python API, checkpoints, errors."""
import json

import numpy as np
import pytest
from mpi4py import MPI

from conftest import run_mpi
from mpiopt.data import load_dataset
from mpiopt.models import get_model
from mpiopt.optim import get_optimizer
from mpiopt.train import train

TRAIN = ["-m", "mpiopt", "train", "--model", "mlp", "--hidden", "16", "--data", "digits", "--optimizer", "adam",
         "--lr", "1e-2", "--epochs", "2", "--batch-size", "64", "--bucket-bytes", "2048"]


def test_cli_train_at_two_ranks_matches_the_python_api(tmp_path):
    output = tmp_path / "train.json"
    completed = run_mpi(2, *TRAIN, "--zero-stage", "2", "--log-every", "10", "--output", str(output))
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count("mpiopt data-parallel training") == 1, "log must come from rank 0 only"
    assert "result written to" in completed.stdout
    result = json.loads(output.read_text())
    assert result["status"] == "finished" and result["steps"] == 44
    assert result["info"]["ranks"] == 2 and result["info"]["zero_stage"] == 2
    assert 0 < result["test"]["accuracy"] <= 1 and result["source"]["data"] == "digits"
    data = load_dataset("digits", MPI.COMM_SELF)
    model = get_model("mlp", n_features=64, n_classes=10, hidden=(16,), alpha=1e-4)
    direct = train(model, data.X_train, data.y_train, get_optimizer("adam", lr=1e-2), MPI.COMM_SELF, epochs=2,
                   batch_size=64)
    assert np.allclose(result["params"], direct.params, rtol=1e-12, atol=1e-14)


def test_cli_train_resumes_from_its_checkpoint(tmp_path):
    checkpoint = tmp_path / "train.ckpt.npz"
    straight = run_mpi(2, *TRAIN, "--quiet", "--output", str(tmp_path / "straight.json"))
    first = run_mpi(2, *TRAIN, "--quiet", "--max-steps", "17", "--checkpoint", str(checkpoint),
                    "--output", str(tmp_path / "first.json"))
    resumed = run_mpi(2, *TRAIN, "--compressor", "topk", "--ratio", "0.01", "--quiet", "--checkpoint",
                      str(checkpoint), "--output", str(tmp_path / "refused.json"))
    assert straight.returncode == first.returncode == 0, straight.stderr + first.stderr
    assert resumed.returncode == 2 and "belongs to another problem" in resumed.stderr, "another compressor"
    resumed = run_mpi(2, *TRAIN, "--quiet", "--checkpoint", str(checkpoint), "--output", str(tmp_path / "resumed.json"))
    assert resumed.returncode == 0, resumed.stderr
    before, after = (json.loads((tmp_path / name).read_text()) for name in ("first.json", "resumed.json"))
    assert before["status"] == "finished" and before["info"]["stop"] == "max_steps"
    assert after["info"]["resumed_at"] == 17
    assert after["params"] == json.loads((tmp_path / "straight.json").read_text())["params"]


def test_cli_train_compresses_with_the_registered_compressor(tmp_path):
    output = tmp_path / "topk.json"
    completed = run_mpi(2, *TRAIN, "--compressor", "topk", "--ratio", "0.01", "--quiet", "--output", str(output))
    assert completed.returncode == 0, completed.stderr
    result = json.loads(output.read_text())
    assert result["info"]["compressor"] == "topk" and result["info"]["settings"]["compressor_options"] == {"ratio": 0.01}
    assert sum(result["history"]["bytes_sent"]) > 0


def test_cli_train_gives_each_piece_its_own_options_as_declared(tmp_path):
    """--compressor-opt and --reducer-opt build one dict each, typed by the piece's declaration; the result
    records them as they were given, and the run is the Python API's with the same dicts."""
    output = tmp_path / "options.json"
    completed = run_mpi(2, *TRAIN, "--quiet", "--max-steps", "3", "--reducer", "ring-seg", "--reducer-opt",
                        "segment_bytes=256", "--compressor", "topk", "--compressor-opt", "ratio=0.05",
                        "--compression-mode", "two-pass", "--output", str(output), timeout=120)
    assert completed.returncode == 0, completed.stderr
    settings = json.loads(output.read_text())["info"]["settings"]
    assert settings["reducer_options"] == {"segment_bytes": 256} and settings["compressor_options"] == {"ratio": 0.05}
    assert settings["compression_mode"] == "two-pass"
    refused = run_mpi(2, *TRAIN, "--quiet", "--reducer", "ring", "--reducer-opt", "small=rd", "--output",
                      str(tmp_path / "refused.json"))
    assert refused.returncode == 2 and "reducer 'ring' takes segment_bytes; got small" in refused.stderr


def test_cli_train_bad_options_exit_with_one_clear_message(tmp_path):
    for arguments, message in ((["--momentum", "0.9"], "ranks 0-1: optimizer adam takes no momentum"),
                               (["--batch-size", "0"], "ranks 0-1: batch_size must be an integer >= 1, got 0"),
                               (["--zero-stage", "2", "--compressor", "sign"], "a compressor works with zero_stage 0")):
        completed = run_mpi(2, *TRAIN, "--quiet", *arguments, cwd=tmp_path, timeout=60)
        assert completed.returncode == 2, completed.stderr
        assert completed.stderr.count(message) == 1, completed.stderr
    assert not (tmp_path / "mpiopt_train.json").exists(), "no result file after an error"


@pytest.mark.parametrize("arguments, message", [
    (["--compressor", "topk", "--ratio", "0"], "topk: ratio must be in (0, 1], got 0.0"),
    (["--compressor", "topk", "--ratio", "1.5"], "topk: ratio must be in (0, 1], got 1.5"),
    (["--compressor", "powersgd", "--ratio", "0.5"],
     "compressor powersgd takes --rank, --min-compression-rate, --warm-start, --compressor-seed; got --ratio"),
    (["--ratio", "0.5"], "--ratio sets a compressor's option; choose the compressor with --compressor"),
    (["--compressor", "qsgd", "--bits", "5"], "qsgd: bits must be 8 or 4, got 5"),
])
def test_cli_train_refuses_a_bad_compressor_option_in_one_line_before_any_work(tmp_path, arguments, message):
    # issue 19, item 6: an 85-line traceback on every rank, a TypeError, or silence
    completed = run_mpi(2, *TRAIN, "--quiet", *arguments, cwd=tmp_path, timeout=120)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr == f"error: ranks 0-1: {message}\n", "one line, once"
    assert not (tmp_path / "mpiopt_train.json").exists()


def test_cli_train_sets_every_compressor_option_it_declares(tmp_path):
    from mpiopt.cli import build_parser
    from mpiopt.compression import COMPRESSORS
    usage = build_parser().parse_args(["train"]).parser.format_help()
    for name, compressor in COMPRESSORS.items():  # the flags come from the compressors' declared options
        for option in set(compressor.options) - {"worker"}:  # the reducer gives each rank its own worker
            flag = "--compressor-seed" if option == "seed" else "--" + option.replace("_", "-")
            assert flag in usage, (name, option)
    sent = {}
    for rank in (1, 2):
        output = tmp_path / f"rank{rank}.json"
        completed = run_mpi(2, *TRAIN, "--quiet", "--max-steps", "3", "--compressor", "powersgd", "--rank",
                            str(rank), "--output", str(output), timeout=120)
        assert completed.returncode == 0, completed.stderr
        result = json.loads(output.read_text())
        assert result["info"]["settings"]["compressor_options"] == {"rank": rank}
        sent[rank] = sum(result["history"]["bytes_sent"])
    assert sent[2] > sent[1] > 0, "rank 2 sends larger factors than rank 1"
    output = tmp_path / "qsgd.json"
    completed = run_mpi(2, *TRAIN, "--quiet", "--max-steps", "3", "--compressor", "qsgd", "--bits", "4",
                        "--bucket-size", "64", "--output", str(output), timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert json.loads(output.read_text())["info"]["settings"]["compressor_options"] == {"bits": 4, "bucket_size": 64}
