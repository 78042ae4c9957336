"""Slurm: rendered scripts, and real jobs on the local one-node Slurm (slurm/local-slurm.sh start).

Tests marked ``slurm`` skip when sbatch is absent or no Slurm answers; CI starts
the local Slurm first, so there they run.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_mpi
from mpiopt.slurm import SlurmError, job_state, never_starts, render_script, submit, wait
from mpiopt.core.comm import mpi_vendor
from mpiopt.slurm.jobs import FINISHED, parse_fields
from mpiopt.slurm.plugin import NoPlugin, choose, offered

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
                 "#SBATCH --signal=B:USR1@120", 'OMP_NUM_THREADS="$threads"', 'srun --mpi="$MPI_PLUGIN"',
                 'MPI_PLUGIN="${MPIOPT_SRUN_MPI:-auto}"',
                 "trap on_usr1 USR1", 'scontrol requeue "$SLURM_JOB_ID"', '--checkpoint "$CHECKPOINT"'):
        assert line in text, line
    mpiexec = render_script("lasso", [], launcher="mpiexec")
    assert '/mpiexec" -n "$SLURM_NTASKS"' in mpiexec and "srun" not in mpiexec and "MPI_PLUGIN" not in mpiexec
    assert 'MPI_PLUGIN="${MPIOPT_SRUN_MPI:-pmix}"' in render_script("lasso", [], mpi="pmix")


@pytest.mark.parametrize("bad", [{"job_name": "x; rm -rf ~"}, {"job_name": "$(reboot)"}, {"time": "1h"},
                                 {"partition": "a b"}, {"ntasks": 0}, {"launcher": "ssh"},
                                 {"mpi": "pmix; reboot"}, {"mpi": ""}])
def test_render_refuses_unsafe_or_invalid_options(bad):
    with pytest.raises(ValueError):
        render_script("solve", [], **bad)


def test_render_quotes_every_argument_and_path():
    text = render_script("solve", ["--data", "my data/$(whoami);x.npz", "--output", "a'b.json"],
                         workdir="/tmp/dir with space")
    assert "'my data/$(whoami);x.npz'" in text
    assert """'a'"'"'b.json'""" in text
    assert "#SBATCH --chdir='/tmp/dir with space'" in text


def _run_launch_line(text, tmp_path):
    """The argv that srun (or mpiexec) receives when bash runs the script's launch line; both are stubs."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name in ("srun", "mpiexec"):
        (stubs / name).write_text('#!/bin/sh\nfor a in "$@"; do printf \'%s\\0\' "$a"; done\n')
        (stubs / name).chmod(0o755)
    launch = text.split("trap on_usr1 USR1\n")[1].split(" &\nstep=$!")[0]  # an argument may hold a newline
    environment = dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}", PYTHON=str(stubs / "python"),
                       CHECKPOINT="fit-7.ckpt.npz", SLURM_NTASKS="2")
    completed = subprocess.run(["bash", "-c", launch], capture_output=True, env=environment, timeout=30)
    assert completed.returncode == 0, completed.stderr
    argv = completed.stdout.decode().split("\0")[:-1]
    return argv[argv.index(str(stubs / "python")) + 1:]


USER_ARGUMENTS = ["--output", "${CHECKPOINT}.json", "--data", "$CHECKPOINT", "--note", "${CHECKPOINT}",
                  "--tag", "it's \"${CHECKPOINT}\" $(whoami) `id` \\ \n end"]


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_user_arguments_containing_checkpoint_reach_the_job_byte_for_byte(tmp_path, launcher):
    text = render_script("solve", USER_ARGUMENTS, launcher=launcher)
    assert _run_launch_line(text, tmp_path) == ["-m", "mpiopt", "solve", *USER_ARGUMENTS,
                                                "--checkpoint", "fit-7.ckpt.npz"]
    explicit = render_script("solve", ["--checkpoint", "${CHECKPOINT}"], launcher=launcher)
    assert _run_launch_line(explicit, tmp_path) == ["-m", "mpiopt", "solve", "--checkpoint", "${CHECKPOINT}"]
    own = render_script("solve", ["--checkpoint=mine.npz"], launcher=launcher)
    assert _run_launch_line(own, tmp_path) == ["-m", "mpiopt", "solve", "--checkpoint=mine.npz"]


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("nproc") is None, reason="no bash or nproc")
def test_local_slurm_counts_cpus_without_the_thread_variables():
    environment = dict(os.environ, OMP_NUM_THREADS="1", OMP_THREAD_LIMIT="1")
    completed = subprocess.run(["bash", str(ROOT / "slurm" / "local-slurm.sh"), "cpus"], capture_output=True,
                               text=True, env=environment, timeout=30)
    assert completed.returncode == 0, completed.stderr
    assert int(completed.stdout) == len(os.sched_getaffinity(0))


