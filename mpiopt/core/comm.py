"""Communicator handling and collective validation.

Every public function in mpiopt takes ``comm=None``; :func:`resolve_comm` is the
one place that turns None into ``MPI.COMM_WORLD``.

Errors must never hang the other ranks.  A check that can fail on some ranks only
(bad data in one shard, say) goes through :func:`check_collectively`: every rank
says what, if anything, is wrong with its own part and which values must agree
across ranks; one allgather shares the verdicts, and every rank raises the same
:class:`CollectiveError` naming each offending rank, or none does.
"""
from mpi4py import MPI


class CollectiveError(ValueError):
    """Raised identically on every rank of a communicator.

    ``problems`` maps each offending rank to its message.
    """

    def __init__(self, problems):
        self.problems = dict(sorted(problems.items()))
        lines = [f"rank {rank}: {message}" for rank, message in self.problems.items()]
        super().__init__("; ".join(lines))


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
