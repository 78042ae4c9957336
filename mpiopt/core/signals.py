"""SIGUSR1 (checkpoint now) and SIGTERM (checkpoint and stop) as flags a method reads once per iteration.

The handlers only set flags, so a signal never interrupts a collective; the
method adds the flags to a small all-reduce it does anyway, so every rank acts
on the same iteration (Slurm's ``--signal=B:USR1@60`` then checkpoints and
requeues a job cleanly).  Outside the main thread signals cannot be caught and
the flags stay down.
"""
import signal


class SignalFlags:
    """Install the handlers while enabled; ``take()`` returns (usr1, term) as floats and clears usr1."""

    def __init__(self, enabled=True):
        self.usr1 = self.term = False
        self.previous = {}
        if enabled:
            for number, handler in ((signal.SIGUSR1, self._on_usr1), (signal.SIGTERM, self._on_term)):
                try:
                    self.previous[number] = signal.signal(number, handler)
                except ValueError:  # not the main thread: no signal handling
                    pass

    def _on_usr1(self, *_):
        self.usr1 = True

    def _on_term(self, *_):
        self.term = True

    def take(self):
        flags = (float(self.usr1), float(self.term))
        self.usr1 = False
        return flags

    def restore(self):
        """Put the previous handlers back."""
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        self.previous = {}

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.restore()