@pytest.mark.timeout(60)
def test_submit_without_sbatch_says_so_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SlurmError) as error:
        submit(render_script("solve", []), tmp_path / "job.sbatch")
    assert str(error.value) == "no sbatch on PATH; start a local Slurm with slurm/local-slurm.sh start"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]


@pytest.mark.timeout(60)
def test_submit_refused_by_sbatch_removes_the_script_it_wrote_and_keeps_one_that_was_there(tmp_path, monkeypatch):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified: nosuch' >&2\n"
                                  "echo 'sbatch: error: Batch job submission failed: Invalid partition name' >&2\n"
                                  "exit 1\n")
    (stubs / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stubs}:{os.environ['PATH']}")
    with pytest.raises(SlurmError) as error:
        submit(render_script("solve", []), tmp_path / "job.sbatch")
    assert str(error.value) == ("sbatch failed with exit status 1: sbatch: error: invalid partition specified: "
                                "nosuch; sbatch: error: Batch job submission failed: Invalid partition name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]
    (tmp_path / "kept.sbatch").write_text("an older script\n")
    with pytest.raises(SlurmError):
        submit(render_script("solve", []), tmp_path / "kept.sbatch")
    assert (tmp_path / "kept.sbatch").exists()


# 'srun --mpi=list' of Slurm 22.05 (Debian's, with its pmix plugin), and one of a site without pmix.
LISTING = ("MPI plugin types are...\n\tpmix\n\tnone\n\tcray_shasta\n\tpmi2\n"
           "specific pmix plugin versions available: pmix_v4\n")
LISTING_WITHOUT_PMIX = "MPI plugin types are...\n\tnone\n\tpmi2\n"


@pytest.mark.parametrize("vendor, listing, plugin", [
    ("openmpi", LISTING, "pmix"), ("mpich", LISTING, "pmi2"), ("other", LISTING, "pmix"),
    ("mpich", LISTING_WITHOUT_PMIX, "pmi2"), ("other", LISTING_WITHOUT_PMIX, "pmi2"),
    ("openmpi", "MPI plugin types are...\n\tnone\nspecific pmix plugin versions available: pmix_v3,pmix_v5\n",
     "pmix_v3"),
])
def test_auto_picks_the_plugin_the_mpi_speaks_among_those_srun_offers(vendor, listing, plugin):
    assert offered(LISTING) == ["pmix", "none", "cray_shasta", "pmi2", "pmix_v4"]
    assert choose(vendor, offered(listing)) == plugin


def test_no_plugin_for_open_mpi_is_one_line_that_says_what_to_do():
    with pytest.raises(NoPlugin) as error:
        choose("openmpi", offered(LISTING_WITHOUT_PMIX))
    assert str(error.value) == ("this Slurm offers no PMI plugin for openmpi (it needs --mpi=pmix; srun --mpi=list "
                                "offers none, pmi2): launch with mpiexec (mpiopt slurm --launcher mpiexec) or ask "
                                "the site for the plugin")


def _run_plugin_lines(tmp_path, listing, **environment):
    """MPI_PLUGIN as the rendered script sets it, with this Python and a stub srun that lists ``listing``."""
    stubs = tmp_path / "srun-stub"
    stubs.mkdir(exist_ok=True)
    (stubs / "srun").write_text(f"#!/bin/sh\nprintf '{listing}'\n")
    (stubs / "srun").chmod(0o755)
    text = render_script("solve", [])
    lines = [line for line in text.splitlines() if "MPI_PLUGIN" in line and not line.startswith("srun")]
    return subprocess.run(["bash", "-c", "\n".join(lines + ['echo "$MPI_PLUGIN"'])], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, PATH=f"{stubs}:{os.environ['PATH']}",
                                                          PYTHON=sys.executable, **environment))


