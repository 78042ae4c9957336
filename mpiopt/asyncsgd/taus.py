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
``pareto``     sqrt(i) (1 + Lomax(alpha)), per gradient         random   (heavy tails: infinite variance for
                                                                          alpha <= 2; option alpha, default 1.5)
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

    def cdf(self, workers, t):
        """P(tau <= t) per worker (fixed: 1 from the mean on)."""
        return (self.mean(workers) <= t).astype(np.float64)

    def quantile(self, workers, q):
        """The smallest t with P(tau <= t) >= q, per worker, by bisection on :meth:`cdf`."""
        workers = np.asarray(workers)
        lo, hi = np.zeros(workers.shape), np.maximum(self.mean(workers), 1e-300)
        while np.any(self.cdf(workers, hi) < q):
            hi = np.where(self.cdf(workers, hi) < q, 2 * hi, hi)
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            below = self.cdf(workers, mid) < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        return hi


class Formula(TauModel):
    """tau = offset(i) + scale(i) * transform(standard variate); mean(i) is its expectation."""

    def __init__(self, name, mean, variate=None, offset=None, scale=None, transform=None, transform_cdf=None):
        self.name, self._mean, self.variate = name, mean, variate
        self._offset, self._scale, self._transform = offset, scale, transform
        self._transform_cdf = transform_cdf  # P(transform(variate) <= y): the random model's cdf

    def cdf(self, workers, t):
        if self.variate is None:
            return super().cdf(workers, t)
        if self._transform_cdf is None:
            raise ValueError(f"compute-time model {self.name} has no distribution function")
        workers = np.asarray(workers, dtype=np.float64)
        y = (t - self._offset(workers)) / self._scale(workers)
        return np.where(y < 0, 0.0, self._transform_cdf(np.maximum(y, 0.0)))

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
        bad = np.flatnonzero(~(np.isfinite(self.values) & (self.values > 0)))
        if self.values.size == 0 or bad.size:
            where = f", got {float(self.values[bad[0]])!r} for worker {bad[0]} (counting from 0)" if bad.size else ""
            raise ValueError(f"fixed compute times must be finite and > 0{where}")

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


def _normal_cdf(z):
    from scipy.special import ndtr
    return ndtr(z)


def _lognormal(sigma=LOGNORMAL_SIGMA):
    name = "lognormal" if sigma == LOGNORMAL_SIGMA else f"lognormal(sigma={sigma:g})"

    def cdf(y):
        with np.errstate(divide="ignore"):
            return _normal_cdf((np.log(y) + sigma ** 2 / 2) / sigma) if sigma > 0 else (y >= 1).astype(float)
    return Formula(name, np.sqrt, "normal", _zero, np.sqrt, lambda z: np.exp(sigma * z - sigma ** 2 / 2), cdf)


PARETO_ALPHA = 1.5


def _pareto(alpha=PARETO_ALPHA):
    """sqrt(i) (1 + Y), Y ~ Lomax(alpha) = exp(E / alpha) - 1 with E ~ Exp(1): P(Y > y) = (1 + y)^(-alpha)."""
    name = "pareto" if alpha == PARETO_ALPHA else f"pareto(alpha={alpha:g})"
    mean = (lambda i: np.sqrt(i) * alpha / (alpha - 1)) if alpha > 1 else (lambda i: np.full(np.shape(i), np.inf))
    return Formula(name, mean, "exponential", np.sqrt, np.sqrt, lambda e: np.expm1(e / alpha),
                   lambda y: -np.expm1(-alpha * np.log1p(y)))


register("tau-model", "constant", lambda: Formula("constant", lambda i: np.ones_like(i)))
register("tau-model", "sqrt", lambda: Formula("sqrt", np.sqrt))
register("tau-model", "linear", lambda: Formula("linear", lambda i: i.copy()))
register("tau-model", "exponential",
         lambda: Formula("exponential", np.sqrt, "exponential", _zero, np.sqrt, lambda e: e, lambda y: -np.expm1(-y)))
register("tau-model", "lognormal", _lognormal, options=Options(
    Option("sigma", float, LOGNORMAL_SIGMA, "s, the spread of log tau (the mean stays sqrt(i))", low=0)))
register("tau-model", "ringmaster",
         lambda: Formula("ringmaster", lambda i: 1 + np.sqrt(i) + np.sqrt(2 * (i + 1) / math.pi), "normal",
                         lambda i: 1 + np.sqrt(i), lambda i: np.sqrt(i + 1), np.abs,
                         lambda y: 2 * _normal_cdf(y) - 1))
register("tau-model", "pareto", _pareto, options=Options(
    Option("alpha", float, PARETO_ALPHA, "the tail index: P(tau > t) ~ t^(-alpha) (mean finite above 1, variance "
                                         "above 2)", low=0, low_open=True)))
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
