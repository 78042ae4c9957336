"""The Python API limits BLAS threads when ranks share a node, unless the user said otherwise."""
import json
import os
import subprocess
import sys

import pytest

from conftest import MPIEXEC
from mpiopt.core.threads import ThreadPlan, plan_blas_threads, threads_per_rank

SCRIPT = """
import json, sys
from mpi4py import MPI
import numpy as np
from threadpoolctl import threadpool_info
from mpiopt.admm import engine, solve

def blas_threads():
    return max(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")

seen = {}
original = engine.ConsensusADMM.solve
def spy(self, *args, **kwargs):
    seen["during"] = blas_threads()
    return original(self, *args, **kwargs)
engine.ConsensusADMM.solve = spy

comm = MPI.COMM_WORLD
rng = np.random.default_rng(comm.rank)
A, b = rng.standard_normal((300, 40)), rng.standard_normal(300)
settings = json.loads(sys.argv[1])
before = blas_threads()
result = solve(A, b, "squared", "l1", 1.0, comm, **settings)
report = {"before": before, "during": seen["during"], "after": blas_threads(),
          "info": result.info["blas_threads"], "reason": result.info["blas_threads_reason"]}
reports = comm.gather(report)
if comm.rank == 0:
    print(json.dumps(reports))
"""

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def run_api(tmp_path, ranks, settings=None, env=None):
    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec beside {sys.executable}")
    script = tmp_path / "api.py"
    script.write_text(SCRIPT)
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                                  "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "SLURM_CPUS_PER_TASK")}
    environment.update(env or {})
    completed = subprocess.run([str(MPIEXEC), "-n", str(ranks), sys.executable, str(script),
                                json.dumps(settings or {})], capture_output=True, text=True, timeout=120,
                               env=environment)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


needs_cores = pytest.mark.skipif(CORES < 2, reason="a BLAS pool of one thread cannot oversubscribe")


@needs_cores
@pytest.mark.timeout(150)
def test_api_limits_blas_threads_while_ranks_share_the_node_and_restores_them(tmp_path):
    for report in run_api(tmp_path, 2):
        assert report["before"] == CORES, "BLAS starts with a thread per core"
        assert report["during"] == threads_per_rank(2) == report["info"]
        assert report["after"] == report["before"], "the user's thread pools are restored after the solve"
        assert "2 ranks share" in report["reason"]


@needs_cores
@pytest.mark.timeout(150)
def test_api_leaves_blas_threads_alone_when_the_user_set_them(tmp_path):
    for report in run_api(tmp_path, 2, env={"OMP_NUM_THREADS": str(CORES), "OPENBLAS_NUM_THREADS": str(CORES)}):
        assert report["during"] == CORES and "OMP_NUM_THREADS" in report["reason"]
    for report in run_api(tmp_path, 2, settings={"blas_threads": 0}):
        assert report["during"] == CORES and report["info"] is None
    for report in run_api(tmp_path, 1):
        assert report["during"] == CORES, "one rank on the node keeps every core"


@needs_cores
@pytest.mark.timeout(150)
def test_blas_threads_setting_wins(tmp_path):
    for report in run_api(tmp_path, 1, settings={"blas_threads": 1}):
        assert report["during"] == 1 and report["after"] == CORES


def test_plan_reads_the_environment(monkeypatch):
    from mpi4py import MPI
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MPI_LOCALNRANKS", "4")  # what hydra tells each of 4 ranks on this node
    assert plan_blas_threads(None, MPI.COMM_SELF) == ThreadPlan(threads_per_rank(4), True, plan_blas_threads(
        None, MPI.COMM_SELF).reason)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    assert plan_blas_threads(None, MPI.COMM_SELF).threads == 3
    monkeypatch.setenv("MKL_NUM_THREADS", "5")
    plan = plan_blas_threads(None, MPI.COMM_SELF)
    assert not plan.limit and plan.threads == 5 and "MKL_NUM_THREADS=5 is set" in plan.describe()


def test_invalid_blas_threads_setting_is_refused():
    import numpy as np
    from mpi4py import MPI

    from mpiopt.admm import solve
    from mpiopt.core import CollectiveError
    with pytest.raises(CollectiveError, match="blas_threads must be None or an integer >= 0, got -1"):
        solve(np.eye(3), np.ones(3), "squared", "l1", 0.1, MPI.COMM_SELF, blas_threads=-1)
