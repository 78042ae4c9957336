"""Render a Slurm batch script for an mpiopt workload.

Every value that reaches the shell is quoted with shlex.quote, and the job name
and paths are checked, so no option can inject shell code.  The script:

* asks for --ntasks, --cpus-per-task and --time, writes %x-%j.out in append mode
  (a requeued job adds to the same file), and is --requeue-able;
* sets OMP_NUM_THREADS and the BLAS thread variables from SLURM_CPUS_PER_TASK;
* launches with ``srun --mpi=PLUGIN`` (or the MPI in the package's extra:
  ``launcher="mpiexec"`` uses the mpiexec next to the Python interpreter).
  ``mpi="auto"`` (the default) picks the plugin when the job starts, for the
  MPI that the job's Python loads, among those srun offers: pmix for Open MPI,
  pmi2 for MPICH (:mod:`.plugin`); ``MPIOPT_SRUN_MPI`` in the job's
  environment overrides the rendered choice.  mpiopt itself refuses to run
  when srun started the tasks without PMI (each would be rank 0 of 1);
* with ``signal_seconds``, asks Slurm for SIGUSR1 that many seconds before the
  time limit (--signal=B:USR1@s); the trap forwards it to the solver, which
  writes its checkpoint, then requeues the job; the requeued job resumes from
  the checkpoint, whose path does not change (it carries the job id).

The checkpoint argument the renderer adds for ``solve`` is the script's
variable, ``--checkpoint "$CHECKPOINT"``; every user argument is quoted as it
is, so one that contains ``${CHECKPOINT}`` reaches the job byte for byte, and a
user's own ``--checkpoint VALUE`` is passed as given.

A workload's options are those of its batch script, declared once
(``SCRIPT_OPTIONS``; ``RESUMING_OPTIONS`` adds ``checkpoint`` for a workload
that resumes) and read from ``registry.options("workload", name)``: the
renderer checks its keywords against them and fills in their defaults.  The
workload's own arguments (after ``--`` on the command line) are its
subcommand's or script's, checked by that parser.
"""
import re
import shlex
from typing import NamedTuple

from ..core.options import Option, Options
from ..core.registry import lookup, names, register, unknown
from .plugin import AUTO_COMMAND, PLUGIN

# The batch script's options, which every workload takes (render_script's keywords).
SCRIPT_OPTIONS = Options(
    Option("job_name", str, None, "the job's name: 1-64 letters, digits, '_', '.' or '-' (None: mpiopt-WORKLOAD)"),
    Option("ntasks", int, 2, "MPI ranks (--ntasks)", low=1),
    Option("cpus_per_task", int, 1, "threads per rank (--cpus-per-task)", low=1),
    Option("time", str, "00:10:00", "the time limit: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS"),
    Option("python", str, "python3", "the job's Python (MPIOPT_PYTHON overrides it when the job runs)"),
    Option("launcher", str, "srun", "srun --mpi=PLUGIN, or the mpiexec beside the Python",
           choices=("srun", "mpiexec")),
    Option("mpi", str, "auto", "srun's --mpi plugin: auto (chosen as the job starts: pmix for Open MPI, pmi2 for "
                               "MPICH, among those srun --mpi=list offers) or a plugin name (pmix, pmi2, ...)"),
    Option("signal_seconds", int, None, "SIGUSR1 this many seconds before the time limit: checkpoint, requeue "
                                        "(None or 0: no signal)", low=0),
    Option("workdir", object, None, "the job's working directory, a path (--chdir; None: where it is submitted)"),
    Option("partition", str, None, "the partition: letters, digits, '_', '.' or '-' (None: the default one)"))
# ... and a workload that resumes from --checkpoint also takes this one.
RESUMING_OPTIONS = SCRIPT_OPTIONS + Options(
    Option("checkpoint", bool, True, 'add --checkpoint "$CHECKPOINT" (unless the arguments give one), so that a '
                                     'requeued job resumes'))


class Workload(NamedTuple):
    """What a batch script runs: the Python arguments, and whether it resumes from ``--checkpoint``."""

    argv: list
    resumes: bool = False

    @property
    def options(self):
        """The declared options of the workload's batch script (:func:`render_script`'s keywords)."""
        return RESUMING_OPTIONS if self.resumes else SCRIPT_OPTIONS


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


