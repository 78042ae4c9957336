"""Render a Slurm batch script for an mpiopt workload.

Every value that reaches the shell is quoted with shlex.quote, and the job name
and paths are checked, so no option can inject shell code.  The script:

* asks for --ntasks, --cpus-per-task and --time, writes %x-%j.out in append mode
  (a requeued job adds to the same file), and is --requeue-able;
* sets OMP_NUM_THREADS and the BLAS thread variables from SLURM_CPUS_PER_TASK;
* launches with ``srun --mpi=pmi2`` (or the MPI in the package's extra:
  ``launcher="mpiexec"`` uses the mpiexec next to the Python interpreter);
  mpiopt itself refuses to run when srun started the tasks without PMI (each
  would be rank 0 of 1);
* with ``signal_seconds``, asks Slurm for SIGUSR1 that many seconds before the
  time limit (--signal=B:USR1@s); the trap forwards it to the solver, which
  writes its checkpoint, then requeues the job; the requeued job resumes from
  the checkpoint, whose path does not change (it carries the job id).

The checkpoint argument the renderer adds for ``solve`` is the script's
variable, ``--checkpoint "$CHECKPOINT"``; every user argument is quoted as it
is, so one that contains ``${CHECKPOINT}`` reaches the job byte for byte, and a
user's own ``--checkpoint VALUE`` is passed as given.
"""
import re
import shlex
from typing import NamedTuple

from ..core.registry import lookup, names, register, unknown

class Workload(NamedTuple):
    """What a batch script runs: the Python arguments, and whether it resumes from ``--checkpoint``."""

    argv: list
    resumes: bool = False


# Each workload registers itself (mpiopt.core.registry, kind "workload").
for _name, _workload in (("solve", Workload(["-m", "mpiopt", "solve"], resumes=True)),
                         ("lasso", Workload(["-m", "mpiopt", "lasso"])),
                         ("admm-benchmark", Workload(["benchmarks/admm_lasso.py"])),
                         ("allreduce-benchmark", Workload(["benchmarks/allreduce.py"])),
                         ("train", Workload(["-m", "mpiopt", "train"], resumes=True)),
                         ("federated", Workload(["-m", "mpiopt", "federated"], resumes=True)),
                         ("async-sgd", Workload(["-m", "mpiopt", "async-sgd"]))):
    register("workload", _name, _workload)
WORKLOADS = names("workload")  # the names registered here; a later registration is found through the registry
NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
TIME = re.compile(r"(\d+-)?\d{1,2}(:\d{2}){0,2}")


# The checkpoint argument the renderer adds: the script's $CHECKPOINT (JOBNAME-JOBID.ckpt.npz). A sentinel,
# so that no user's string, whatever it contains, is ever taken for it.
SCRIPT_CHECKPOINT = object()


def render_script(workload, arguments=(), *, job_name=None, ntasks=2, cpus_per_task=1, time="00:10:00",
                  python="python3", launcher="srun", signal_seconds=None, checkpoint=True, workdir=None,
                  partition=None):
    """The text of a batch script that runs ``workload`` with ``arguments`` (a list of strings)."""
    if unknown("workload", workload):
        raise ValueError(unknown("workload", workload))
    job_name = job_name or f"mpiopt-{workload}"
    if not NAME.fullmatch(job_name):
        raise ValueError(f"job name {job_name!r}: use 1-64 letters, digits, '_', '.' or '-'")
    if not TIME.fullmatch(time):
        raise ValueError(f"time {time!r}: use minutes, MM:SS, HH:MM:SS or D-HH:MM:SS")
    if partition is not None and not NAME.fullmatch(partition):
        raise ValueError(f"partition {partition!r}: use letters, digits, '_', '.' or '-'")
    for name, value in (("ntasks", ntasks), ("cpus_per_task", cpus_per_task)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if launcher not in ("srun", "mpiexec"):
        raise ValueError(f"launcher must be srun or mpiexec, got {launcher!r}")
    arguments = [str(a) for a in arguments]
    if checkpoint and lookup("workload", workload).resumes and not any(
            a == "--checkpoint" or a.startswith("--checkpoint=") for a in arguments):
        arguments += ["--checkpoint", SCRIPT_CHECKPOINT]
    quoted = " ".join('"$CHECKPOINT"' if a is SCRIPT_CHECKPOINT else shlex.quote(a) for a in arguments)
    command = " ".join(shlex.quote(part) for part in lookup("workload", workload).argv)
    if launcher == "srun":
        launch = f'srun --mpi=pmi2 "$PYTHON" {command} {quoted}'
    else:
        launch = f'"$(dirname "$PYTHON")/mpiexec" -n "$SLURM_NTASKS" "$PYTHON" {command} {quoted}'
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --ntasks={ntasks}",
        f"#SBATCH --cpus-per-task={cpus_per_task}",
        f"#SBATCH --time={time}",
        "#SBATCH --output=%x-%j.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if workdir:
        lines.append(f"#SBATCH --chdir={shlex.quote(str(workdir))}")
    if signal_seconds:
        lines.append(f"#SBATCH --signal=B:USR1@{int(signal_seconds)}")
    lines += [
        "# Rendered by mpiopt (mpiopt.slurm.render_script); see docs/cluster.md.",
        "set -uo pipefail",
        'threads="${SLURM_CPUS_PER_TASK:-1}"',
        'export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads"',
        f"PYTHON=${{MPIOPT_PYTHON:-{shlex.quote(python)}}}",
        'CHECKPOINT="${MPIOPT_CHECKPOINT:-${SLURM_JOB_NAME}-${SLURM_JOB_ID}.ckpt.npz}"',
        'echo "mpiopt job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_NTASKS tasks x '
        '$threads threads: $(date)"',
        "requeued=0",
        "on_usr1() {",
        '    echo "USR1 near the time limit: checkpoint, then requeue $SLURM_JOB_ID"',
        '    kill -USR1 "$step" 2>/dev/null',
        "    sleep 5",
        "    requeued=1",
        '    scontrol requeue "$SLURM_JOB_ID"',
        "}",
        "trap on_usr1 USR1",
        f"{launch} &",
        "step=$!",
        "# wait returns early when a trapped signal arrives; keep waiting for the step itself",
        'while true; do wait "$step"; status=$?; kill -0 "$step" 2>/dev/null || break; done',
        'echo "mpiopt step finished with status $status: $(date)"',
        'if [ "$requeued" = 1 ]; then exit 0; fi',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"
