"""Communicator handling and collective validation.

Every public function in mpiopt takes ``comm=None``; :func:`resolve_comm` is the
one place that turns None into ``MPI.COMM_WORLD``.

Errors must never hang the other ranks.  A check that can fail on some ranks only
(bad data in one shard, say) goes through :func:`check_collectively`: every rank
says what, if anything, is wrong with its own part and which values must agree
across ranks; one allgather shares the verdicts, and every rank raises the same
:class:`CollectiveError` naming each offending rank, or none does.

:func:`mpi_vendor` names the MPI library that mpi4py loaded: a launcher's flags
and srun's PMI plugin depend on it.
"""
from mpi4py import MPI


class CollectiveError(ValueError):
    """Raised identically on every rank of a communicator.

    ``problems`` maps each offending rank to its message.
    """

    def __init__(self, problems):
        self.problems = dict(sorted(problems.items()))
        ranks_by_message = {}
        for rank, message in self.problems.items():
            ranks_by_message.setdefault(message, []).append(rank)
        super().__init__("; ".join(f"{_name_ranks(ranks)}: {message}"
                                   for message, ranks in ranks_by_message.items()))


def _name_ranks(ranks):
    """'rank 3', 'ranks 0-3' or 'ranks 0, 2, 5' for a sorted list of ranks."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def mpi_vendor(version=None):
    """'openmpi', 'mpich' (MPICH and its derivatives: Intel MPI, MVAPICH, Cray MPICH) or 'other', from
    ``MPI.Get_library_version()`` (``version``: that text, read from mpi4py when None; MPI need not be
    initialized)."""
    if version is None:
        version = MPI.Get_library_version()
    if "Open MPI" in version:
        return "openmpi"
    if any(name in version for name in ("MPICH", "Intel(R) MPI", "MVAPICH")):
        return "mpich"
    return "other"


def resolve_comm(comm=None):
    """Return ``comm``, or ``MPI.COMM_WORLD`` when it is None."""
    if comm is None:
        return MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator or None, got {type(comm).__name__}")
    return comm


def first_problem(checks):
    """Return the message of the first failing check, or None.

    ``checks`` is an iterable of ``(ok, message)`` pairs; ``ok`` and ``message``
    may be callables so that later checks only run once earlier ones pass.
    """
    for ok, message in checks:
        if not (ok() if callable(ok) else ok):
            return message() if callable(message) else message
    return None


def check_collectively(comm, problem=None, agree=None):
    """Raise the same CollectiveError on every rank if any rank has a problem.

    ``problem`` is this rank's message (a string) or None when its part is fine.
    ``agree`` maps names to values that must be equal on every rank (the number
    of columns, the penalty weight, the settings); a rank whose value differs
    from rank 0's is named in the error.  Every rank of ``comm`` must call this.
    """
    gathered = comm.allgather((problem, agree or {}))
    problems = {rank: message for rank, (message, _) in enumerate(gathered) if message}
    if not problems:
        reference = gathered[0][1]
        for rank, (_, values) in enumerate(gathered):
            differing = [f"{name}={value!r} differs from rank 0's {reference.get(name)!r}"
                         for name, value in values.items() if value != reference.get(name)]
            if differing:
                problems[rank] = "; ".join(differing)
    if problems:
        raise CollectiveError(problems)


def quiet_barrier(comm, longest_pause=0.01):
    """A barrier that sleeps instead of spinning: MPICH's blocking waits busy-poll, which takes a core
    from the one rank still working (a simulation or a single-process reference on rank 0).  Polls an
    Ibarrier, doubling the pause from 0.1 ms to ``longest_pause`` seconds."""
    import time
    request, pause = comm.Ibarrier(), 1e-4
    while not request.Test():
        time.sleep(pause)
        pause = min(2 * pause, longest_pause)


def run_collectively(function, *args, comm=None, stream=None):
    """Call ``function(*args)`` with ``python -m mpi4py`` semantics; return its exit status.

    A CollectiveError (raised alike on every rank) is printed once, by rank 0,
    and gives exit status 2 on every rank.  Any other exception on any rank
    prints its traceback and aborts the whole job (MPI_Abort), so the other
    ranks are never left waiting for it.
    """
    import sys
    import time
    import traceback
    comm = resolve_comm(comm)
    stream = stream or sys.stderr
    try:
        return function(*args)
    except CollectiveError as error:
        if comm.rank == 0:
            print(f"error: {error}", file=stream, flush=True)
        return 2
    except BaseException as error:
        if isinstance(error, SystemExit) or comm.size == 1:
            raise
        traceback.print_exc()
        print(f"rank {comm.rank} failed; aborting all {comm.size} ranks", file=stream, flush=True)
        sys.stderr.flush()
        time.sleep(0.2)  # let mpiexec forward the traceback before MPI_Abort tears the job down
        comm.Abort(1)
        raise
