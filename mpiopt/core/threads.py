"""BLAS threads per MPI rank.

Several ranks on a few cores, each starting a full BLAS thread pool,
oversubscribe the machine: at 2 ranks on 2 cores a solve runs several times
slower than with one thread per rank.  Not only while mpiopt computes: an
OpenBLAS pool busy-waits for a while after each call, so a threaded call made
before a solve (the user's data, the solver's own checks) keeps a core
spinning while the other rank needs it, and scipy loads a second OpenBLAS of
its own the first time it is used.  One rule, ``cores on this node // ranks on
this node`` threads per rank (at least 1, ``SLURM_CPUS_PER_TASK`` winning under
Slurm), is applied for the whole process by :func:`limit_process_threads`:

* it sets the usual thread variables (those the user has not set), which every
  library loaded later reads when it starts (numpy's OpenBLAS when numpy is
  imported after mpiopt, scipy's own OpenBLAS, OpenMP);
* it limits the pools already loaded (numpy imported before mpiopt) with
  threadpoolctl, once, for the rest of the process.

Who calls it: ``import mpiopt`` (:func:`limit_at_import`) when the launcher's
environment says that several ranks share this node (hydra's
``MPI_LOCALNRANKS``, Open MPI's and MVAPICH's local sizes; no MPI call) or
``SLURM_CPUS_PER_TASK`` is set; the command line
(:func:`set_blas_threads_from_mpi`, before numpy is imported, counting the
node's ranks with MPI as well); and the first solve or training run that finds
several ranks on the node when the launcher did not say
(:func:`plan_blas_threads`).  Nothing is changed when the user has set
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` or ``MKL_NUM_THREADS``.  The
``blas_threads`` setting of a solve or a training run (an integer) limits the
pools to that many threads while it runs and restores them afterwards; 0
leaves them as they are.
"""
import contextlib
import dataclasses
import os
import sys

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


def launcher_ranks_on_node():
    """How many ranks share this node as the launcher's environment says (no MPI call); 1 when it does not say."""
    counts = [int(os.environ[name]) for name in LOCAL_SIZE_VARIABLES if os.environ.get(name, "").isdigit()]
    return max(counts, default=1)


def ranks_on_node(comm=None):
    """How many ranks share this node: the launcher's count of the whole job, or ``comm``'s (collective)."""
    from mpi4py import MPI

    from .comm import resolve_comm
    comm = resolve_comm(comm)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    count = node.Get_size()
    node.Free()
    return max(count, launcher_ranks_on_node())


_SET_HERE = {}  # variable: (value, why) for those limit_process_threads set, not the user


def user_thread_variables():
    """The thread variables the user set (not mpiopt), as {name: value}."""
    return {name: os.environ[name] for name in USER_THREAD_VARIABLES
            if os.environ.get(name) and _SET_HERE.get(name, (None,))[0] != os.environ[name]}


def limit_process_threads(threads, why):
    """``threads`` BLAS/OpenMP threads for the rest of this process; return ``threads``.

    Sets the thread variables that are not set (for the libraries loaded from
    now on) and, unless the user set one of them, limits the pools already
    loaded (threadpoolctl; only when numpy is imported, the way BLAS arrives).
    """
    for name in THREAD_VARIABLES:
        if not os.environ.get(name):
            os.environ[name] = str(threads)
            _SET_HERE[name] = (str(threads), why)
    if "numpy" in sys.modules and not user_thread_variables():
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=threads)
    return threads


def _rule(ranks):
    """(threads, why): the rule for a rank whose node holds ``ranks`` ranks."""
    slurm, cores = _slurm_cpus_per_task(), available_cores()
    if slurm:
        return slurm, "SLURM_CPUS_PER_TASK"
    return threads_per_rank(ranks, cores), (f"{ranks} ranks share {cores} cores on this node" if ranks > 1
                                            else f"one rank on this node's {cores} cores")


def limit_at_import():
    """What ``import mpiopt`` does: limit this process's threads when the launcher says ranks share the node.

    Returns the thread count set, or None when nothing was changed (the user set
    a thread variable, or the launcher says one rank, or nothing).
    """
    ranks = launcher_ranks_on_node()
    if user_thread_variables() or (ranks <= 1 and not _slurm_cpus_per_task()):
        return None
    return limit_process_threads(*_rule(ranks))


def set_blas_threads_from_mpi(comm=None):
    """Set the BLAS/OpenMP thread variables for this rank (the command line, before numpy); return the count used.

    SLURM_CPUS_PER_TASK wins when present; otherwise the node's cores are shared
    evenly among the ranks on the node (collective).  Variables already set are kept.
    """
    limit_process_threads(*_rule(ranks_on_node(comm)))
    return int(os.environ["OPENBLAS_NUM_THREADS"])


def threads_problem(setting):
    """A message when ``setting`` is not a valid ``blas_threads`` value (None or an integer >= 0), else None."""
    valid = setting is None or (isinstance(setting, int) and not isinstance(setting, bool) and setting >= 0)
    return None if valid else f"blas_threads must be None or an integer >= 0, got {setting!r}"


@dataclasses.dataclass(frozen=True)
class ThreadPlan:
    threads: int    # BLAS threads per rank while mpiopt runs, or None when not known (left as configured)
    limit: bool     # whether mpiopt limits the pools while it runs and restores them after (threadpoolctl)
    reason: str     # why, for the log header

    def describe(self):
        if self.threads is None:
            return f"BLAS threads as configured ({self.reason})"
        return f"{self.threads} BLAS thread{'s' if self.threads > 1 else ''} per rank ({self.reason})"


def plan_blas_threads(setting=None, comm=None):
    """The BLAS threads of one run (collective when ``setting`` is None): the setting, else the process's.

    With no setting, several ranks on the node and no thread variable set (the
    launcher did not say how many ranks share the node), the process is limited
    here, once, as ``import mpiopt`` does under the launchers that say.
    """
    if setting == 0:
        return ThreadPlan(None, False, "blas_threads = 0")
    if setting is not None:
        return ThreadPlan(int(setting), True, "blas_threads setting")
    # Every rank takes part in the node count, whatever it then decides: the call is collective.
    ranks = ranks_on_node(comm)
    user = user_thread_variables()
    if not user and not _SET_HERE and (ranks > 1 or _slurm_cpus_per_task()):
        limit_process_threads(*_rule(ranks))
    for name in USER_THREAD_VARIABLES:
        value = os.environ.get(name)
        if value:
            count = int(value) if value.isdigit() and int(value) > 0 else None
            if name in user:
                return ThreadPlan(count, False, f"{name}={value} is set")
            return ThreadPlan(count, False, f"{name}={value}, set by mpiopt for this process: {_SET_HERE[name][1]}")
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
