"""BLAS threads per rank: ``import mpiopt`` under a launcher that puts several ranks on a node gives each
rank its share of the cores, in every BLAS and OpenMP pool of the process (numpy's, scipy's own OpenBLAS
loaded later, OpenMP), for every method, unless the user said otherwise.

The reference is threadpoolctl's ``threadpool_info()``: what each loaded library reports about its own pool.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import MPIEXEC
from mpiopt.core.threads import launcher_ranks_on_node, threads_per_rank

# A user's script: numpy first (its pool starts with a thread per core) and some BLAS work, then mpiopt;
# scipy's own OpenBLAS loaded after that; then each method, spied on from inside to see the pools it runs with.
SCRIPT = """
import json, sys
import numpy as np
from threadpoolctl import threadpool_info

def pools():
    return {pool["filepath"]: pool["num_threads"] for pool in threadpool_info()}

seen = {"numpy": pools()}
np.ones((400, 400)) @ np.ones((400, 400))
import mpiopt
seen["import"] = pools()
import scipy.linalg
scipy.linalg.cho_factor(2 * np.eye(300))
seen["scipy"] = pools()

from mpi4py import MPI
from mpiopt.admm import engine, solve
comm = MPI.COMM_WORLD
settings = json.loads(sys.argv[1])
methods = json.loads(sys.argv[2])

def spy(owner, name, label):
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        seen.setdefault(label, pools())
        return original(*args, **kwargs)
    setattr(owner, name, wrapper)

rng = np.random.default_rng(comm.rank)
A, b = rng.standard_normal((300, 40)), rng.standard_normal(300)
report = {}
if "solve" in methods:
    spy(engine.ConsensusADMM, "solve", "solve")
    result = solve(A, b, "squared", "l1", 1.0, comm, working_set=False, **settings)
    report.update(info=result.info["blas_threads"], reason=result.info["blas_threads_reason"])
if "train" in methods:
    from mpiopt.models import get_model
    from mpiopt.optim import get_optimizer
    from mpiopt.train import train
    model = get_model("logistic", n_features=40)
    spy(model, "loss_and_grad", "train")
    X, y = np.random.default_rng(0).standard_normal((200, 40)), np.arange(200) % 2
    train(model, X, y, get_optimizer("sgd", lr=0.1), comm, epochs=1, batch_size=50, **settings)
if "federated" in methods:
    from mpiopt.federated import run_federated
    from mpiopt.models import get_model
    model = get_model("logistic", n_features=40)
    spy(model, "loss_and_grad", "federated")
    data = np.random.default_rng(1)
    clients = [(data.standard_normal((20, 40)), np.arange(20) % 2) for _ in range(4)]
    run_federated(model, clients, "fedavg", comm, rounds=2, fraction=1.0)
if "async_sgd" in methods:
    from mpiopt.asyncsgd import async_sgd
    from mpiopt.asyncsgd.problems import get_problem
    problem = get_problem("quadratic", dim=20)
    spy(problem, "stochastic_grad", "async_sgd")
    async_sgd(problem, comm, method="asgd", runtime="mpi", time_unit=1e-4, max_steps=5)
seen["after"] = pools()
report["seen"] = seen
reports = comm.gather(report)
if comm.rank == 0:
    print(json.dumps(reports))
"""

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "SLURM_CPUS_PER_TASK")


def clean_environment(env=None):
    """This environment without thread variables nor a launcher's (a pytest run under mpiexec has them)."""
    environment = {key: value for key, value in os.environ.items() if key not in VARIABLES
                   and not key.startswith(("PMI_", "MPI_LOCAL", "HYDRA_", "OMPI_", "MV2_"))}
    environment.update(env or {})
    return environment


def run_script(tmp_path, ranks, settings=None, env=None, methods=("solve",), launcher=()):
    """The script at ``ranks`` ranks; every rank's report."""
    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec beside {sys.executable}")
    script = tmp_path / "user_script.py"
    script.write_text(SCRIPT)
    completed = subprocess.run([str(MPIEXEC), "-n", str(ranks), *launcher, sys.executable, str(script),
                                json.dumps(settings or {}), json.dumps(list(methods))],
                               capture_output=True, text=True, timeout=300, env=clean_environment(env))
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def counts(pools):
    return set(pools.values())


needs_cores = pytest.mark.skipif(CORES < 2, reason="a BLAS pool of one thread cannot oversubscribe")


