"""What an optimizer is: a flat vector and its gradient in, the vector updated in place.

An optimizer knows nothing of ranks or models.  ``step(params, grad)`` updates
``params`` (a writable 1-D float64 array, or a slice of one) in place from
``grad`` and never modifies ``grad``.  Its state is a step count and a few
float64 arrays (PyTorch's names: ``momentum_buffer``, ``exp_avg``, ...), each
created at the first step with the length of the vector it is given, so that
ZeRO-style training can hand each rank's optimizer only its shard:
``optimizer.step(params[a:b], grad[a:b])`` keeps state of length b - a, and,
every update being elementwise, shards stepped apart give bit for bit the
vector stepped whole.

``state_dict()`` returns plain numbers and copies of the arrays: ``step``,
the hyperparameters (``lr``, ...) and, once a step has been taken, the state
arrays; it survives ``numpy.savez``.  ``load_state_dict(d)`` restores all of
them, hyperparameters included (as PyTorch does: a schedule's current ``lr``
comes back), and a resumed run continues bit for bit.

**Backends.**  ``params`` may be a CuPy array (a GPU run): the update is then
CuPy's, the same lines (``xp = get_array_module(params)``), and the state
arrays live on the GPU beside the parameters.  ``state_dict()`` always
returns host (numpy) copies, so a checkpoint is the same file either way, and
state loaded from numpy moves to the device at the next step.
"""
import math
import numbers

import numpy as np

from ..core.backend import get_array_module, to_host
from ..core.comm import first_problem
from ..core.options import Declared, Option


