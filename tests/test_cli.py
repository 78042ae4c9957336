"""The command line under mpiexec, as a user runs it."""
import json
from pathlib import Path

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


# A long run to interrupt: the full solver never meets eps 0.  (Working sets certify this problem in about 100
# iterations, too soon to interrupt; their checkpoints are tested in test_admm_workingset.py.)
SOLVE = ["-m", "mpiopt", "solve", "--synthetic", "4000x40", "--loss", "logistic", "--lam", "1", "--intercept",
         "--eps-abs", "0", "--eps-rel", "0", "--quiet", "--working-set", "off"]


def test_cli_solve_resumes_from_its_checkpoint_bitwise(tmp_path):
    # the same command uninterrupted (with a checkpoint file of its own: a run with --checkpoint uses the full
    # solver, not working sets, whose state it saves)
    whole = run_mpi(2, *SOLVE, "--max-iter", "300", "--checkpoint", str(tmp_path / "whole.npz"),
                    "--output", str(tmp_path / "whole.json"))
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
    # signals while it iterates: the log's first row says so (signals during setup: test_cli_signals.py); no
    # iteration limit in reach, so only SIGTERM ends the run, however fast or slow the machine
    import re
    import signal
    from cli_signals import Run, checkpoint_meta
    logged = [argument for argument in SOLVE if argument != "--quiet"]
    run = Run(2, [*logged, "--log-every", "1000000", "--max-iter", "1000000", "--checkpoint", "state.npz",
                  "--output", "stopped.json"], tmp_path)
    run.wait_for(lambda: re.search(r"^ +1 ", run.output()[0], re.MULTILINE), "no iteration was logged")
    run.process.send_signal(signal.SIGUSR1)  # mpiexec forwards it to every rank
    run.wait_for(lambda: (tmp_path / "state.npz").exists(), "SIGUSR1 must write a checkpoint")
    assert checkpoint_meta(tmp_path / "state.npz")["iteration"] >= 1
    run.process.send_signal(signal.SIGTERM)
    assert run.finish() == 3, run.output()[1]
    stopped = json.loads((tmp_path / "stopped.json").read_text())
    assert stopped["status"] == "interrupted"
    # resumed and uninterrupted runs to a few iterations past the stop give the same answer bit for bit
    end = ["--max-iter", str(stopped["iterations"] + 20)]
    resumed = run_mpi(2, *SOLVE, *end, "--checkpoint", str(tmp_path / "state.npz"),
                      "--output", str(tmp_path / "resumed.json"), timeout=300)
    whole = run_mpi(2, *SOLVE, *end, "--checkpoint", str(tmp_path / "whole.npz"),
                    "--output", str(tmp_path / "whole.json"), timeout=300)
    assert resumed.returncode == 0 and whole.returncode == 0, resumed.stderr + whole.stderr
    result = json.loads((tmp_path / "resumed.json").read_text())
    assert result["info"]["resumed_at"] == stopped["iterations"]
    assert result["x"] == json.loads((tmp_path / "whole.json").read_text())["x"]


@pytest.mark.parametrize("command", [
    ["-m", "mpiopt", "lasso", "--synthetic", "3000x40"],
    ["-m", "mpiopt", "solve", "--synthetic", "3000x40"],
    ["benchmarks/admm_lasso.py", "--rows", "3000", "--cols", "40", "--no-sklearn", "--repeat", "1"],
    ["benchmarks/admm_general.py", "--part", "logistic", "--rows", "3000", "--cols", "40", "--repeat", "1"],
    ["benchmarks/allreduce.py", "-b", "8", "-e", "64", "--reducers", "mpi"],
])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(tmp_path, command):
    from pathlib import Path
    (tmp_path / "plain-file").write_text("x")
    if command[0].startswith("benchmarks/"):
        command = [str(Path(__file__).resolve().parent.parent / command[0])] + command[1:]
    completed = run_mpi(2, *command, "--output", "plain-file/result.json", cwd=tmp_path, timeout=60)
    assert completed.returncode == 2, completed.stderr
    message = "cannot write output plain-file/result.json:"
    assert completed.stderr.count(message) == 1 and "is not a folder" in completed.stderr, completed.stderr
    assert "status:" not in completed.stdout and "JSON written" not in completed.stdout


