"""Submit a batch script with sbatch and follow the job with scontrol (no accounting needed).

``wait`` stops, with a SlurmError, when the job is PENDING for a reason that
will not clear without an administrator or a change of the job (it asks for
more CPUs than the partition has, its dependency can never be satisfied, the
partition's nodes are down or drained, ...), once that reason has lasted
``hopeless_after`` seconds; the job is left in the queue for its owner to
fix or cancel.  Reasons that clear by themselves (Resources, Priority,
Dependency, BeginTime, limits on running jobs) keep it waiting.
"""
import dataclasses
import os
import re
import shutil
import subprocess
import time

from ..core.io import write_atomic

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE"}
NO_SBATCH = "no sbatch on PATH; start a local Slurm with slurm/local-slurm.sh start"
QUERY_TIMEOUT = 60  # seconds for one scontrol or sinfo query

# Pending reasons (squeue(1), JOB REASON CODES) that only an administrator or a change of the job clears.
NEVER_CLEARS = {
    "PartitionConfig": "the request does not fit its partition (more CPUs, nodes or memory than the partition has, "
                       "or an option the partition does not allow)",
    "PartitionNodeLimit": "it asks for more or fewer nodes than its partition allows, or the nodes it needs are "
                          "down or drained",
    "PartitionTimeLimit": "its time limit is longer than its partition allows",
    "PartitionDown": "its partition is DOWN",
    "PartitionInactive": "its partition is INACTIVE",
    "BadConstraints": "its constraints cannot be satisfied",
    "DependencyNeverSatisfied": "its dependency can never be satisfied",
    "InvalidAccount": "its account is invalid",
    "InvalidQOS": "its QOS is invalid",
    "AccountNotAllowed": "its account may not use the partition",
    "QOSNotAllowed": "its QOS may not use the partition",
    "JobHeldAdmin": "an administrator holds it",
    "FrontEndDown": "no front end node is available",
}
# QOSMaxCpuPerJobLimit, AssocMaxWallDurationPerJobLimit, QOSMinCpuNotSatisfied, ...: the job itself breaks a limit.
LIMIT_OF_THE_JOB = re.compile(r"(QOS|Assoc)Max\w*Per(Job|Node)\w*|QOSMin\w+")
# Reasons that also appear while the nodes are only busy or reserved: hopeless only when sinfo shows that
# the nodes up in the partition have fewer CPUs than the job asks for.
NODES_UNAVAILABLE = {"ReqNodeNotAvail", "NodeDown", "Nodes_required_for_job_are_DOWN"}
UNUSABLE_NODE_STATES = {"down", "drain", "drng", "fail", "failg", "inval"}


class SlurmError(RuntimeError):
    """Slurm cannot do what was asked; the message is one line, for a command line to print as it is."""

    def __init__(self, message):
        super().__init__("; ".join(line.strip() for line in str(message).splitlines() if line.strip()))


@dataclasses.dataclass
class JobResult:
    job_id: str
    state: str
    exit_code: int
    output: str          # the job's %x-%j.out file
    result: str = None   # the JSON result the workload wrote, when known
    restarts: int = 0


def submit(script_text, script_path, *, cwd=None):
    """Write the script (atomically) and submit it; returns the job id.

    Raises SlurmError, before writing anything, when sbatch is not on PATH;
    when sbatch refuses the job, removes the script (unless a file was there
    before) and raises SlurmError with sbatch's message.
    """
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SlurmError(NO_SBATCH)
    existed = os.path.lexists(script_path)
    write_atomic(script_path, script_text)
    os.chmod(script_path, 0o755)
    try:
        completed = subprocess.run([sbatch, "--parsable", os.path.abspath(script_path)], capture_output=True,
                                   text=True, cwd=cwd)
        failure = None if completed.returncode == 0 else (
            f"sbatch failed with exit status {completed.returncode}: "
            f"{completed.stderr.strip() or completed.stdout.strip() or 'no message'}")
    except OSError as error:
        failure = f"cannot run {sbatch}: {error}"
    if failure is not None:
        if not existed:
            os.remove(script_path)
        raise SlurmError(failure)
    return completed.stdout.strip().split(";")[0]


def _query(command):
    """Run a Slurm query (scontrol, sinfo) with a time limit; SlurmError when it is missing or does not answer."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=QUERY_TIMEOUT)
    except FileNotFoundError:
        raise SlurmError(f"no {command[0]} on PATH; start a local Slurm with slurm/local-slurm.sh start") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"'{' '.join(command)}' did not answer within {QUERY_TIMEOUT} s") from None


def parse_fields(line):
    """The KEY=VALUE fields of one ``scontrol show ... -o`` line, as a dict (a value may contain spaces)."""
    fields = {}
    for item in re.split(r"\s+(?=[A-Za-z][\w/:]*=)", line.strip()):
        key, _, value = item.partition("=")
        fields[key] = value
    return fields


def show_job(job_id):
    """Every field of ``scontrol show job -o JOB``; SlurmError with scontrol's message when it cannot show it."""
    completed = _query(["scontrol", "show", "job", "-o", str(job_id)])
    if completed.returncode != 0 or not completed.stdout.strip():
        message = completed.stderr.strip() or "no output"
        hint = " (Slurm forgets a job MinJobAge seconds after it ends)" if "Invalid job id" in message else ""
        raise SlurmError(f"scontrol cannot show job {job_id}{hint}: {message}")
    return parse_fields(completed.stdout.splitlines()[0])


def job_state(job_id):
    """(state, exit code, restart count, job name, work dir) from scontrol; None when Slurm cannot show the job."""
    try:
        return _state_of(show_job(job_id))
    except SlurmError:
        return None


