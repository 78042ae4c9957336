"""The benchmarks run end to end on tiny problems, and the report renders each one's JSON by its name."""
import json
import sys
from pathlib import Path

import pytest

from conftest import run_mpi

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import common  # noqa: E402
import report  # noqa: E402

CASES = [
    ("admm_lasso.py", ["--rows", "2000", "--cols", "30", "--repeat", "1", "--iterations", "10"], "lasso 2000 x 30"),
    ("admm_general.py", ["--part", "logistic", "--rows", "2000", "--cols", "30", "--repeat", "1"], "L1 logistic"),
    ("admm_general.py", ["--part", "path", "--rows", "2000", "--cols", "30", "--repeat", "1"], "lasso path"),
    ("admm_general.py", ["--part", "rho", "--rows", "2000", "--cols", "30", "--repeat", "1"], "adaptive rho"),
    ("allreduce.py", ["-b", "8", "-e", "4K", "--reducers", "ring,rd"], "2 ranks, 1 node(s), float32 sum"),
    ("compression.py", ["--sizes", "64K", "--allreduce-size", "64K", "--repeat", "1", "--hidden", "8",
                        "--epochs", "1", "--batch-size", "256", "--compressors", "none,fp16,sign,top-1%,powersgd r=4"],
     "Compressors on 64 KiB of float32"),
    ("train.py", ["--hidden", "16,16", "--bucket-bytes", "1K", "--steps", "2", "--repeat", "1", "--batch-size", "32"],
     "mlp 64-16-16-10"),
    ("federated.py", ["--quick", "--rounds", "2", "--clients", "20", "--hidden", "8", "--fedprox-rounds", "1",
                      "--fedprox-epochs", "1", "--loss-every", "1"], "FedAvg against FedSGD on digits"),
    ("async_sgd.py", ["--quick"], "Heterogeneous-worker SGD on the worst-case quadratic"),
]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("script, arguments, title", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_benchmark_json_is_rendered_by_the_report(tmp_path, script, arguments, title):
    output = tmp_path / "result.json"
    completed = run_mpi(2, str(ROOT / "benchmarks" / script), *arguments, "--output", str(output), timeout=200)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count(f"JSON written to {output}") == 1
    assert report.render(json.loads(output.read_text())).startswith(title)


def test_report_refuses_a_benchmark_it_has_no_table_for():
    with pytest.raises(SystemExit, match="no table for benchmark 'mystery'"):
        report.render({"benchmark": "mystery"})


def test_sizes_are_parsed_like_osu_and_nccl_tests():
    assert [common.size_argument(text) for text in ("8", "64K", "256M", "1G", "4kb")] == [8, 65536, 256 << 20,
                                                                                          1 << 30, 4096]
    with pytest.raises(Exception, match="expected a size"):
        common.size_argument("lots")


def _kernels_environment():
    import os
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")


@pytest.mark.timeout(60)
def test_kernels_benchmark_measures_the_numpy_twins_without_a_gpu(tmp_path):
    import subprocess
    output = tmp_path / "kernels.json"
    completed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernels.py"), "--cpu-only", "--quick",
                                "--output", str(output)], capture_output=True, text=True, timeout=50,
                               env=_kernels_environment())
    assert completed.returncode == 0, completed.stderr
    result = json.loads(output.read_text())
    assert result["benchmark"] == "kernels" and result["gpu"] is None and not result["errors"]
    assert {row["backend"] for row in result["kernels"] + result["compressors"]} == {"numpy"}
    assert all(row["gbs"] > 0 for row in result["kernels"])
    assert "per_iteration_s" in result["lasso"]["cpu"] and "gpu" not in result["lasso"]
    text = report.render(result)
    assert text.startswith("Kernels on the CPU only") and "the GPU numbers are pending" in text


@pytest.mark.timeout(60)
def test_gpu_check_script_ends_cleanly_without_a_gpu(tmp_path):
    import shutil
    import subprocess

    from mpiopt.core import backend
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    nvidia_smi = shutil.which("nvidia-smi")
    listed = nvidia_smi and "GPU " in subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True,
                                                     timeout=30).stdout
    if backend.device_count() > 0 or listed:
        pytest.skip("a GPU is here: run benchmarks/gpu_check.sh itself (it takes minutes)")
    folder = tmp_path / "gpu-check"
    completed = subprocess.run([bash, str(ROOT / "benchmarks" / "gpu_check.sh"), "--no-install", "--quick",
                                str(folder)], capture_output=True, text=True, timeout=50,
                               env=dict(_kernels_environment(), PYTHON=sys.executable))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    summary = (folder / "summary.txt").read_text()
    assert "no GPU" in summary and "RESULT: no GPU here" in summary
    assert (folder / "env.txt").is_file()
    result = json.loads((folder / "kernels.json").read_text())
    assert result == {"benchmark": "kernels", "gpu": None, "reason": result["reason"], "host": result["host"]}
    assert (folder / "kernels.md").read_text().startswith("Kernels: no GPU here")