def in_range(value, low, high=math.inf):
    """Whether ``value`` is a real number (not a bool) in [low, high)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and low <= value < high


def number_option(name, default, help_text, high=None):
    """A hyperparameter that is a finite number >= 0 (at most ``high``), worded as the optimizers always did."""
    words = "a number >= 0" if high is None else f"a number in [0, {high:g}]"
    return Option(name, float, default, help_text, low=0, high=high, message=f"{name} must be {words}, got {{value!r}}")


def flag_option(name, default, help_text):
    """A hyperparameter that is True or False."""
    return Option(name, bool, default, help_text, message=f"{name} must be True or False, got {{value!r}}")


class Optimizer(Declared):
    """Subclasses name their HYPERPARAMETERS and FLAGS, declare their constructor's ``options``
    (:mod:`mpiopt.core.options`) and implement ``problems`` (their relations between hyperparameters),
    ``state_names`` and ``update``."""

    name = "optimizer"
    HYPERPARAMETERS = ()  # real numbers, saved in state_dict
    FLAGS = ()            # booleans, saved in state_dict

    def __init__(self, **hyperparameters):
        self.steps = 0
        self.size = None  # the length of the vector the state is for, fixed at the first step
        self.state = {}
        self.configure(hyperparameters)

    def __repr__(self):
        settings = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.HYPERPARAMETERS + self.FLAGS)
        return f"{type(self).__name__}({settings})"

    def problems(self):
        """(ok, message) pairs on the hyperparameters beyond their declaration (relations between them), as
        :func:`mpiopt.core.comm.first_problem` takes."""
        return []

    def state_names(self):
        """The names of the per-coordinate state arrays under the current hyperparameters."""
        raise NotImplementedError

    def update(self, params, grad):
        """One update of ``params`` in place; ``self.steps`` already counts it."""
        raise NotImplementedError

    def configure(self, hyperparameters):
        """Set the hyperparameters, or raise ValueError and keep the previous ones."""
        previous = {name: getattr(self, name, None) for name in hyperparameters}
        self.__dict__.update(hyperparameters)
        declared = type(self).options_problem({name: getattr(self, name) for name in self.options
                                               if hasattr(self, name)})
        problem = declared or first_problem(list(self.problems()))
        if problem:
            self.__dict__.update(previous)
            raise ValueError(problem if declared else f"{self.name}: {problem}")
        for name in self.HYPERPARAMETERS:
            setattr(self, name, float(getattr(self, name)))
        for flag in self.FLAGS:
            setattr(self, flag, bool(getattr(self, flag)))

    def step(self, params, grad):
        """Update ``params`` in place from ``grad``; see the module docstring."""
        xp = get_array_module(params)
        array = isinstance(params, (np.ndarray, xp.ndarray))
        if not (array and params.dtype == np.float64 and params.ndim == 1
                and getattr(params.flags, "writeable", True)):
            described = f"a {params.ndim}-D {params.dtype} array" if array else type(params).__name__
            raise ValueError(f"{self.name}: params must be a writable 1-D float64 numpy array (or CuPy array) "
                             f"(it is updated in place), got {described}")
        grad = xp.asarray(grad, dtype=np.float64)
        if grad.shape != params.shape:
            raise ValueError(f"{self.name}: grad has shape {grad.shape}, params {params.shape}")
        if self.size is None:
            self.size = params.size
            self.state = {name: xp.zeros(params.size) for name in self.state_names()}
        elif self.size != params.size:
            raise ValueError(f"{self.name}: this optimizer's state is for a vector of {self.size} entries, "
                             f"got one of {params.size} (use one optimizer per shard)")
        elif self.state and get_array_module(*self.state.values()) is not xp:
            self.state = {name: xp.asarray(array) for name, array in self.state.items()}  # loaded on the other side
        self.steps += 1
        self.update(params, grad)

    def hyperparameters(self):
        """Every hyperparameter and flag by name (``lr``, ``momentum``, ``betas`` as ``beta1``/``beta2``, ...):
        what a run resumed from a checkpoint must keep (trainers put them in their fingerprint)."""
        return {name: getattr(self, name) for name in self.HYPERPARAMETERS + self.FLAGS}

    def state_dict(self):
        """``step``, the hyperparameters and copies of the state arrays; see the module docstring."""
        entries = {"step": self.steps}
        entries.update(self.hyperparameters())
        entries.update({name: to_host(array).copy() for name, array in self.state.items()})
        return entries

    def load_state_dict(self, entries):
        """Restore what :meth:`state_dict` returned (numpy 0-d arrays are taken as numbers)."""
        values = {name: value.item() if isinstance(value, (np.ndarray, np.generic)) and np.ndim(value) == 0
                  else value for name, value in dict(entries).items()}
        settings = self.HYPERPARAMETERS + self.FLAGS
        missing = [name for name in ("step",) + settings if name not in values]
        if missing:
            raise ValueError(f"{self.name}: the state dict lacks {', '.join(missing)}")
        steps = values["step"]
        if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 0:
            raise ValueError(f"{self.name}: step must be an integer >= 0, got {steps!r}")
        previous = {name: getattr(self, name) for name in settings}
        self.configure({name: values[name] for name in settings})
        try:
            state = self._arrays(values, steps)
        except ValueError:
            self.configure(previous)
            raise
        self.steps, self.state = int(steps), state
        self.size = next(iter(state.values())).size if state else None

    def _arrays(self, values, steps):
        expected = self.state_names() if steps else []
        unexpected = sorted(set(values) - {"step", *self.HYPERPARAMETERS, *self.FLAGS, *expected})
        missing = [name for name in expected if name not in values]
        if unexpected or missing:
            raise ValueError(f"{self.name}: after {steps} steps the state dict holds "
                             f"{', '.join(expected) or 'no arrays'}; " +
                             (f"missing {', '.join(missing)}" if missing else f"unexpected {', '.join(unexpected)}"))
        arrays = {name: np.array(to_host(values[name]), dtype=np.float64) for name in expected}
        sizes = {name: array.shape for name, array in arrays.items()}
        if any(len(shape) != 1 for shape in sizes.values()) or len(set(sizes.values())) > 1:
            raise ValueError(f"{self.name}: state arrays must be flat and of one length, got shapes {sizes}")
        return arrays
