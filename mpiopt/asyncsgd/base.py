"""What a method is: the server's rule for each arriving gradient, the same on every runtime.

A runtime (the discrete-event simulator or MPI ranks) owns the workers and the
clock; a method owns the iterate.  The runtime starts workers computing at the
method's current point ``x`` (step ``k``), and when worker ``w`` finishes a
gradient ``g`` computed at step ``k_at`` it calls ``method.arrive(w, g, k_at)``.
The method applies its rule (step, accumulate, or discard as stale) and answers
which workers must now start computing at its current point:

* ``()``: nobody (the worker waits: Minibatch SGD's barrier);
* a list of workers: those (re)start, any computation of theirs in progress is
  cancelled (the arriving worker, and Ringmaster's stopped workers);
* ``ALL``: every worker restarts (a synchronous step, Rennala's restart).

``start()`` gives the first assignment (``ALL``).  The runtime counts what the
workers compute and what is cancelled; the method counts what it accepts and
discards.  ``x`` is never changed in place: each step makes a new array, so a
runtime may hand the same array to many workers.
"""
import numpy as np

ALL = "all"


class Method:
    """Base of the methods: the iterate, the step counter and the accounting."""

    name = "method"

    def __init__(self, x0, n_workers, step_size):
        self.x = np.array(x0, dtype=np.float64)
        self.k, self.n_workers, self.step_size = 0, int(n_workers), float(step_size)
        self.accepted = np.zeros(self.n_workers, dtype=np.int64)    # gradients used in a step, per worker
        self.discarded = np.zeros(self.n_workers, dtype=np.int64)   # stale gradients thrown away, per worker
        self.steps_taken = 0

    def parameters(self):
        """The method's resolved parameters (step size, batch, threshold, ...), for the result."""
        return {"step_size": self.step_size}

    def start(self):
        return ALL

    def arrive(self, worker, grad, k_at):
        raise NotImplementedError

    def _step(self, direction, gamma):
        """x <- x - gamma * direction, as a new array; k <- k + 1."""
        self.x = self.x - gamma * direction
        self.k += 1


class Accumulator:
    """The sum of the gradients of one step, added in arrival order (so two methods fed the same
    gradients in the same order take bitwise the same step)."""

    def __init__(self, dim):
        self.total, self.count = np.zeros(dim), 0

    def add(self, grad):
        self.total += grad
        self.count += 1

    def take(self):
        """The mean of what was added; the accumulator is empty again."""
        mean = self.total / self.count
        self.total, self.count = np.zeros_like(self.total), 0
        return mean
