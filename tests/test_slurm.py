"""Slurm: rendered scripts, and real jobs on the local one-node Slurm (slurm/local-slurm.sh start).

Tests marked ``slurm`` skip when sbatch is absent or no Slurm answers; CI starts
the local Slurm first, so there they run.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_mpi
from mpiopt.slurm import render_script, submit, wait

ROOT = Path(__file__).resolve().parent.parent


def slurm_available():
    if shutil.which("sbatch") is None:
        return False
    return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0


needs_slurm = pytest.mark.skipif(not slurm_available(), reason="no Slurm here (start one: slurm/local-slurm.sh start)")

SOLVE = ["--synthetic", "4000x40", "--loss", "logistic", "--lam", "1", "--intercept", "--eps-abs", "0",
         "--eps-rel", "0", "--quiet"]


def test_rendered_script_has_the_cluster_essentials():
    text = render_script("solve", ["--loss", "logistic"], job_name="fit-1", ntasks=8, cpus_per_task=4,
                         time="01:30:00", python="/opt/venv/bin/python", signal_seconds=120)
    for line in ("#SBATCH --ntasks=8", "#SBATCH --cpus-per-task=4", "#SBATCH --time=01:30:00",
                 "#SBATCH --output=%x-%j.out", "#SBATCH --open-mode=append", "#SBATCH --requeue",
                 "#SBATCH --signal=B:USR1@120", 'OMP_NUM_THREADS="$threads"', "srun --mpi=pmi2",
                 "trap on_usr1 USR1", 'scontrol requeue "$SLURM_JOB_ID"', '--checkpoint "$CHECKPOINT"'):
        assert line in text, line
    mpiexec = render_script("lasso", [], launcher="mpiexec")
    assert '/mpiexec" -n "$SLURM_NTASKS"' in mpiexec and "srun" not in mpiexec


@pytest.mark.parametrize("bad", [{"job_name": "x; rm -rf ~"}, {"job_name": "$(reboot)"}, {"time": "1h"},
                                 {"partition": "a b"}, {"ntasks": 0}, {"launcher": "ssh"}])
def test_render_refuses_unsafe_or_invalid_options(bad):
    with pytest.raises(ValueError):
        render_script("solve", [], **bad)


def test_render_quotes_every_argument_and_path():
    text = render_script("solve", ["--data", "my data/$(whoami);x.npz", "--output", "a'b.json"],
                         workdir="/tmp/dir with space")
    assert "'my data/$(whoami);x.npz'" in text
    assert """'a'"'"'b.json'""" in text
    assert "#SBATCH --chdir='/tmp/dir with space'" in text


def test_committed_scripts_are_what_the_renderer_makes():
    for path, workload, arguments in SCRIPTS:
        expected = render_script(workload, arguments, job_name=path.stem, ntasks=2, time="00:30:00",
                                 signal_seconds=60)
        assert (ROOT / "slurm" / path).read_text() == expected, f"re-render slurm/{path} (docs/cluster.md)"


SCRIPTS = [
    (Path("admm-solve.sbatch"), "solve", ["--synthetic", "100000x1000", "--loss", "logistic", "--penalty", "l1",
                                         "--lam-ratio", "0.1", "--checkpoint-every", "50",
                                         "--output", "admm-solve.json"]),
    (Path("admm-benchmark.sbatch"), "admm-benchmark", ["--rows", "100000", "--cols", "1000",
                                                      "--output", "admm-benchmark.json"]),
    (Path("allreduce-benchmark.sbatch"), "allreduce-benchmark", ["-b", "8", "-e", "256M",
                                                                "--output", "allreduce-benchmark.json"]),
]


@pytest.mark.slurm
@needs_slurm
def test_two_task_job_matches_the_direct_run(tmp_path):
    arguments = SOLVE + ["--max-iter", "400", "--output", "job.json"]
    job = submit(render_script("solve", arguments, job_name="mpiopt-test", ntasks=2, python=sys.executable,
                               time="5", checkpoint=False, workdir=tmp_path), tmp_path / "job.sbatch")
    outcome = wait(job, poll=0.5, timeout=240)
    log = Path(outcome.output).read_text() if Path(outcome.output).exists() else "(no log)"
    assert outcome.state == "COMPLETED" and outcome.exit_code == 0, log
    direct = run_mpi(2, "-m", "mpiopt", "solve", *SOLVE, "--max-iter", "400", "--output", str(tmp_path / "direct.json"))
    assert direct.returncode == 0, direct.stderr
    from_job = json.loads((tmp_path / "job.json").read_text())
    assert from_job["info"]["ranks"] == 2, "srun --mpi=pmi2 must start one MPI job of 2 ranks"
    assert from_job["x"] == json.loads((tmp_path / "direct.json").read_text())["x"]


@pytest.mark.slurm
@needs_slurm
def test_job_at_its_time_limit_checkpoints_is_requeued_and_finishes_with_the_same_answer(tmp_path):
    """A one-minute job gets SIGUSR1 45 s before its limit, checkpoints, requeues itself and resumes."""
    arguments = SOLVE + ["--max-iter", "40000", "--output", "job.json"]
    job = submit(render_script("solve", arguments, job_name="mpiopt-requeue", ntasks=2, python=sys.executable,
                               time="1", signal_seconds=45, workdir=tmp_path), tmp_path / "job.sbatch")
    outcome = wait(job, poll=1, timeout=420, release_requeued=True)
    log = Path(outcome.output).read_text()
    assert outcome.state == "COMPLETED" and outcome.exit_code == 0, log
    assert outcome.restarts >= 1, log
    assert "USR1 near the time limit" in log and "(restart 1)" in log
    result = json.loads((tmp_path / "job.json").read_text())
    assert result["info"]["resumed_at"] > 0 and result["iterations"] == 40000
    direct = run_mpi(2, "-m", "mpiopt", "solve", *SOLVE, "--max-iter", "40000",
                     "--output", str(tmp_path / "direct.json"), timeout=300)
    assert direct.returncode == 0, direct.stderr
    assert result["x"] == json.loads((tmp_path / "direct.json").read_text())["x"]
    assert os.path.exists(tmp_path / f"mpiopt-requeue-{job}.ckpt.npz")