def test_solve_refuses_a_checkpoint_it_cannot_write_before_loading_data(tmp_path):
    (tmp_path / "plain-file").write_text("x")
    completed = run_mpi(2, "-m", "mpiopt", "solve", "--data", "missing.npz", "--checkpoint", "plain-file/state.npz",
                        cwd=tmp_path, timeout=60)
    assert completed.returncode == 2
    assert completed.stderr.count("cannot write checkpoint plain-file/state.npz") == 1, completed.stderr


def test_output_through_a_symlink_writes_the_target(tmp_path):
    (tmp_path / "link.json").symlink_to("target.json")
    completed = run_mpi(2, "-m", "mpiopt", "solve", "--synthetic", "1000x20", "--quiet", "--output", "link.json",
                        cwd=tmp_path, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "target.json").read_text())["status"] == "converged"


@pytest.mark.parametrize("arguments, usage, message", [
    (["lasso", "--bogus", "3"], "usage: mpiopt lasso", "mpiopt lasso: error: unrecognized arguments: --bogus 3"),
    (["solve", "--penalty", "l7"], "usage: mpiopt solve", "argument --penalty: invalid choice: 'l7'"),
    (["lasso", "--synthetic", "abc"], "usage: mpiopt lasso", "expected ROWSxCOLUMNS"),
    (["solve", "--group-size", "0"], "usage: mpiopt solve", "argument --group-size: expected an integer >= 1"),
])
def test_argument_errors_are_printed_once_with_the_subcommand_usage(arguments, usage, message):
    completed = run_mpi(3, "-m", "mpiopt", *arguments, timeout=60)
    assert completed.returncode == 2
    assert completed.stderr.count(usage) == 1 and completed.stderr.count(message) == 1, completed.stderr
    assert "usage: mpiopt [-h]" not in completed.stderr


def test_help_is_printed_once_and_explains_losses_and_penalties():
    completed = run_mpi(2, "-m", "mpiopt", "solve", "--help", timeout=60)
    assert completed.returncode == 0
    text = " ".join(completed.stdout.split())
    assert completed.stdout.count("usage: mpiopt solve") == 1
    for phrase in ("squared (least squares)", "huber (robust regression", "group_lasso (see --groups, --group-size)",
                   "box (see --lower, --upper)"):
        assert phrase in text, phrase


def run_one(*arguments, env=None, cwd=None):
    import os
    import subprocess
    import sys
    environment = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "mpiopt", *arguments], capture_output=True, text=True, timeout=60,
                          env=environment, cwd=cwd)


@pytest.mark.parametrize("arguments, message", [
    (["-J", "x; rm -rf ~"], "mpiopt slurm: error: job name 'x; rm -rf ~': use 1-64 letters"),
    (["-t", "1h"], "mpiopt slurm: error: time '1h': use minutes"),
    (["-p", "a b"], "mpiopt slurm: error: partition 'a b'"),
])
def test_slurm_refusals_are_one_line(tmp_path, arguments, message):
    completed = run_one("slurm", "solve", *arguments, "--render-only", cwd=tmp_path)
    assert completed.returncode == 2
    assert completed.stderr.startswith(message) and completed.stderr.count("\n") == 1, completed.stderr


