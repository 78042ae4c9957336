"""How long each worker takes for one stochastic gradient: the compute-time models.

Worker i (numbered from 1, as in the papers) has a mean time ``mean(i)``; a
model is fixed (every gradient takes exactly that) or draws a new time for
every gradient from one standard variate:

=============  ==============================================  =========
``constant``   tau_i = 1                                        fixed
``sqrt``       tau_i = sqrt(i)                                  fixed
``linear``     tau_i = i                                        fixed
``exponential`` Exp with mean sqrt(i), per gradient             random
``lognormal``  sqrt(i) exp(s Z - s^2/2), Z ~ N(0,1), s = sigma   random   (option sigma, default 0.5)
``ringmaster`` 1 + sqrt(i) + |N(0, i + 1)|, per gradient        random   (the Ringmaster paper's setting)
``real``       the gradient's real computing time (MPI only)    -
=============  ==============================================  =========

Explicit times (``tau=[1, 2.5, 4]``) make a fixed model, :class:`FixedTaus`.
Times are in units: the simulator's clock counts them, the MPI runtime
sleeps ``time_unit`` seconds per unit.  A model's options are declared with
its registration (``register("tau-model", name, factory, options=Options(...))``)
and given as ``tau_options`` (``{"sigma": 1.0}``); a user registers a model of
their own the same way.
"""
import math

import numpy as np

from ..core.options import Option, Options
from ..core.registry import lookup, names, options, register


class TauModel:
    """Per-worker compute times. ``variate``: None (fixed), "exponential" or "normal"."""

    name = "tau"
    variate = None
    real = False

    def mean(self, workers):
        """Mean time of workers (1-based numbers, an array)."""
        raise NotImplementedError

    def times(self, workers, standard):
        """Times of ``workers`` from one standard variate each (ignored when fixed)."""
        return self.mean(workers)

    @property
    def fixed(self):
        return self.variate is None and not self.real

    def draw(self, workers, rng):
        """Times for ``workers`` (an int array, 1-based), drawing from ``rng`` when random."""
        workers = np.asarray(workers)
        if self.variate is None:
            return self.mean(workers)
        return self.times(workers, self.standard(rng, workers.shape))

    def standard(self, rng, shape):
        """Standard variates of this model's kind."""
        return (rng.standard_exponential if self.variate == "exponential" else rng.standard_normal)(shape)

    def sampler(self, workers):
        """A function rng -> times of ``workers`` (fixed arrays of the workers computed once)."""
        workers = np.asarray(workers)
        if self.variate is None:
            means = self.mean(workers)
            return lambda rng: means
        return lambda rng: self.times(workers, self.standard(rng, workers.shape))

    def describe(self):
        return self.name


class Formula(TauModel):
    """tau = offset(i) + scale(i) * transform(standard variate); mean(i) is its expectation."""

    def __init__(self, name, mean, variate=None, offset=None, scale=None, transform=None):
        self.name, self._mean, self.variate = name, mean, variate
        self._offset, self._scale, self._transform = offset, scale, transform

    def mean(self, workers):
        return self._mean(np.asarray(workers, dtype=np.float64))

    def times(self, workers, standard):
        workers = np.asarray(workers, dtype=np.float64)
        return self._offset(workers) + self._scale(workers) * self._transform(standard)

    def sampler(self, workers):
        if self.variate is None:
            return super().sampler(workers)
        workers = np.asarray(workers, dtype=np.float64)
        offset, scale, transform = self._offset(workers), self._scale(workers), self._transform
        if not np.any(offset):
            return lambda rng: scale * transform(self.standard(rng, scale.shape))
        return lambda rng: offset + scale * transform(self.standard(rng, scale.shape))


class FixedTaus(TauModel):
    """Explicit per-worker times (worker i takes ``values[i - 1]``)."""

    name = "fixed"
    options = Options(Option("values", object, help="worker i's time is values[i - 1]: finite numbers > 0"))

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.float64).reshape(-1)
        if self.values.size == 0 or not np.all(np.isfinite(self.values)) or np.any(self.values <= 0):
            raise ValueError("fixed compute times must be finite and > 0")

    def mean(self, workers):
        workers = np.asarray(workers)
        if np.any(workers > self.values.size):
            raise ValueError(f"fixed compute times given for {self.values.size} workers only")
        return self.values[workers - 1]

    def describe(self):
        return f"fixed({', '.join(f'{v:g}' for v in self.values[:8])}{', ...' if self.values.size > 8 else ''})"


class RealWork(TauModel):
    """No artificial time: a gradient takes what computing it takes (the MPI runtime only)."""

    name, real = "real", True

    def mean(self, workers):
        return np.ones(np.shape(workers))


LOGNORMAL_SIGMA = 0.5
_zero = np.zeros_like


def _lognormal(sigma=LOGNORMAL_SIGMA):
    name = "lognormal" if sigma == LOGNORMAL_SIGMA else f"lognormal(sigma={sigma:g})"
    return Formula(name, np.sqrt, "normal", _zero, np.sqrt, lambda z: np.exp(sigma * z - sigma ** 2 / 2))


register("tau-model", "constant", lambda: Formula("constant", lambda i: np.ones_like(i)))
register("tau-model", "sqrt", lambda: Formula("sqrt", np.sqrt))
register("tau-model", "linear", lambda: Formula("linear", lambda i: i.copy()))
register("tau-model", "exponential",
         lambda: Formula("exponential", np.sqrt, "exponential", _zero, np.sqrt, lambda e: e))
register("tau-model", "lognormal", _lognormal, options=Options(
    Option("sigma", float, LOGNORMAL_SIGMA, "s, the spread of log tau (the mean stays sqrt(i))", low=0)))
register("tau-model", "ringmaster",
         lambda: Formula("ringmaster", lambda i: 1 + np.sqrt(i) + np.sqrt(2 * (i + 1) / math.pi), "normal",
                         lambda i: 1 + np.sqrt(i), lambda i: np.sqrt(i + 1), np.abs))
register("tau-model", "real", RealWork)
TAU_MODELS = names("tau-model")


def get_tau_model(model, **values):
    """A TauModel from a registered name (built with its declared options ``values``, the defaults filled
    in), a TauModel, or a sequence of fixed times."""
    if isinstance(model, TauModel):
        return model
    if isinstance(model, str):
        factory = lookup("tau-model", model)
        return factory(**options("tau-model", model).resolve(values, f"tau-model {model!r}"))
    return FixedTaus(model)