@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_job_picks_the_plugin_for_its_pythons_mpi_or_stops_with_one_line(tmp_path):
    listing = LISTING.replace("\n", "\\n").replace("\t", "\\t")
    picked = _run_plugin_lines(tmp_path, listing)
    assert picked.returncode == 0, picked.stderr
    assert picked.stdout.strip() == {"openmpi": "pmix", "mpich": "pmi2"}[mpi_vendor()]
    assert _run_plugin_lines(tmp_path, listing, MPIOPT_SRUN_MPI="pmi2").stdout.strip() == "pmi2"
    none = _run_plugin_lines(tmp_path, "MPI plugin types are...\\n\\tnone\\n")
    assert none.returncode == 2 and none.stderr.startswith("mpiopt: error: this Slurm offers no PMI plugin for ")
    assert len(none.stderr.strip().splitlines()) == 1, none.stderr


# Captured with 'scontrol show job -o' on Slurm 22.05 (slurm/local-slurm.sh, one node "vm" of 2 CPUs): a 3-task job;
# its WorkDir replaced by one with spaces.
CAPTURED = (
    "JobId=4 JobName=ok.sbatch UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901756 Nice=0 "
    "Account=(null) QOS=(null) JobState=PENDING Reason=PartitionConfig Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-11-30T05:50:27 EligibleTime=2026-11-30T05:50:27 AccrueTime=2026-11-30T05:50:27 "
    "StartTime=Unknown EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 "
    "LastSchedEval=2026-11-30T05:50:27 Scheduler=Main Partition=debug AllocNode:Sid=localhost:4484 "
    "ReqNodeList=(null) ExcNodeList=(null) NodeList= NumNodes=2 NumCPUs=3 NumTasks=3 CPUs/Task=1 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=3,mem=21366M,node=1,billing=3 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK "
    "Contiguous=0 Licenses=(null) Network=(null) Command=/tmp/exp/ok.sbatch WorkDir=/tmp/dir with space "
    "StdErr=/tmp/exp/4.out StdIn=/dev/null StdOut=/tmp/exp/4.out Power= ")
NODES_DOWN = {"n1": ("down*", 2), "n2": ("drain", 2), "n3": ("idle", 2)}    # 2 usable CPUs for 3 tasks
NODES_BUSY = {"n1": ("alloc", 2), "n2": ("mix", 2)}


@pytest.mark.parametrize("state, reason, dependency, nodes, hopeless", [
    ("PENDING", "PartitionConfig", "(null)", None, True),                       # 3 tasks on 2 CPUs
    ("PENDING", "PartitionNodeLimit", "(null)", None, True),                    # --nodes=2 on 1 node
    ("PENDING", "DependencyNeverSatisfied", "afterok:7(failed)", None, True),
    ("PENDING", "PartitionTimeLimit", "(null)", None, True),
    ("PENDING", "InvalidQOS", "(null)", None, True),
    ("PENDING", "QOSMaxCpuPerJobLimit", "(null)", None, True),
    ("PENDING", "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions",
     "(null)", NODES_DOWN, True),
    ("PENDING", "ReqNodeNotAvail,_UnavailableNodes:vm", "(null)", NODES_DOWN, True),
    ("PENDING", "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions",
     "(null)", NODES_BUSY, False),                                               # reserved: clears by itself
    ("PENDING", "ReqNodeNotAvail,_UnavailableNodes:", "(null)", {"n1": ("idle~", 2), "n2": ("resv", 2)}, False),
    ("PENDING", "Resources", "(null)", None, False),
    ("PENDING", "Priority", "(null)", None, False),
    ("PENDING", "Dependency", "afterok:7(unfulfilled)", None, False),
    ("PENDING", "BeginTime", "(null)", None, False),
    ("PENDING", "QOSMaxJobsPerUserLimit", "(null)", None, False),
    ("PENDING", "None", "(null)", None, False),
    ("RUNNING", "PartitionConfig", "(null)", None, False),
])
def test_pending_reasons_that_never_clear_are_told_from_those_that_do(state, reason, dependency, nodes, hopeless):
    line = re.sub(r"JobState=\S+ Reason=\S+ Dependency=\S+", f"JobState={state} Reason={reason} "
                  f"Dependency={dependency}", CAPTURED)
    fields = parse_fields(line)
    assert (fields["Reason"], fields["NumCPUs"], fields["CPUs/Task"]) == (reason, "3", "1")
    assert fields["WorkDir"] == "/tmp/dir with space"
    why = never_starts(fields, nodes)
    assert (why is not None) == hopeless, why
    if reason == "DependencyNeverSatisfied":
        assert "afterok:7(failed)" in why


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
    (Path("train.sbatch"), "train", ["--model", "mlp", "--hidden", "256,256", "--data", "digits", "--optimizer",
                                     "adam", "--epochs", "20", "--batch-size", "256", "--zero-stage", "2",
                                     "--checkpoint-every", "50", "--output", "train.json"]),
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
    assert from_job["info"]["ranks"] == 2, f"srun --mpi=auto must start one {mpi_vendor()} job of 2 ranks"
    assert from_job["x"] == json.loads((tmp_path / "direct.json").read_text())["x"]


