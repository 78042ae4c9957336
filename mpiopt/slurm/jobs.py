"""Submit a batch script with sbatch and follow the job with squeue and scontrol (no accounting needed)."""
import dataclasses
import os
import re
import subprocess
import time

from ..core.io import write_atomic

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE"}


@dataclasses.dataclass
class JobResult:
    job_id: str
    state: str
    exit_code: int
    output: str          # the job's %x-%j.out file
    result: str = None   # the JSON result the workload wrote, when known
    restarts: int = 0


def submit(script_text, script_path, *, cwd=None):
    """Write the script (atomically) and submit it; returns the job id."""
    write_atomic(script_path, script_text)
    os.chmod(script_path, 0o755)
    completed = subprocess.run(["sbatch", "--parsable", os.path.abspath(script_path)], capture_output=True,
                               text=True, cwd=cwd)
    if completed.returncode != 0:
        raise RuntimeError(f"sbatch failed: {completed.stderr.strip()}")
    return completed.stdout.strip().split(";")[0]


def job_state(job_id):
    """(state, exit code, restart count, job name, work dir) from scontrol; None when Slurm forgot the job."""
    completed = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True)
    if completed.returncode != 0:
        return None
    fields = dict(re.findall(r"(\w+)=(\S*)", completed.stdout))
    code = int(fields.get("ExitCode", "0:0").split(":")[0])
    return (fields.get("JobState", "UNKNOWN"), code, int(fields.get("Restarts", "0")),
            fields.get("JobName", ""), fields.get("WorkDir", "."))


def wait(job_id, *, poll=2.0, timeout=None, release_requeued=False, result=None):
    """Poll until the job finishes; returns a JobResult.

    ``release_requeued``: a requeued job waits for a begin time (about two
    minutes) before it runs again; release it at once (for tests and the
    local Slurm).
    """
    start = time.time()
    while True:
        state = job_state(job_id)
        if state is None:
            raise RuntimeError(f"job {job_id} is unknown to Slurm (MinJobAge passed?)")
        name, code, restarts, job_name, workdir = state[0], state[1], state[2], state[3], state[4]
        if name in FINISHED:
            output = os.path.join(workdir, f"{job_name}-{job_id}.out")
            result_path = os.path.join(workdir, result) if result else None  # relative to the job's directory
            return JobResult(job_id, name, code, output, result_path, restarts)
        if release_requeued and name == "PENDING" and restarts > 0:
            subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True)
        if timeout is not None and time.time() - start > timeout:
            raise TimeoutError(f"job {job_id} still {name} after {timeout} s")
        time.sleep(poll)
