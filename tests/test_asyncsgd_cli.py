"""``mpiopt async-sgd`` as a user runs it: the simulator at one rank, the MPI runtime at three, the table, errors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_mpi
from mpiopt.cli import build_parser
from mpiopt.core.registry import names
from mpiopt.slurm import render_script

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["-m", "mpiopt", "async-sgd", "--problem", "quadratic", "--dim", "10", "--workers", "4", "--tau", "sqrt",
         "--quiet"]
HEADER = ("method", "status", "steps", "gradients", "discarded", "cancelled", "time to eps", "predicted")


def runnable(problem="quadratic"):
    """The methods --method all runs on ``problem`` without communication times (all but those that need them,
    and Freya PAGE, which needs a finite sum)."""
    from mpiopt.asyncsgd import AsyncSGDSettings, available_methods as methods
    found = methods(AsyncSGDSettings(), problem)
    assert ("freya-page" in found) == (problem in ("least-squares", "logistic"))
    return found


def run_one(*arguments, cwd=None):
    environment = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env=environment)


def _choices(parser, dest):
    return next(action.choices for action in parser._actions if action.dest == dest)


def _table_rows(stdout):
    """The table's rows as lists of cells, keyed by method (the lines between the header's rules and the last)."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("method "))
    rows = {}
    for line in lines[header + 2:]:
        if line.startswith("---"):
            break
        cells = [cell for cell in line.split("  ") if cell.strip()]
        rows[cells[0].strip()] = [cell.strip() for cell in cells]
    return lines[header], rows


def test_parser_choices_come_from_the_registries():
    commands = next(action for action in build_parser()._actions if action.dest == "command")
    parser = commands.choices["async-sgd"]
    assert list(_choices(parser, "method")) == names("asyncsgd-method") + ["all"]
    assert set(names("asyncsgd-method")) >= {"minibatch", "asgd", "rennala", "ringmaster"}
    assert list(_choices(parser, "tau")) == names("tau-model")
    assert list(_choices(parser, "problem")) == names("asyncsgd-problem")
    assert list(_choices(parser, "runtime")) == ["simulator", "mpi"]
    assert list(_choices(parser, "dataset")) == names("dataset")