def script_options(workload, options):
    """``options`` checked against the workload's declaration (then the patterns that keep names and times
    plain words) and completed with its defaults; ValueError with a one-line message."""
    message = unknown("workload", workload)
    if message:
        raise ValueError(message)
    values = lookup("workload", workload).options.resolve(options, f"workload {workload!r}")
    job_name, time, partition = values["job_name"] or f"mpiopt-{workload}", values["time"], values["partition"]
    if not NAME.fullmatch(job_name):
        raise ValueError(f"job name {job_name!r}: use 1-64 letters, digits, '_', '.' or '-'")
    if not TIME.fullmatch(time):
        raise ValueError(f"time {time!r}: use minutes, MM:SS, HH:MM:SS or D-HH:MM:SS")
    if partition is not None and not NAME.fullmatch(partition):
        raise ValueError(f"partition {partition!r}: use letters, digits, '_', '.' or '-'")
    if not PLUGIN.fullmatch(values["mpi"]):
        raise ValueError(f"mpi {values['mpi']!r}: use auto or a plugin name of srun --mpi=list (letters, digits, "
                         "'_')")
    return dict(values, job_name=job_name)


def render_script(workload, arguments=(), **options):
    """The text of a batch script that runs ``workload`` with ``arguments`` (a list of strings).

    ``options``: the workload's declared options (``registry.options("workload", workload)``): job_name,
    ntasks, cpus_per_task, time, python, launcher, mpi, signal_seconds, workdir, partition, and checkpoint for
    a workload that resumes."""
    values = script_options(workload, options)
    launch = launch_line(workload, values, arguments)
    return "\n".join(sbatch_lines(values) + body_lines(values, launch)) + "\n"


def launch_line(workload, values, arguments):
    """The line that starts the MPI step: ``srun`` or the Python's own ``mpiexec``, the workload's command
    and its arguments (with ``--checkpoint "$CHECKPOINT"`` added for a workload that resumes)."""
    arguments = [str(a) for a in arguments]
    if values.get("checkpoint") and not any(
            a == "--checkpoint" or a.startswith("--checkpoint=") for a in arguments):
        arguments += ["--checkpoint", SCRIPT_CHECKPOINT]
    quoted = " ".join('"$CHECKPOINT"' if a is SCRIPT_CHECKPOINT else shlex.quote(a) for a in arguments)
    command = " ".join(shlex.quote(part) for part in lookup("workload", workload).argv)
    if values["launcher"] == "srun":
        return f'srun --mpi="$MPI_PLUGIN" "$PYTHON" {command} {quoted}'
    return f'"$(dirname "$PYTHON")/mpiexec" -n "$SLURM_NTASKS" "$PYTHON" {command} {quoted}'


def sbatch_lines(values):
    """The script's first line and its ``#SBATCH`` directives."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={values['job_name']}",
        f"#SBATCH --ntasks={values['ntasks']}",
        f"#SBATCH --cpus-per-task={values['cpus_per_task']}",
        f"#SBATCH --time={values['time']}",
        "#SBATCH --output=%x-%j.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
    ]
    if values["partition"]:
        lines.append(f"#SBATCH --partition={values['partition']}")
    if values["workdir"]:
        lines.append(f"#SBATCH --chdir={shlex.quote(str(values['workdir']))}")
    if values["signal_seconds"]:
        lines.append(f"#SBATCH --signal=B:USR1@{int(values['signal_seconds'])}")
    return lines


def plugin_lines(values):
    """With srun: the lines that set ``MPI_PLUGIN``, srun's --mpi (``MPIOPT_SRUN_MPI``, else the rendered
    choice; ``auto`` asks :mod:`.plugin` with the job's Python, and a job that finds no plugin stops)."""
    if values["launcher"] != "srun":
        return []
    return [
        f'MPI_PLUGIN="${{MPIOPT_SRUN_MPI:-{values["mpi"]}}}"  # srun --mpi: pmix for Open MPI, pmi2 for MPICH',
        f'if [ "$MPI_PLUGIN" = auto ]; then MPI_PLUGIN=$("$PYTHON" -c {shlex.quote(AUTO_COMMAND)}) || exit 2; fi',
    ]


def body_lines(values, launch):
    """The script's commands: threads, the Python and the checkpoint path, srun's MPI plugin, the USR1 trap
    that checkpoints and requeues near the time limit, the step started by ``launch`` and waited for, its exit
    status."""
    return [
        "# Rendered by mpiopt (mpiopt.slurm.render_script); see docs/cluster.md.",
        "set -uo pipefail",
        'threads="${SLURM_CPUS_PER_TASK:-1}"',
        'export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads"',
        f"PYTHON=${{MPIOPT_PYTHON:-{shlex.quote(values['python'])}}}",
        'CHECKPOINT="${MPIOPT_CHECKPOINT:-${SLURM_JOB_NAME}-${SLURM_JOB_ID}.ckpt.npz}"',
        *plugin_lines(values),
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
