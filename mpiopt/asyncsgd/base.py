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

What a started worker does is the method's :meth:`Method.job` for it: the
default job (one gradient at ``x``, sent densely), or a richer
:class:`.jobs.Job` (b gradients summed, uploaded as m compressed messages,
under a time budget) for a method with ``uses_jobs = True``; None leaves the
worker idle (Shadowheart's workers that the equilibrium time leaves out).
Then ``arrive`` gets what the job sends, as one dense vector, with
``self.finished`` set to how many gradients it sums (b, or for a job of
trials those that finished within the budget).  The vector may be the
runtime's receive buffer: a method that keeps it past ``arrive`` copies it.

``start()`` gives the first assignment (``ALL``).  The runtime counts what the
workers compute and what is cancelled; the method counts what it accepts and
discards.  ``x`` is never changed in place: each step makes a new array, so a
runtime may hand the same array to many workers.

A method declares the options it takes beyond the step size (``options =
Options(Option(...))``, mpiopt.core.options) and builds itself from them
(:meth:`Method.build`): the declared defaults fill what is not given, and the
method's own ``theory_options`` and ``default_step_size`` turn an option left
at None into the theory's value (Rennala's B, Ringmaster's R), and
``timing_options`` adds what the workers' timing model gives (Shadowheart's
equilibrium time).  ``predicted(problem, timing, epsilon)`` gives the
method's own predicted times when :mod:`.theory`'s table has none, and the
classmethod ``predicted_time(problem, timing, epsilon)`` the times it adds to
every run's table, whichever method runs (Fragile's and Amelie's on a graph).
A method declares what the runtimes and the front ends read: ``uses_jobs``,
``seeded``, ``routed`` (its vectors travel on a pivot's tree of the graph:
on MPI over the graph's topology, :mod:`.routes`) and ``reference`` (the
yardstick of the command line's comparison).  A method of a
user's, registered as ``register("asyncsgd-method", name, cls)``, works the
same way: its ``__init__(x0, n_workers, step_size, **options)`` is given its
declared options, and the step size of Asynchronous SGD's theory by default.
"""
import numpy as np

from ..core.options import NO_OPTIONS
from ..core.random import restore_stream, stream_words
from . import theory
from .jobs import PLAIN

ALL = "all"


class Method:
    """Base of the methods: the iterate, the step counter and the accounting."""

    name = "method"
    options = NO_OPTIONS  # the declared options beyond the step size (a subclass declares its own)
    uses_jobs = False     # True: ``job(worker)`` gives each started worker its own Job
    seeded = False        # True: ``__init__`` takes the run's ``seed`` (a method that draws at random)
    routed = False        # True: x and the results travel on the tree of ``self.pivot`` over the run's graph
    reference = False     # True: the comparison of ``--method all`` gives every time beside this method's

    @classmethod
    def owner(cls):
        """How messages name the method: ``asyncsgd-method 'rennala'``."""
        return f"asyncsgd-method {cls.name!r}"

    @classmethod
    def options_problem(cls, values):
        """The one-line problem of ``values`` (a dict of this method's options), or None: the declaration's
        checks, then the method's own (``check_options``)."""
        return cls.options.problem(values, cls.owner()) or cls.check_options(values)

    @classmethod
    def check_options(cls, values):
        """Checks that a declaration cannot express (a subclass's own), after the declared ones; a message or None."""
        return None

    @classmethod
    def theory_options(cls, values, problem, epsilon):
        """The keywords of ``__init__`` from the resolved options: a subclass puts the theory's value where an
        option is None, or adds what the problem gives (the smoothness constant)."""
        return values

    @classmethod
    def default_step_size(cls, problem, n_workers, epsilon, values):
        """The step size of the theory for these options (Asynchronous SGD's unless a subclass knows better)."""
        return theory.default_step_size("asgd", n_workers, problem.L, problem.sigma2, epsilon)

    @classmethod
    def unavailable(cls, settings, problem=None):
        """Why this method cannot run with ``settings`` (an AsyncSGDSettings) on ``problem`` (a name, a Problem
        or None: any), or None: ``--method all`` leaves such a method out (Shadowheart without upload
        times, Freya PAGE on a problem that is not a finite sum)."""
        return None

    @classmethod
    def timing_options(cls, values, problem, epsilon, timing):
        """The keywords of ``__init__`` after :meth:`theory_options`, with what the workers' timing model
        (:class:`.timing.Timing`, or None) gives; unchanged by default."""
        return values

    @classmethod
    def build(cls, problem, n_workers, epsilon, step_size=None, options=None, timing=None, seed=0):
        """The method at ``problem.x0()`` from its declared ``options`` (defaults filled in), with the theory's
        parameters where none are given (and the run's ``seed`` for a ``seeded`` method); ValueError with the
        one-line problem of a bad option."""
        values = dict(options or {})
        message = cls.options_problem(values)
        if message:
            raise ValueError(message)
        values = cls.theory_options({**cls.options.defaults(), **values}, problem, epsilon)
        values = cls.timing_options(values, problem, epsilon, timing)
        gamma = step_size or cls.default_step_size(problem, n_workers, epsilon, values)
        if cls.seeded:
            values["seed"] = seed
        return cls(problem.x0(), n_workers, gamma, **values)

    @classmethod
    def predicted_time(cls, problem, timing, epsilon):
        """The predicted times (a dict by name, constants dropped) that this method adds to every run's table
        on ``timing``'s workers, whichever method runs; none by default."""
        return {}

    def predicted(self, problem, timing, epsilon):
        """This method's predicted times (a dict by name, constants dropped) beyond :mod:`.theory`'s."""
        return {}

    def job(self, worker):
        """The job of ``worker`` when it is (re)started now: a :class:`.jobs.Job`, or None to leave it idle."""
        return PLAIN

    def point(self):
        """What a worker started now with a job of this method's is given: ``x`` (Freya PAGE gives two
        points end to end for its differences).  Never changed in place, as ``x``."""
        return self.x

    def __init__(self, x0, n_workers, step_size):
        self.x = np.array(x0, dtype=np.float64)
        self.k, self.n_workers, self.step_size = 0, int(n_workers), float(step_size)
        self.accepted = np.zeros(self.n_workers, dtype=np.int64)    # gradients used in a step, per worker
        self.discarded = np.zeros(self.n_workers, dtype=np.int64)   # stale gradients thrown away, per worker
        self.steps_taken = 0
        self.finished = 1  # how many gradients the arriving result sums (the runtime sets it)
        self.now = 0.0     # the runtime's clock at the arriving result (the runtime sets it)

    def state(self, skip=()):
        """(arrays, JSON values) of everything the method holds, for a checkpoint (:mod:`.checkpoint`): its
        attributes but ``skip``, arrays by name, an :class:`Accumulator` as its sum and count, a random stream
        as its state's words (mpiopt.core.random.stream_words), numbers, strings,
        bools and None as they are.  A method with state of another kind (a dict of sets) overrides this and
        :meth:`load_state`; any other attribute is refused (TypeError naming it) rather than lost."""
        arrays, values = {}, {}
        for name, value in vars(self).items():
            if name in skip:
                continue
            if isinstance(value, np.ndarray):
                arrays[name] = value
            elif isinstance(value, Accumulator):
                arrays[name + "__total"], values[name + "__count"] = value.total, value.count
            elif isinstance(value, np.random.Generator):  # a method's own stream (Freya PAGE's draws)
                arrays[name + "__stream"] = stream_words(value)
            elif value is None or isinstance(value, (bool, int, float, str)):
                values[name] = value
            else:
                raise TypeError(f"{self.owner()} keeps {name!r} ({type(value).__name__}), which a checkpoint "
                                "cannot hold; give the method state() and load_state()")
        return arrays, values

    def load_state(self, arrays, values):
        """Put back what :meth:`state` gave."""
        for name, value in values.items():
            if name.endswith("__count"):
                accumulator = getattr(self, name[:-7])
                accumulator.total, accumulator.count = np.array(arrays[name[:-7] + "__total"]), int(value)
            else:
                setattr(self, name, value)
        for name, value in arrays.items():
            if name.endswith("__stream"):
                restore_stream(getattr(self, name[:-8]), value)
            elif not name.endswith("__total"):
                setattr(self, name, np.array(value, dtype=getattr(self, name).dtype))

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


class RoundMethod(Method):
    """A method of synchronous rounds with a planned job per worker (``self.jobs``, None: it sits out) and
    ``self.participants`` workers taking part: what each sends is kept and, once all have sent, added in
    worker order with weights ``self.weights`` (None: 1), whatever the order of arrival, so that every
    runtime gives the same bits; the subclass steps with :meth:`round_total`.  ``planned`` names the
    attributes rebuilt from the options (not checkpointed)."""

    uses_jobs = True
    planned = ("jobs",)
    weights = None

    def __init__(self, x0, n_workers, step_size):
        super().__init__(x0, n_workers, step_size)
        self.received = {}  # worker -> what it sent this round
        self._plan = None   # the workers with a planned job (round_plan)

    def job(self, worker):
        return self.jobs[worker]

    def start(self):
        return self.round_plan()

    def round_plan(self):
        """The workers with a planned job, in worker order: each round (re)starts only them.  The others sit
        out, idle from the start, so leaving them out changes nothing but a walk over all n workers."""
        if self._plan is None:
            self._plan = [w for w, job in enumerate(self.jobs) if job is not None]
        return self._plan

    def keep(self, worker, sent, k_at):
        """Keep ``sent`` (a copy: it may be the runtime's buffer); returns True when the round is complete."""
        if k_at != self.k:  # every round restarts every worker: a runtime bug
            raise RuntimeError(f"{self.name}: worker {worker} sent step {k_at}'s result at step {self.k}")
        self.received[worker] = np.array(sent)
        return len(self.received) >= self.participants

    def round_total(self):
        """The weighted sum of the round's results in worker order; the round is emptied."""
        total = np.zeros(self.x.size)
        for i in sorted(self.received):
            total += self.received[i] if self.weights is None else self.weights[i] * self.received[i]
        self.received = {}
        return total

    def state(self, skip=()):
        arrays, values = super().state(skip=(*self.planned, "received", "_plan", *skip))
        values["received"] = sorted(self.received)
        arrays.update({f"received_{i}": v for i, v in self.received.items()})
        return arrays, values

    def load_state(self, arrays, values):
        values, arrays = dict(values), dict(arrays)
        self.received = {int(i): np.array(arrays.pop(f"received_{i}")) for i in values.pop("received")}
        super().load_state(arrays, values)


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
        self.total, self.count = np.zeros(self.total.size), 0  # (np.zeros_like costs 3 times as much)
        return mean