def _iterations_for(seconds, folder):
    """Iterations of the requeue test's solve that take about ``seconds`` on this machine now, between 5000 and
    100000: a 2000-iteration run measures them, on its second half (the first iterations cost more)."""
    calibration = run_mpi(2, "-m", "mpiopt", "solve", *SOLVE, "--max-iter", "2000", "--working-set", "off",
                          "--output", str(folder / "calibration.json"), timeout=300)
    assert calibration.returncode == 0, calibration.stderr
    times = json.loads((folder / "calibration.json").read_text())["history"]["time"]
    per_iteration = (times[-1] - times[len(times) // 2]) / (len(times) - 1 - len(times) // 2)
    return int(min(max(seconds / per_iteration, 5000), 100000)) // 1000 * 1000


def _give_the_next_run_more_time(job, minutes, timeout):
    """Once ``job`` has been requeued, raise its time limit to ``minutes`` (scontrol), so that the run after the
    requeue is not signalled in its turn; returns its state then, or when it finished before."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = job_state(job)
        if state is not None and (state[2] >= 1 or state[0] in FINISHED):
            if state[2] >= 1:
                subprocess.run(["scontrol", "update", f"JobId={job}", f"TimeLimit={minutes}"], check=True,
                               capture_output=True, timeout=30)
            return state
        time.sleep(0.5)
    raise TimeoutError(f"job {job} was not requeued within {timeout} s")


@pytest.mark.slurm
@pytest.mark.timeout(1200)
@needs_slurm
def test_job_at_its_time_limit_checkpoints_is_requeued_and_finishes_with_the_same_answer(tmp_path):
    """A two-minute job gets SIGUSR1 105 s before its limit, checkpoints, requeues itself and resumes."""
    # About 50 s of work, measured on this machine first. slurmctld sends the signal from its periodic
    # time-limit check, up to about 15 s off the time asked for: measured here, the signal due 15 s into a
    # two-minute job came 3-29 s after it started (and one due at 30 s into a one-minute job came at 23 s); an
    # earlier one could come before the solver's handler is in place. A fixed iteration count would take
    # minutes on a busy machine, so the work is calibrated; but the calibration runs beside the other tests and
    # can measure the iterations up to 2.2 times slower than the job then runs them (a 50 s calibration once
    # ran in 23 s). A job that ended before its signal came (no requeue: an observed outcome, not a guess) is
    # run again with twice the work. The full solver never meets eps 0.
    iterations = _iterations_for(50.0, tmp_path)
    for attempt in range(2):
        arguments = SOLVE + ["--max-iter", str(iterations), "--working-set", "off", "--output", "job.json"]
        job = submit(render_script("solve", arguments, job_name="mpiopt-requeue", ntasks=2, python=sys.executable,
                                   time="2", signal_seconds=105, workdir=tmp_path), tmp_path / "job.sbatch")
        try:
            # every run of a two-minute job would get the signal: the test measures one requeue, not a chain
            _give_the_next_run_more_time(job, 30, timeout=300)
            outcome = wait(job, poll=1, timeout=900, release_requeued=True)
        finally:
            subprocess.run(["scancel", job], timeout=30)  # nothing, once it has finished; never a job left behind
        if outcome.restarts or attempt:
            break
        iterations *= 2  # it finished before slurmctld's check sent the signal
    log = Path(outcome.output).read_text()
    assert outcome.state == "COMPLETED" and outcome.exit_code == 0, log
    assert outcome.restarts == 1, log
    assert "USR1 near the time limit" in log and "(restart 1)" in log
    result = json.loads((tmp_path / "job.json").read_text())
    assert result["info"]["resumed_at"] > 0 and result["iterations"] == iterations
    direct = run_mpi(2, "-m", "mpiopt", "solve", *SOLVE, "--max-iter", str(iterations), "--working-set", "off",
                     "--output", str(tmp_path / "direct.json"), timeout=600)
    assert direct.returncode == 0, direct.stderr
    assert result["x"] == json.loads((tmp_path / "direct.json").read_text())["x"]
    assert os.path.exists(tmp_path / f"mpiopt-requeue-{job}.ckpt.npz")


def _default_partition():
    """(name, total CPUs) of the default partition, from sinfo."""
    for line in subprocess.run(["sinfo", "-h", "-o", "%P %C"], capture_output=True, text=True,
                               timeout=30).stdout.splitlines():
        name, cpus = line.split()
        if name.endswith("*"):
            return name[:-1], int(cpus.split("/")[3])
    pytest.skip("no default partition")


def _assert_wait_stops_and_leaves_the_job(job, reason, hopeless_after=3):
    started = time.monotonic()
    with pytest.raises(SlurmError) as error:
        wait(job, poll=0.5, timeout=120, hopeless_after=hopeless_after)
    message = str(error.value)
    assert time.monotonic() - started >= hopeless_after, "a reason must last hopeless_after seconds"
    assert "\n" not in message and f"job {job} " in message and reason in message, message
    assert message.endswith(f"the job was left in the queue: remove it with scancel {job}"), message
    assert job_state(job)[0] == "PENDING", "wait must not cancel the job"
    return message


@pytest.mark.slurm
@needs_slurm
@pytest.mark.timeout(120)
def test_wait_stops_on_a_job_that_asks_for_more_cpus_than_the_partition_has(tmp_path):
    partition, cpus = _default_partition()
    job = submit(render_script("solve", ["--synthetic", "100x5"], job_name="mpiopt-too-big", ntasks=cpus + 1,
                               python=sys.executable, time="1", partition=partition, workdir=tmp_path),
                 tmp_path / "job.sbatch")
    try:
        message = _assert_wait_stops_and_leaves_the_job(job, "Partition")
        assert f"asks for {cpus + 1} task(s)" in message and f"partition {partition}, which has {cpus} CPUs" in message
    finally:
        subprocess.run(["scancel", job], timeout=30)


@pytest.mark.slurm
@needs_slurm
@pytest.mark.timeout(120)
def test_wait_stops_on_a_job_whose_dependency_can_never_be_satisfied(tmp_path):
    header = f"#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH --time=1\n#SBATCH --chdir={tmp_path}\n" \
             "#SBATCH --output=%x-%j.out\n"
    failed = submit(header + "#SBATCH --job-name=mpiopt-fails\nexit 1\n", tmp_path / "fails.sbatch")
    dependent = None
    try:
        outcome = wait(failed, poll=0.5, timeout=60)
        assert (outcome.state, outcome.exit_code) == ("FAILED", 1)
        dependent = submit(header + f"#SBATCH --job-name=mpiopt-never\n#SBATCH --dependency=afterok:{failed}\n"
                           "true\n", tmp_path / "never.sbatch")
        message = _assert_wait_stops_and_leaves_the_job(dependent, "DependencyNeverSatisfied")
        assert f"afterok:{failed}(failed)" in message
    finally:
        subprocess.run(["scancel", failed] + ([dependent] if dependent else []), timeout=30)