@pytest.mark.parametrize("workload, arguments, message", [
    ("solve", ["--bogus-flag"], "the arguments of workload solve: mpiopt solve: unrecognized arguments: --bogus-flag"),
    ("train", ["--ratio", "0.5"], "the arguments of workload train: --ratio sets a compressor's option"),
    ("federated", ["--rounds", "many"], "mpiopt federated: argument --rounds: invalid int value: 'many'"),
    ("admm-benchmark", ["--rows", "10", "--bogus"],
     "the arguments of workload admm-benchmark: benchmarks/admm_lasso.py: unrecognized arguments: --bogus"),
    ("allreduce-benchmark", ["-b", "x"], "benchmarks/allreduce.py: argument -b/--minbytes: expected a size"),
])
def test_slurm_refuses_workload_arguments_its_job_would_fail_on(tmp_path, workload, arguments, message):
    # issue 19: mpiopt slurm ... -- --bogus-flag rendered (and submitted) a script whose job failed.  A
    # benchmark's job runs benchmarks/... from the folder it was submitted in: the checkout, as here
    # (from an installed package elsewhere, with no script to read, its arguments are not checked)
    folder = tmp_path if workload in ("solve", "train", "federated") else Path(__file__).resolve().parent.parent
    completed = run_one("slurm", workload, "--render-only", "--", *arguments, cwd=folder)
    assert completed.returncode == 2 and completed.stdout == "", completed.stderr
    assert completed.stderr.startswith("mpiopt slurm: error: ") and completed.stderr.count("\n") == 1
    assert message in completed.stderr, completed.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("workload, arguments", [
    ("solve", ["--loss", "logistic", "--penalty", "elastic_net"]),
    ("train", ["--compressor", "powersgd", "--rank", "2"]),
    ("admm-benchmark", ["--rows", "1000", "--cols", "10"]),
    ("allreduce-benchmark", ["-b", "8", "-e", "64K"]),
])
def test_slurm_renders_a_workload_with_good_arguments(tmp_path, workload, arguments):
    completed = run_one("slurm", workload, "--render-only", "--", *arguments, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert " ".join(arguments) in completed.stdout


def test_slurm_wait_without_sbatch_says_so_in_one_line_and_leaves_nothing(tmp_path):
    import sys
    from pathlib import Path
    completed = run_one("slurm", "solve", "--wait", cwd=tmp_path, env={"PATH": str(Path(sys.executable).parent)})
    assert completed.returncode == 2
    assert completed.stderr == ("mpiopt slurm: error: no sbatch on PATH; start a local Slurm with "
                                "slurm/local-slurm.sh start\n")
    assert list(tmp_path.iterdir()) == [], "nothing may be left behind"


def test_slurm_under_mpiexec_is_refused_once():
    completed = run_mpi(2, "-m", "mpiopt", "slurm", "solve", "--render-only", timeout=60)
    assert completed.returncode == 2
    assert completed.stderr.count("run it as one process, not under mpiexec") == 1, completed.stderr


def test_unsupported_data_files_name_the_formats(tmp_path):
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    (tmp_path / "fake.npz").write_text("hello")
    completed = run_mpi(2, "-m", "mpiopt", "solve", "--data", "table.csv", cwd=tmp_path, timeout=60)
    assert completed.returncode == 2
    assert completed.stderr.count("files ending in .csv are not a data format of mpiopt; it reads an .npz file") == 1
    completed = run_mpi(2, "-m", "mpiopt", "lasso", "--data", "fake.npz", cwd=tmp_path, timeout=60)
    assert completed.returncode == 2
    assert completed.stderr.count("cannot read fake.npz: it is not an .npz archive of numpy arrays") == 1


def test_solve_reports_objective_nonzeros_and_kkt_residual(tmp_path):
    completed = run_mpi(2, "-m", "mpiopt", "solve", "--synthetic", "2000x30", "--output", "out.json", cwd=tmp_path,
                        timeout=60)
    assert completed.returncode == 0, completed.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    x = np.array(result["x"])
    assert result["info"]["nonzeros"] == np.count_nonzero(x)
    last = completed.stdout.strip().splitlines()[-1]
    assert last.startswith(f"final objective {result['objective']:.12e} (converged")
    assert f"nonzeros {np.count_nonzero(x)} of 30" in last and "KKT residual" in last
    assert completed.stdout.count("optimality:  KKT residual") == 1
    assert 0 <= result["info"]["kkt_residual"] < 1e-4


def test_group_lasso_from_the_command_line_matches_the_api(tmp_path):
    from mpiopt.admm import solve
    completed = run_mpi(2, "-m", "mpiopt", "solve", "--synthetic", "1000x12", "--penalty", "group_lasso",
                        "--group-size", "4", "--lam", "5", "--eps-abs", "1e-10", "--eps-rel", "1e-10", "--quiet",
                        "--output", "out.json", cwd=tmp_path, timeout=60)
    assert completed.returncode == 0, completed.stderr
    A, b = lasso_rows(1000, 12, 0, 1000)
    direct = solve(A, b, "squared", "group_lasso", 5.0, MPI.COMM_SELF, groups=[0] * 4 + [1] * 4 + [2] * 4,
                   eps_abs=1e-10, eps_rel=1e-10)
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["info"]["penalty"] == "group_lasso"
    assert np.allclose(result["x"], direct.x, atol=1e-7)


def test_a_resumed_finished_run_of_working_sets_says_there_is_nothing_left_to_do(tmp_path):
    arguments = ["-m", "mpiopt", "solve", "--synthetic", "2000x30", "--checkpoint", "state.npz", "--output", "o.json"]
    first = run_mpi(2, *arguments, cwd=tmp_path, timeout=60)
    assert first.returncode == 0, first.stderr
    expected = json.loads((tmp_path / "o.json").read_text())
    again = run_mpi(2, *arguments, cwd=tmp_path, timeout=60)
    assert again.returncode == 0, again.stderr
    result = json.loads((tmp_path / "o.json").read_text())
    assert result["x"] == expected["x"] and result["info"]["working_set"]
    assert f"resumed at iteration {expected['iterations']} (converged), nothing left to do" in again.stdout
    assert "resumed:  from the checkpoint state.npz" in again.stdout


def test_a_resumed_finished_run_says_there_is_nothing_left_to_do(tmp_path):
    arguments = ["-m", "mpiopt", "solve", "--synthetic", "2000x30", "--checkpoint", "state.npz", "--output", "o.json",
                 "--working-set", "off"]
    first = run_mpi(2, *arguments, cwd=tmp_path, timeout=60)
    assert first.returncode == 0, first.stderr
    again = run_mpi(2, *arguments, cwd=tmp_path, timeout=60)
    assert again.returncode == 0, again.stderr
    iterations = json.loads((tmp_path / "o.json").read_text())["iterations"]
    assert f"resumed at iteration {iterations} (converged), nothing left to do" in again.stdout
    assert "(from the checkpoint)" in again.stdout and "from the data scale" not in again.stdout
    assert "  iter      objective" not in again.stdout, "no empty iteration table"
    assert "0.000 s (" not in again.stdout
    assert f"solve time:  none (resumed at iteration {iterations}, nothing left to do)" in again.stdout


def test_result_files_and_rendered_scripts_are_ignored_by_git():
    import shutil
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    generated = ["mpiopt_lasso.json", "mpiopt_result.json", "mpiopt-solve.sbatch", "fit.sbatch", "results/x.json",
                 "state.ckpt.npz", "mpiopt-solve-12.out"]
    completed = subprocess.run(["git", "check-ignore", *generated], cwd=root, capture_output=True, text=True)
    assert sorted(completed.stdout.split()) == sorted(generated)
    kept = subprocess.run(["git", "check-ignore", "slurm/admm-solve.sbatch"], cwd=root, capture_output=True)
    assert kept.returncode == 1, "the committed batch scripts stay tracked"


def test_admm_lasso_benchmark_quick_keeps_the_sizes_given_and_says_so(monkeypatch):
    # issue 19: --quick silently replaced --rows/--cols by its presets
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "admm_lasso.py"
    monkeypatch.syspath_prepend(str(path.parent))  # as when run as a script: its helpers beside it
    spec = importlib.util.spec_from_file_location("admm_lasso_benchmark", path)
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    quick = benchmark.parse_args(["--quick"])
    args = benchmark.parse_args(["--quick", "--rows", "3000", "--cols=40"])
    assert (args.rows, args.cols, args.kept) == (3000, 40, ["cols", "rows"])
    assert (args.wide_rows, args.repeat) == (quick.wide_rows, quick.repeat) == (60, 1), "the other sizes stay tiny"
    assert (quick.rows, quick.cols, quick.kept) == (600, 20, [])
    assert benchmark.parse_args(["--rows", "50"]).cols == 1000, "without --quick nothing changes"


def test_help_says_what_the_runs_do_gap_tol_and_the_federated_clients(capsys):
    # issue 19: --gap-tol's help said "default: off" while the working sets' log stopped at a gap of 1e-6, and
    # federated --help printed "rank k %% p"
    from mpiopt.admm import solve
    from mpiopt.admm.settings import ADMMSettings
    from mpiopt.cli import build_parser
    solve_help = " ".join(build_parser().parse_args(["solve"]).parser.format_help().split())
    eps_rel = ADMMSettings().eps_rel
    assert f"default: working sets stop at --eps-rel ({eps_rel:g} by default)" in solve_help
    A, b = lasso_rows(300, 12, 0, 300)
    capsys.readouterr()
    solve(A, b, "squared", "l1", None, MPI.COMM_SELF, lam_ratio=0.1, verbose=True)
    assert f"stopping: relative duality gap <= {eps_rel:.1e}" in capsys.readouterr().out, "what the help says"
    federated_help = " ".join(build_parser().parse_args(["federated"]).parser.format_help().split())
    assert "(client k on rank k % p)" in federated_help and "%%" not in federated_help
