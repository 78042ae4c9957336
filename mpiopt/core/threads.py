"""BLAS threads per MPI rank.

Several ranks on a few cores, each starting a full BLAS thread pool,
oversubscribe the machine: at 2 ranks on 2 cores a solve runs several times
slower than with one thread per rank.  Two controls share one rule, ``cores
on this node // ranks on this node`` threads per rank (at least 1), with
``SLURM_CPUS_PER_TASK`` winning under Slurm:

* the command line calls :func:`set_blas_threads_from_mpi` before numpy is
  first imported; it sets the usual environment variables, leaving those the
  user has already set alone;
* the Python API, where numpy is already imported, limits the thread pools at
  run time with threadpoolctl (:func:`blas_threads`) while mpiopt's solvers
  run, and restores them afterwards.  It does so only when several ranks share
  the node and the user has set neither a thread variable nor the
  ``blas_threads`` setting (an integer: that many threads; 0: leave the pools
  as they are).
"""
import contextlib
import dataclasses
import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
USER_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# Ranks on this node, as the launchers say: MPICH/Intel MPI (hydra), Open MPI, MVAPICH.
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")


def available_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def threads_per_rank(ranks_on_node, cores=None):
    """Threads each rank gets when ``ranks_on_node`` ranks share ``cores`` cores."""
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, ranks_on_node))


def _slurm_cpus_per_task():
    value = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def ranks_on_node(comm=None):
    """How many ranks share this node: the launcher's count of the whole job, or ``comm``'s (collective)."""
    from mpi4py import MPI

    from .comm import resolve_comm
    comm = resolve_comm(comm)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    count = node.Get_size()
    node.Free()
    for name in LOCAL_SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            count = max(count, int(value))
    return count


_SET_HERE = {}  # variable: (value, why) for those set_blas_threads_from_mpi set, not the user


def set_blas_threads_from_mpi(comm=None):
    """Set the BLAS/OpenMP thread variables for this rank; return the count used.

    SLURM_CPUS_PER_TASK wins when present; otherwise the node's cores are shared
    evenly among the ranks on the node.  Variables already set are kept.
    """
    slurm = _slurm_cpus_per_task()
    ranks = ranks_on_node(comm)
    threads = slurm or threads_per_rank(ranks)
    cores = available_cores()
    why = ("SLURM_CPUS_PER_TASK" if slurm else f"{ranks} ranks share {cores} cores on this node" if ranks > 1
           else f"one rank on this node's {cores} cores")
    for name in THREAD_VARIABLES:
        if name not in os.environ:
            os.environ[name] = str(threads)
            _SET_HERE[name] = (str(threads), why)
    return int(os.environ["OPENBLAS_NUM_THREADS"])


def threads_problem(setting):
    """A message when ``setting`` is not a valid ``blas_threads`` value (None or an integer >= 0), else None."""
    valid = setting is None or (isinstance(setting, int) and not isinstance(setting, bool) and setting >= 0)
    return None if valid else f"blas_threads must be None or an integer >= 0, got {setting!r}"


@dataclasses.dataclass(frozen=True)
class ThreadPlan:
    threads: int    # BLAS threads per rank while mpiopt runs, or None when not known (left as configured)
    limit: bool     # whether mpiopt limits the pools at run time (threadpoolctl)
    reason: str     # why, for the log header

    def describe(self):
        if self.threads is None:
            return f"BLAS threads as configured ({self.reason})"
        return f"{self.threads} BLAS thread{'s' if self.threads > 1 else ''} per rank ({self.reason})"


def plan_blas_threads(setting=None, comm=None):
    """What :func:`blas_threads` will do (collective when ``setting`` is None)."""
    if setting == 0:
        return ThreadPlan(None, False, "blas_threads = 0")
    if setting is not None:
        return ThreadPlan(int(setting), True, "blas_threads setting")
    # Every rank takes part in the node count, whatever it then decides: the call is collective.
    ranks = ranks_on_node(comm)
    given = [name for name in USER_THREAD_VARIABLES if os.environ.get(name)]
    if given:
        name, value = given[0], os.environ[given[0]]
        count = int(value) if value.isdigit() and int(value) > 0 else None
        ours = _SET_HERE.get(name, (None, None))
        reason = f"{name}={value}, set by mpiopt: {ours[1]}" if ours[0] == value else f"{name}={value} is set"
        return ThreadPlan(count, False, reason)
    slurm = _slurm_cpus_per_task()
    if slurm:
        return ThreadPlan(slurm, True, "SLURM_CPUS_PER_TASK")
    if ranks > 1:
        return ThreadPlan(threads_per_rank(ranks), True,
                          f"limited at run time: {ranks} ranks share {available_cores()} cores on this node; "
                          "set blas_threads or OMP_NUM_THREADS to change")
    return ThreadPlan(None, False, "one rank on this node")


@contextlib.contextmanager
def blas_threads(plan):
    """Limit the BLAS and OpenMP thread pools to ``plan.threads`` inside the block (threadpoolctl)."""
    if not plan.limit:
        yield plan
        return
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=plan.threads):
        yield plan
