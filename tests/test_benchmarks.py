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
    ("admm_general.py", ["--part", "rho", "--rows", "2000", "--cols", "30", "--repeat", "1", "--rho-factors",
                         "0.3,1,3"], "adaptive rho"),
    ("allreduce.py", ["-b", "8", "-e", "4K", "-f", "8", "--reducers", "ring,rd"], "2 ranks, 1 node(s), float32 sum"),
    ("compression.py", ["--sizes", "64K", "--allreduce-size", "64K", "--repeat", "1", "--hidden", "8",
                        "--epochs", "1", "--batch-size", "256", "--compressors", "none,fp16,sign,top-1%,powersgd r=4"],
     "Compressors on 64 KiB of float32"),
    ("train.py", ["--hidden", "16,16", "--bucket-bytes", "1K", "--steps", "2", "--repeat", "1", "--batch-size", "32"],
     "mlp 64-16-16-10"),
    ("federated.py", ["--quick", "--rounds", "2", "--clients", "20", "--hidden", "8", "--fedprox-rounds", "1",
                      "--fedprox-epochs", "1", "--loss-every", "1"], "FedAvg against FedSGD on digits"),
    ("federated.py", ["--part", "niid", "--seeds", "1", "--niid-rounds", "1", "--niid-epochs", "1",
                      "--byzantine-rounds", "1"], "A NIID-Bench-style study"),
    ("async_sgd.py", ["--quick"], "Heterogeneous-worker SGD on the worst-case quadratic"),
    ("async_sgd_papers.py", ["--quick"], "The heterogeneous-worker papers' settings (simulator)"),
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


# Issue 14's designs suite (benchmarks/sparse_solvers.py): scikit-learn, celer and skglm are optional, so the quick
# run must pass, and say "not installed", without celer and skglm.
import importlib.util  # noqa: E402

import numpy as np  # noqa: E402

import sparse_solvers  # noqa: E402

SUITE_CASES = [
    ("admm_lasso.py", ["--quick"], "lasso"),
    ("admm_general.py", ["--part", "logistic-designs", "--quick", "--designs", "sparse"], "logistic"),
    ("admm_general.py", ["--part", "path-designs", "--quick", "--designs", "independent"], "path"),
]


def _check_suite(result, family, missing=()):
    assert result["family"] == family and result["ranks"] == 2
    assert result["markdown"] == sparse_solvers.render_tables(result)
    for entry in result["designs"]:
        rows = {row["solver"].split(" (tol")[0]: row for row in entry["rows_of_table"]}
        admm = [row for row in entry["rows_of_table"] if row["package"] == "mpiopt"]
        assert len(admm) == len(result["variants"]) >= 1
        for row in admm:  # tiny problems: ADMM reaches 1e-6 and certifies its gap
            assert row["status"] == "reached" and row["relative_gap"] <= result["target"]
            assert row["mpiopt_relative_gap"] is not None and row["iterations"] > 0
        for row in entry["rows_of_table"]:
            installed = result["installed"][row["package"]] if row["package"] != "mpiopt" else True
            if row["package"] in missing or not installed:
                assert row["status"] == "not installed"
            elif row["package"] == "scikit-learn":
                assert row["status"] == "reached" and row["seconds"] > 0
        assert all(np.isfinite(entry["reference_objectives"])) and rows


@pytest.mark.timeout(240)
@pytest.mark.parametrize("script, arguments, family", SUITE_CASES, ids=[c[2] for c in SUITE_CASES])
def test_designs_suite_quick_run_at_two_ranks(tmp_path, script, arguments, family):
    output = tmp_path / "suite.json"
    completed = run_mpi(2, str(ROOT / "benchmarks" / script), *arguments, "--output", str(output), timeout=200)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count(f"JSON written to {output}") == 1
    result = json.loads(output.read_text())
    _check_suite(result, family)
    for name in ("celer", "skglm"):
        assert result["installed"][name] == (importlib.util.find_spec(name) is not None)
    assert (tmp_path / "suite.md").read_text().startswith(result["markdown"].split("\n")[0])


@pytest.mark.timeout(120)
def test_designs_suite_reports_missing_competitors(tmp_path):
    output = tmp_path / "suite.json"
    completed = run_mpi(2, str(ROOT / "benchmarks" / "admm_lasso.py"), "--quick", "--designs", "independent,wide",
                        "--pretend-missing", "celer,skglm", "--output", str(output), timeout=100)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(output.read_text())
    assert result["installed"] == {"scikit-learn": True, "celer": False, "skglm": False}
    _check_suite(result, "lasso", missing=("celer", "skglm"))
    # each missing package, on each of the 2 designs, once in the summary and once in the detail table
    assert result["markdown"].count("not installed") == 2 * 2 * 2


def test_designs_are_seeded_and_scaled_as_documented():
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--cols", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    sparse_solvers.add_arguments(parser, "lasso")
    args = parser.parse_args(["--sparse-rows", "20000", "--sparse-cols", "200", "--sparse-density", "0.01"])
    A, b = sparse_solvers.make_design("corr0.9", args)
    again, _ = sparse_solvers.make_design("corr0.9", args)
    assert A.flags.c_contiguous and np.array_equal(A, again)
    correlation = np.corrcoef(A[:, :4], rowvar=False)
    assert abs(correlation[0, 1] - 0.9) < 0.03 and abs(correlation[0, 2] - 0.81) < 0.04
    S, y = sparse_solvers.make_design("sparse", args, logistic=True)
    assert S.format == "csr" and set(np.unique(y)) <= {-1.0, 1.0}
    assert abs(S.nnz / (20000 * 200) - 0.01) < 0.003
    frequencies = np.diff(S.tocsc().indptr)
    assert frequencies[0] > 20 * frequencies[-1] > 0  # power law: column k ~ 1 / (k + 1)
    with pytest.raises(SystemExit, match="unknown design"):
        sparse_solvers.chosen_designs("independent,banana")