@pytest.mark.timeout(60)
def test_simulator_run_writes_json_and_prints_the_table(tmp_path):
    completed = run_one(*SMALL, "--method", "ringmaster", "--threshold", "inf", "--output", "r.json", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    for field in ("status", "history", "timings", "info", "x", "steps", "gradients", "time", "time_to_epsilon",
                  "predicted", "source"):
        assert field in result, field
    assert result["status"] == "converged" and result["time_to_epsilon"] > 0 and len(result["x"]) == 10
    assert result["info"]["stop"] == "epsilon"
    assert result["info"]["method"] == "ringmaster" and result["info"]["n_workers"] == 4
    assert result["info"]["runtime"] == "simulator" and result["info"]["parameters"]["threshold"] == "inf"
    assert result["source"] == {"problem": "quadratic", "problem_options": {"dim": 10}, "ranks": 1}
    assert set(result["predicted"]) >= {"minibatch", "asgd", "rennala", "ringmaster", "m_star"}
    header, rows = _table_rows(completed.stdout)
    assert all(column in header for column in HEADER) and "rennala" not in header, "no ratios for one method"
    row = rows["ringmaster"]
    assert row[1:4] == ["converged", str(result["steps"]), str(result["gradients"])] and row[-1] == "epsilon"
    assert row[6] == f"{result['time_to_epsilon']:.6g}" and row[7] == f"{result['predicted']['ringmaster']:.4g}"
    assert "mpiopt async-sgd" not in completed.stdout, "--quiet: no iteration log"
    assert completed.stdout.rstrip().endswith("result written to r.json")


@pytest.mark.timeout(60)
def test_method_all_compares_every_method_in_one_table_json_and_plot(tmp_path):
    try:
        import matplotlib  # noqa: F401
        plot = ["--plot", "all.png"]
    except ImportError:  # the test extra does not install it: the table and the JSON are still checked
        plot = []
    completed = run_one(*SMALL, "--method", "all", "--output", "all.json", *plot, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    payload = json.loads((tmp_path / "all.json").read_text())
    methods = runnable()
    assert sorted(payload["methods"]) == sorted(methods) == sorted(payload["results"])
    assert payload["methods"][:4] == ["minibatch", "asgd", "rennala", "ringmaster"]
    header, rows = _table_rows(completed.stdout)
    assert "measured/rennala" in header and "predicted/rennala" in header
    assert list(rows) == payload["methods"]
    for name in methods:
        result, row = payload["results"][name], payload["comparison"][name]
        assert result["info"]["method"] == name and result["info"]["n_workers"] == 4
        assert row["measured"] == result["time_to_epsilon"]
        assert row["predicted/rennala"] == pytest.approx(result["predicted"][name] / result["predicted"]["rennala"])
        assert rows[name][8] == f"{row['measured/rennala']:.3f}"
        assert rows[name][9] == f"{row['predicted/rennala']:.3f}"
    assert payload["comparison"]["rennala"]["measured/rennala"] == 1.0
    assert payload["comparison"]["minibatch"]["predicted/rennala"] > 1, "sqrt times: minibatch waits"
    if plot:
        assert (tmp_path / "all.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(60)
def test_explicit_taus_and_a_data_problem(tmp_path):
    completed = run_one("-m", "mpiopt", "async-sgd", "--problem", "logistic", "--batch-size", "8",
                        "--taus", "1,2.5,4", "--method", "asgd", "--max-steps", "50", "--quiet",
                        "--output", "t.json", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    result = json.loads((tmp_path / "t.json").read_text())
    assert result["info"]["n_workers"] == 3 and result["info"]["tau_means"] == [1, 2.5, 4]
    assert result["info"]["problem"]["batch_size"] == 8 and result["status"] == "finished"
    assert result["info"]["stop"] == "max_steps"
    assert "not reached" in _table_rows(completed.stdout)[1]["asgd"]


@pytest.mark.timeout(60)
def test_mpi_runtime_at_three_ranks_prints_the_table_once(tmp_path):
    completed = run_mpi(3, *SMALL[:-5], "--runtime", "mpi", "--method", "all", "--time-unit", "0.0005",
                        "--max-steps", "10", "--max-gradients", "200", "--output", "mpi.json",
                        cwd=tmp_path, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count("method ") == 1 and completed.stdout.count("result written to mpi.json") == 1
    assert completed.stdout.count("mpiopt async-sgd") == len(runnable()), "one log per method"
    payload = json.loads((tmp_path / "mpi.json").read_text())
    for name, result in payload["results"].items():
        assert result["info"]["runtime"] == "mpi" and result["info"]["n_workers"] == 2
        assert result["status"] in ("converged", "finished"), name
        assert result["info"]["time_unit"] == 0.0005
    assert payload["source"]["ranks"] == 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("arguments, message", [
    (["--runtime", "mpi", "--workers", "5"],
     "ranks 0-2: --workers 5, but the mpi runtime at 3 ranks has 2 workers (ranks - 1); omit --workers"),
    (["--threshold", "0"], "ranks 0-2: threshold must be None, an integer >= 1 or inf, got 0"),
    (["--problem", "logistic", "--dim", "5"], "ranks 0-2: problem logistic takes no --dim"),
    (["--taus", "1,2"], "ranks 0-2: --taus gives 2 compute times for 4 workers"),
    (["--threshold", "many"], "mpiopt async-sgd: error: argument --threshold: expected an integer >= 1 or inf"),
])
def test_bad_options_exit_2_with_one_message(tmp_path, arguments, message):
    completed = run_mpi(3, "-m", "mpiopt", "async-sgd", "--workers", "4", "--quiet", *arguments, cwd=tmp_path,
                        timeout=60)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.count(message) == 1, completed.stderr
    assert completed.stdout == "" and list(tmp_path.iterdir()) == [], "nothing run, nothing written"


@pytest.mark.timeout(60)
def test_an_output_that_cannot_be_written_is_refused_before_any_work(tmp_path):
    (tmp_path / "plain-file").write_text("x")
    (tmp_path / "folder").mkdir()
    for arguments, message in ((["--output", "plain-file/r.json"], "cannot write output plain-file/r.json: "),
                               (["--output", "folder"], "cannot write output folder: "),
                               (["--plot", "folder"], "cannot write plot folder: ")):
        completed = run_mpi(2, *SMALL, "--runtime", "mpi", "--workers", "1", *arguments, cwd=tmp_path,
                            timeout=60)
        assert completed.returncode == 2, completed.stderr
        assert completed.stderr.count(message) == 1, completed.stderr
        assert completed.stdout == "", "no run and no table"
    assert not (tmp_path / "mpiopt_async_sgd.json").exists()


def test_async_sgd_is_a_slurm_workload_that_does_not_resume(tmp_path):
    assert "async-sgd" in names("workload")
    script = render_script("async-sgd", ["--runtime", "mpi", "--method", "all"], ntasks=5)
    assert 'srun --mpi="$MPI_PLUGIN" "$PYTHON" -m mpiopt async-sgd --runtime mpi --method all &' in script
    assert "--checkpoint" not in script
    completed = run_one("-m", "mpiopt", "slurm", "async-sgd", "-n", "3", "--render-only", "--", "--quiet",
                        cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert "-m mpiopt async-sgd --quiet &" in completed.stdout and "#SBATCH --ntasks=3" in completed.stdout


SBATCH = ["--runtime", "mpi", "--method", "all", "--problem", "quadratic", "--dim", "100", "--tau", "sqrt",
          "--time-unit", "0.01", "--quiet", "--output", "async-sgd.json"]


def test_committed_script_is_what_the_renderer_makes():
    expected = render_script("async-sgd", SBATCH, job_name="async-sgd", ntasks=5, time="00:30:00")
    assert (ROOT / "slurm" / "async-sgd.sbatch").read_text() == expected, "re-render slurm/async-sgd.sbatch"
    assert "async-sgd.sbatch" in (ROOT / "slurm" / "README.md").read_text()


@pytest.mark.timeout(120)
def test_communication_times_and_shadowheart_from_the_command_line(tmp_path):
    """--upload/--upload-scale price every method's uploads; --method all takes Shadowheart only with
    upload times, and its table row carries its own predicted time t* L Delta / eps."""
    plain = run_one(*SMALL, "--method", "all", "--output", "plain.json", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "shadowheart" not in json.loads((tmp_path / "plain.json").read_text())["methods"]
    priced = run_one(*SMALL, "--method", "all", "--upload", "sqrt", "--upload-scale", "0.1", "--output", "p.json",
                     cwd=tmp_path)
    assert priced.returncode == 0, priced.stderr
    payload = json.loads((tmp_path / "p.json").read_text())
    assert payload["methods"][-1] == "shadowheart"
    _, rows = _table_rows(priced.stdout)
    shadowheart = payload["results"]["shadowheart"]
    assert float(rows["shadowheart"][7]) == pytest.approx(shadowheart["predicted"]["shadowheart"], rel=1e-3)
    assert shadowheart["info"]["upload"] == pytest.approx([0.1 * (i ** 0.5) for i in range(1, 5)])
    # one minibatch step costs the slowest worker's compute plus its d = 10 coordinates uploaded
    minibatch = payload["results"]["minibatch"]
    assert minibatch["time"] == pytest.approx(minibatch["steps"] * (2 + 10 * 0.2), rel=1e-12)
    refused = run_one(*SMALL, "--method", "shadowheart", "--output", "r.json", cwd=tmp_path)
    assert refused.returncode != 0 and "needs upload times per coordinate" in refused.stderr
    bad = run_one(*SMALL, "--upload", "fast", "--output", "r.json", cwd=tmp_path)
    assert bad.returncode == 2 and "expected a model name" in bad.stderr


@pytest.mark.timeout(120)
def test_power_models_and_the_new_methods_from_the_command_line(tmp_path):
    """--power/--power-opt, Malenia on the heterogeneous quadratic, MindFlayer with --tau-opt."""
    malenia = run_one("-m", "mpiopt", "async-sgd", "--problem", "heterogeneous-quadratic", "--dim", "10", "--workers",
                      "8", "--method", "malenia", "--power", "outages", "--power-opt", "period=20,fraction=0.5",
                      "--quiet", "--output", "m.json", cwd=tmp_path)
    assert malenia.returncode == 0, malenia.stderr
    result = json.loads((tmp_path / "m.json").read_text())
    assert result["status"] == "converged" and "power outages(period=20, fraction=0.5)" in result["info"]["timing"]
    flayer = run_one(*SMALL, "--method", "mindflayer", "--tau", "pareto", "--tau-opt", "alpha=1.2", "--output",
                     "f.json", cwd=tmp_path)
    assert flayer.returncode == 0, flayer.stderr
    assert json.loads((tmp_path / "f.json").read_text())["info"]["tau"] == "pareto(alpha=1.2)"
    refused = run_one(*SMALL, "--power-opt", "period=3", "--output", "r.json", cwd=tmp_path)
    assert refused.returncode != 0 and "--power-opt goes with --power NAME" in refused.stderr


def test_freya_page_from_the_command_line_on_a_finite_sum(tmp_path):
    completed = run_one("-m", "mpiopt", "async-sgd", "--problem", "least-squares", "--problem-opt", "rows=40",
                        "--problem-opt", "mask=0.5", "--workers", "3", "--quiet", "--method", "freya-page",
                        cwd=tmp_path)
    assert completed.returncode == 2 and "mask" in completed.stderr  # least-squares has no mask
    completed = run_one("-m", "mpiopt", "async-sgd", "--problem", "least-squares", "--problem-opt", "rows=40",
                        "--workers", "3", "--tau", "sqrt", "--quiet", "--method", "all", "--max-steps", "4",
                        "--method-opt", "probability=0.5", "--output", "all.json", cwd=tmp_path)
    assert completed.returncode == 2 and "--method-opt" in completed.stderr
    completed = run_one("-m", "mpiopt", "async-sgd", "--problem", "least-squares", "--problem-opt", "rows=40",
                        "--workers", "3", "--tau", "sqrt", "--quiet", "--method", "freya-page", "--max-steps", "4",
                        "--method-opt", "probability=0.5", "--method-opt", "batch=3", "--output", "one.json",
                        cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    result = json.loads((tmp_path / "one.json").read_text())
    parameters = result["info"]["parameters"]
    assert parameters["probability"] == 0.5 and parameters["batch"] == 3 and parameters["samples"] == 40
    assert result["steps"] == 4 and "freya-page" in result["predicted"]
    completed = run_one("-m", "mpiopt", "async-sgd", "--problem", "least-squares", "--problem-opt", "rows=40",
                        "--workers", "3", "--tau", "sqrt", "--quiet", "--method", "all", "--max-steps", "4",
                        "--output", "all.json", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert json.loads((tmp_path / "all.json").read_text())["methods"] == runnable("least-squares")


def test_the_graph_methods_from_the_command_line(tmp_path):
    (tmp_path / "edges.txt").write_text("0 1 0.5\n1 2 4\n0 2 1\n")
    completed = run_one("-m", "mpiopt", "async-sgd", "--graph-opt", "rho=2", "--workers", "3", "--quiet",
                        "--method", "fragile", cwd=tmp_path)
    assert completed.returncode == 2 and "--graph-opt goes with --graph" in completed.stderr
    completed = run_one("-m", "mpiopt", "async-sgd", "--graph", "edges", "--graph-opt", "path=edges.txt",
                        "--workers", "3", "--tau", "constant", "--quiet", "--method", "fragile", "--method-opt",
                        "pivot=2", "--max-steps", "3", "--output", "one.json", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    result = json.loads((tmp_path / "one.json").read_text())
    assert result["info"]["parameters"]["pivot"] == 2 and result["info"]["parameters"]["round_trip_max"] == 3.0  # 2 -> 0 -> 1 and back
    assert "edges graph of 3 workers, 3 edges" in result["info"]["timing"]
    completed = run_one("-m", "mpiopt", "async-sgd", "--problem", "heterogeneous-quadratic", "--problem-opt",
                        "workers=4", "--graph", "ring", "--graph-opt", "rho=0.5", "--workers", "4", "--quiet",
                        "--method", "all", "--max-steps", "3", "--output", "all.json", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert {"fragile", "amelie"} <= set(json.loads((tmp_path / "all.json").read_text())["methods"])
