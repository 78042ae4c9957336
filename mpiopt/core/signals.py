"""SIGUSR1 (checkpoint now) and SIGTERM (checkpoint and stop) as flags a method reads once per iteration.

The handlers only set flags, so a signal never interrupts a collective; the
method adds the flags to a small all-reduce it does anyway, so every rank acts
on the same iteration (Slurm's ``--signal=B:USR1@60`` then checkpoints and
requeues a job cleanly).  Outside the main thread signals cannot be caught and
the flags stay down.

The flags are the process's, not one method's: :func:`catch` installs the
handlers, and the command line calls it first thing, so that a signal that
comes while a run is still starting (imports, data, factorizations) waits in
the flags and is acted on at the first iteration, by whichever method then
reads them.  "First thing" means before MPI starts: ``MPI_Init`` waits for
every rank, so once any rank has printed a line every rank's handlers are in,
whatever the machine's load (MPICH's ``MPI_Init`` puts a SIGUSR1 handler of
its own in front of ours, and passes the signal on to it).  When the run's
work is done, :func:`finish` ignores both signals until the process exits: a
finished run has nothing to checkpoint and nothing to stop, so a scheduler's
signal that comes late does not turn it into a failed job.  A :class:`SignalFlags` made while
the handlers are caught reads the same flags (nested methods, such as working
sets' inner solves, share them); one made while they are not installs them
for its own lifetime and puts the previous handlers back afterwards.
"""
import os
import signal

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
_received = dict.fromkeys(SIGNALS, False)
_previous = {}  # signal -> its handler before catch(), while the handlers are caught


def _on_signal(number, _frame):
    _received[number] = True


def caught():
    """Whether the handlers are installed (by :func:`catch`)."""
    return bool(_previous)


def catch():
    """Install the handlers of SIGUSR1 and SIGTERM; True when this call installed them, False when they
    already were or when this is not the main thread (no signal handling then)."""
    if _previous:
        return False
    installed = {}
    for number in SIGNALS:
        try:
            installed[number] = signal.signal(number, _on_signal)
        except ValueError:  # not the main thread
            for other, handler in installed.items():
                signal.signal(other, handler)
            return False
    _previous.update(installed)
    return True


def pending():
    """(SIGUSR1, SIGTERM) received and not yet taken, as booleans; nothing is cleared."""
    return _received[signal.SIGUSR1], _received[signal.SIGTERM]


def release(pass_on=False):
    """Put the previous handlers back and clear the flags.

    With ``pass_on`` a SIGTERM that came and was not acted on is raised again, so that its previous
    handler (by default: terminate the process) has it; a pending SIGUSR1 is dropped then, and SIGUSR1
    is ignored from here on (the command line's runs without a checkpoint: there is nothing to write)."""
    if not _previous:
        return
    term = _received[signal.SIGTERM]
    previous = dict(_previous)
    _previous.clear()
    for number in SIGNALS:
        _received[number] = False
    for number, handler in previous.items():
        signal.signal(number, signal.SIG_IGN if pass_on and number == signal.SIGUSR1 else handler)
    if pass_on and term:
        os.kill(os.getpid(), signal.SIGTERM)


def finish():
    """The run is over: ignore SIGUSR1 and SIGTERM until this process exits, and clear the flags.

    Only for a process that ends with the run (the command line): its previous handlers are not put back,
    because the default actions of both signals would kill a job that has already written its result."""
    for number in SIGNALS:
        try:
            signal.signal(number, signal.SIG_IGN)
        except ValueError:  # not the main thread: nothing was caught
            return
        _received[number] = False
    _previous.clear()


class SignalFlags:
    """The process's signal flags while enabled; ``take()`` returns (usr1, term) as floats and clears usr1.

    Disabled (a run without a checkpoint), ``take()`` returns zeros and leaves the flags alone."""

    def __init__(self, enabled=True):
        self.enabled = enabled
        self.installed = catch() if enabled else False

    def take(self):
        if not self.enabled:
            return 0.0, 0.0
        usr1, term = pending()
        _received[signal.SIGUSR1] = False
        return float(usr1), float(term)

    def restore(self):
        """Put the previous handlers back when this object installed them (else the flags stay caught)."""
        if self.installed:
            self.installed = False
            release()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.restore()