def test_relative_gaps_use_the_final_reference_and_the_fastest_reached_run():
    entry = {"design": "independent", "reference_objectives": [100.0], "runs": [
        {"solver": "skglm Lasso", "package": "skglm", "tolerance": 1e-4, "seconds": 0.1, "iterations": 3,
         "objectives": [100.001]},
        {"solver": "skglm Lasso", "package": "skglm", "tolerance": 1e-5, "seconds": 0.2, "iterations": 4,
         "objectives": [100.00001]},
        {"solver": "celer Lasso", "package": "celer", "not_installed": True},
        {"solver": "mpiopt ADMM lasso (working_set=False)", "package": "mpiopt", "tolerance": 1e-6, "seconds": 0.15,
         "iterations": 40, "objectives": [100.0], "mpiopt_relative_gap": 1e-7}]}
    sparse_solvers.score_runs(entry, 1e-6)
    rows = {row["solver"]: row for row in sparse_solvers.table_rows(entry, "lasso", {})}
    assert rows["skglm Lasso"]["tolerance"] == 1e-5 and rows["celer Lasso"]["status"] == "not installed"
    admm = rows["mpiopt ADMM lasso (working_set=False)"]
    assert admm["ratio_to_fastest_competitor"] == pytest.approx(0.75) and admm["target_met"] is True



def test_text_corpus_cuts_labels_and_caches_by_its_sources(tmp_path, monkeypatch):
    import scipy.sparse as sp

    import text_corpus
    # Cut at the first blank line after chunk_lines non-blank ones, or after 4 chunk_lines lines; a
    # remainder of fewer than 3 non-blank lines is dropped.
    assert text_corpus.chunks("a\nb\n\nc\nd\ne\n\nf\n", 2) == ["a\nb", "c\nd\ne"]
    assert text_corpus.chunks("x\n" * 10, 2) == ["x\nx\nx\nx\nx\nx\nx\nx"]
    positive, negative = tmp_path / "numpy", tmp_path / "stdlib"
    (positive / "sub").mkdir(parents=True)
    (negative / "test").mkdir(parents=True)
    (positive / "sub" / "a.py").write_text("import alpha\nbeta gamma\n\ndelta alpha\nalpha\nbeta\n")
    (positive / "b.rst").write_text("alpha words here\n\nbeta more words\n")
    (negative / "c.py").write_text("gamma delta\nepsilon gamma\nalpha\n")
    (negative / "test" / "skipped.py").write_text("zeta eta\ntheta\niota\n")  # the stdlib's own tests
    (negative / "d.bin").write_text("zeta eta\ntheta\niota\n")  # not a text file's suffix
    monkeypatch.setattr(text_corpus, "source_roots", lambda: {"numpy": str(positive), "stdlib": str(negative)})
    monkeypatch.setenv("MPIOPT_CACHE_DIR", str(tmp_path / "cache"))
    settings = dict(text_corpus.SETTINGS, chunk_lines=1, min_df=1, max_features=None)
    X, y, info = text_corpus.load_text_corpus(settings=settings)
    # Documents in sorted path order: "alpha words here" (b.rst), "import alpha beta gamma" and "delta alpha
    # alpha beta" (sub/a.py), "gamma delta epsilon gamma alpha" (c.py); 8 words and 11 pairs of them.
    assert sp.isspmatrix_csr(X) and X.dtype == np.float64 and X.shape == (4, 19) and X.nnz == 5 + 7 + 6 + 8
    assert y.tolist() == [1.0, 1.0, 1.0, -1.0] and info["nnz"] == X.nnz and not info["from_cache"]
    idf = {df: np.log(5 / (1 + df)) + 1 for df in (1, 2, 4)}  # smooth idf of a term in df of the 4 documents
    third = np.array([idf[2], (1 + np.log(2)) * idf[4], idf[2], idf[1], idf[1], idf[2]])  # sublinear tf: 1 + log 2
    assert np.allclose(np.sort(X[2].data), np.sort(third / np.linalg.norm(third)))
    again, y_again, cached = text_corpus.load_text_corpus(settings=settings)
    assert cached["from_cache"] and cached["cache"] == info["cache"] and (again != X).nnz == 0
    (negative / "c.py").write_text("gamma delta\nepsilon gamma\nbeta\n")  # another machine's sources
    _, _, rebuilt = text_corpus.load_text_corpus(settings=settings)
    assert rebuilt["cache"] != info["cache"] and not rebuilt["from_cache"]


@pytest.mark.timeout(240)
def test_torch_train_benchmark_quick_run(tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'mpiopt[torch]')")
    output = tmp_path / "torch.json"
    completed = run_mpi(2, str(ROOT / "benchmarks" / "torch_train.py"), "--quick", "--output", str(output),
                        timeout=200)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count(f"JSON written to {output}") == 1 and completed.stdout.count("| target |") == 1
    result = json.loads(output.read_text())
    configs = {row["config"] for row in result["rows"]}
    assert configs == {"ddp", "ddp+torch-fp16", "ddp+mpiopt-fp16", "ddp+mpiopt-topk1%", "mpi-ring", "mpi-topk1%"}
    assert all(row["step_s"] > 0 and row["bytes_per_step"] > 0 for row in result["rows"])
    assert len(result["targets"]) == 3 and result["loss"]["topk"]["bytes"] < result["loss"]["none"]["bytes"]
