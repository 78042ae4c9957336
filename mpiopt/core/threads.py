"""BLAS threads per MPI rank.

Several ranks on a few cores each starting a full BLAS thread pool oversubscribe
the machine and make timings meaningless.  :func:`set_blas_threads_from_mpi`
gives each rank ``cores // ranks on this node`` threads (at least 1) through the
usual environment variables.  It must run before numpy is first imported, so it
only imports mpi4py; it leaves variables the user has already set alone.
"""
import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def available_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def threads_per_rank(ranks_on_node, cores=None):
    """Threads each rank gets when ``ranks_on_node`` ranks share ``cores`` cores."""
    cores = available_cores() if cores is None else cores
    return max(1, cores // max(1, ranks_on_node))


def set_blas_threads_from_mpi(comm=None):
    """Set the BLAS/OpenMP thread variables for this rank; return the count used.

    SLURM_CPUS_PER_TASK wins when present; otherwise the node's cores are shared
    evenly among the ranks on the node.  Variables already set are kept.
    """
    from mpi4py import MPI
    comm = MPI.COMM_WORLD if comm is None else comm
    if os.environ.get("SLURM_CPUS_PER_TASK", "").isdigit():
        threads = int(os.environ["SLURM_CPUS_PER_TASK"])
    else:
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        threads = threads_per_rank(node.Get_size())
        node.Free()
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, str(threads))
    return int(os.environ["OPENBLAS_NUM_THREADS"])