def _state_of(fields):
    """(state, exit code, restart count, job name, work dir) of scontrol's fields."""
    code = int(fields.get("ExitCode", "0:0").split(":")[0])
    return (fields.get("JobState", "UNKNOWN"), code, int(fields.get("Restarts", "0")),
            fields.get("JobName", ""), fields.get("WorkDir", "."))


def _reason_code(fields):
    """'ReqNodeNotAvail' of 'ReqNodeNotAvail,_UnavailableNodes:n1'."""
    return fields.get("Reason", "None").split(",")[0]


def _may_never_clear(fields):
    """Whether the job is PENDING for a reason that can mean it will never start (see never_starts)."""
    code = _reason_code(fields)
    return fields.get("JobState") == "PENDING" and (
        code in NEVER_CLEARS or code in NODES_UNAVAILABLE or LIMIT_OF_THE_JOB.fullmatch(code) is not None)


def never_starts(fields, nodes=None):
    """Why a PENDING job will not start unless an administrator or its owner acts; None while it may start.

    ``fields``: from ``scontrol show job -o``; ``nodes``: {node: (sinfo state, CPUs)} of the job's
    partitions, needed for the reasons that also appear while nodes are only busy or reserved
    (ReqNodeNotAvail, ...): those are hopeless when the nodes up have fewer CPUs than the job asks for.
    """
    if not _may_never_clear(fields):
        return None
    code = _reason_code(fields)
    if code in NEVER_CLEARS:
        why = NEVER_CLEARS[code]
        if code == "DependencyNeverSatisfied" and fields.get("Dependency", "(null)") != "(null)":
            why += f" ({fields['Dependency']})"
        return why
    if code not in NODES_UNAVAILABLE:
        return "the job breaks a per-job limit of its QOS or account"
    if not nodes:
        return None
    unusable = sorted(name for name, (state, _) in nodes.items()
                      if state.rstrip("*~#!%$@^-") in UNUSABLE_NODE_STATES)
    usable_cpus = sum(cpus for name, (_, cpus) in nodes.items() if name not in unusable)
    if usable_cpus >= int(fields.get("NumCPUs", "1")):
        return None
    return (f"the nodes of its partition that are not down or drained have {usable_cpus} CPUs "
            f"(down or drained: {', '.join(unusable)})")


def _partition_nodes(partition):
    """{node: (sinfo state, CPUs)} of the partitions (a comma-separated list), from sinfo."""
    completed = _query(["sinfo", "-h", "-N", "-p", partition, "-o", "%N %t %c"])
    nodes = {}
    for line in completed.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            nodes[parts[0]] = (parts[1], int(parts[2]))
    return nodes


def _partition_size(partition):
    """', which has C CPUs on N node(s)' from scontrol, or '' when Slurm does not say."""
    try:
        completed = _query(["scontrol", "show", "partition", "-o", partition])
    except SlurmError:
        return ""
    fields = parse_fields(completed.stdout) if completed.returncode == 0 else {}
    if "TotalCPUs" not in fields:
        return ""
    return f", which has {fields['TotalCPUs']} CPUs on {fields.get('TotalNodes', '?')} node(s)"


def _never_starts_message(job_id, fields, why, seconds):
    """One line: the job, its reason and why it never starts, what it asks for, and how to remove it."""
    partition = fields.get("Partition", "?")
    return (f"job {job_id} will not start: PENDING for {seconds:.0f} s with reason {fields.get('Reason')}: {why}; "
            f"it asks for {fields.get('NumTasks', '?')} task(s) x {fields.get('CPUs/Task', '?')} CPU(s) = "
            f"{fields.get('NumCPUs', '?')} CPUs on {fields.get('NumNodes', '?')} node(s) in partition {partition}"
            f"{_partition_size(partition) if ',' not in partition else ''}; "
            f"the job was left in the queue: remove it with scancel {job_id}")


def wait(job_id, *, poll=2.0, timeout=None, release_requeued=False, result=None, hopeless_after=10.0):
    """Poll until the job finishes; returns a JobResult.

    ``release_requeued``: a requeued job waits for a begin time (about two
    minutes) before it runs again; release it at once (for tests and the
    local Slurm).  ``hopeless_after``: seconds a pending reason that will not
    clear by itself must last before wait raises SlurmError (a transient
    reason does not stop a healthy job); the job stays in the queue.  Raises
    SlurmError when Slurm cannot show the job, TimeoutError after ``timeout``
    seconds.
    """
    start = time.time()
    pending_reason, pending_since = None, None
    while True:
        fields = show_job(job_id)
        name, code, restarts, job_name, workdir = _state_of(fields)
        if name in FINISHED:
            output = os.path.join(workdir, f"{job_name}-{job_id}.out")
            result_path = os.path.join(workdir, result) if result else None  # relative to the job's directory
            return JobResult(job_id, name, code, output, result_path, restarts)
        now = time.time()
        if _may_never_clear(fields):
            if fields.get("Reason") != pending_reason:
                pending_reason, pending_since = fields.get("Reason"), now
            if now - pending_since >= hopeless_after:
                nodes = _partition_nodes(fields.get("Partition", "")) \
                    if _reason_code(fields) in NODES_UNAVAILABLE else None
                why = never_starts(fields, nodes)
                if why is not None:
                    raise SlurmError(_never_starts_message(job_id, fields, why, now - pending_since))
        else:
            pending_reason = None
        if release_requeued and name == "PENDING" and restarts > 0:
            _query(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])
        if timeout is not None and now - start > timeout:
            raise TimeoutError(f"job {job_id} still {name} after {timeout} s")
        time.sleep(poll)