@needs_cores
@pytest.mark.timeout(300)
def test_import_under_mpiexec_gives_every_pool_of_every_method_the_ranks_share_of_the_cores(tmp_path):
    share = threads_per_rank(2)
    reports = run_script(tmp_path, 2, methods=("solve", "train", "federated", "async_sgd"))
    assert any("async_sgd" in report["seen"] for report in reports), "a worker rank computed gradients"
    for report in reports:
        seen = report["seen"]
        assert counts(seen["numpy"]) == {CORES}, "numpy's pool starts with a thread per core"
        assert counts(seen["import"]) == {share}, "import mpiopt limits the pools already loaded"
        assert counts(seen["scipy"]) == {share}, "scipy's own OpenBLAS (PyPI's wheels), loaded after mpiopt, too"
        for phase in ("solve", "train", "federated", "async_sgd", "after"):
            assert counts(seen.get(phase, {"": share})) == {share}, phase
        assert report["info"] == share and "set by mpiopt" in report["reason"] and "2 ranks share" in report["reason"]


@needs_cores
@pytest.mark.timeout(300)
def test_a_launcher_that_does_not_say_is_counted_at_the_first_solve(tmp_path):
    """Without MPI_LOCALNRANKS (srun, say) the first solve counts the node's ranks and limits the process."""
    for report in run_script(tmp_path, 2, launcher=("env", "-u", "MPI_LOCALNRANKS")):
        seen = report["seen"]
        assert counts(seen["import"]) == {CORES} and counts(seen["solve"]) == {threads_per_rank(2)}
        assert counts(seen["after"]) == {threads_per_rank(2)} and "2 ranks share" in report["reason"]


@needs_cores
@pytest.mark.timeout(300)
def test_pools_are_left_alone_when_the_user_set_a_thread_variable_or_one_rank_has_the_node(tmp_path):
    for report in run_script(tmp_path, 2, env={"OMP_NUM_THREADS": str(CORES), "OPENBLAS_NUM_THREADS": str(CORES)}):
        assert all(counts(pools) == {CORES} for pools in report["seen"].values())
        assert report["info"] == CORES and report["reason"] == f"OMP_NUM_THREADS={CORES} is set"
    for report in run_script(tmp_path, 1):
        assert all(counts(pools) == {CORES} for pools in report["seen"].values()), "one rank keeps every core"
        assert report["reason"] == "one rank on this node"


@needs_cores
@pytest.mark.timeout(300)
def test_the_blas_threads_setting_holds_while_the_method_runs(tmp_path):
    for report in run_script(tmp_path, 1, settings={"blas_threads": 1}, methods=("solve", "train")):
        seen = report["seen"]
        assert counts(seen["solve"]) == counts(seen["train"]) == {1} and counts(seen["after"]) == {CORES}
    for report in run_script(tmp_path, 2, settings={"blas_threads": CORES}):
        assert counts(report["seen"]["solve"]) == {CORES} and counts(report["seen"]["after"]) == {threads_per_rank(2)}
    for report in run_script(tmp_path, 2, settings={"blas_threads": 0}):
        assert counts(report["seen"]["solve"]) == {threads_per_rank(2)} and report["info"] is None


def import_alone(env):
    """The pools and mpiopt's plan after ``import numpy, mpiopt`` in a plain process with ``env``."""
    code = ("import json, numpy, mpiopt; from threadpoolctl import threadpool_info; "
            "from mpi4py import MPI; from mpiopt.core.threads import plan_blas_threads; "
            "plan = plan_blas_threads(None, MPI.COMM_SELF); "
            "print(json.dumps([sorted({p['num_threads'] for p in threadpool_info()}), plan.threads, plan.reason]))")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                               env=clean_environment(env))
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


@pytest.mark.timeout(300)
def test_import_reads_the_launchers_and_slurms_variables():
    assert import_alone({"MPI_LOCALNRANKS": "4"})[:2] == [[threads_per_rank(4)], threads_per_rank(4)]
    assert import_alone({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"})[:2] == [[threads_per_rank(4)], threads_per_rank(4)]
    pools, threads, reason = import_alone({"MPI_LOCALNRANKS": "4", "SLURM_CPUS_PER_TASK": "3"})
    assert pools == [3] and threads == 3 and "SLURM_CPUS_PER_TASK" in reason
    pools, threads, reason = import_alone({"MPI_LOCALNRANKS": "4", "MKL_NUM_THREADS": "5"})
    assert pools == [CORES] and threads == 5 and reason == "MKL_NUM_THREADS=5 is set"
    assert import_alone({})[:2] == [[CORES], None]


def test_launcher_ranks_on_node(monkeypatch):
    for name in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert launcher_ranks_on_node() == 1
    monkeypatch.setenv("MV2_COMM_WORLD_LOCAL_SIZE", "6")
    assert launcher_ranks_on_node() == 6


def test_invalid_blas_threads_setting_is_refused():
    import numpy as np
    from mpi4py import MPI

    from mpiopt.admm import solve
    from mpiopt.core import CollectiveError
    with pytest.raises(CollectiveError, match="blas_threads must be None or an integer >= 0, got -1"):
        solve(np.eye(3), np.ones(3), "squared", "l1", 0.1, MPI.COMM_SELF, blas_threads=-1)
