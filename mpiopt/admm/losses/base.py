"""What the consensus-ADMM engine needs from a data term f_i (one rank's rows).

A loss shard provides:

* ``n``, ``rows``, ``active`` (rows > 0) and ``kind`` (for the log);
* ``factorize(rho)``: prepare the x-step for this rho (cache a factorization);
* ``prox(v, tolerance)``: x_i = argmin_x f_i(x) + (rho/2) ||x - v||^2, exactly or,
  for iterative x-steps, to a gradient tolerance that the engine tightens as
  ADMM converges;
* ``value(x)``: f_i(x);
* ``curvature()``: a scale of f_i's Hessian per coordinate (the default rho);
* ``state()`` / ``restore(state)``: arrays an iterative x-step warm-starts from,
  for checkpoints.

The engine only calls these, so a new loss never touches it.  The solver also
asks a loss class, registered by name (``register("loss", name)``), for:

* ``options``: the keyword options its constructor takes, declared once
  (``Options(Option(...))``, :mod:`mpiopt.core.options`: ``delta``, ``x_solver``);
* ``check(targets, options)``: a message when the targets, or options (every declared one,
  each already checked against its declaration), do not suit it;
* ``prepare_targets(b, xp)``: the targets it works with (labels as +-1, say);
* ``null_intercept(targets, comm, options)``: the intercept that minimizes the
  loss when every coefficient is 0 (for lambda_max with an intercept);
* ``gradient(x)``: its gradient (for lambda_max and the KKT residual).
"""
from ...core.options import NO_OPTIONS


class LossShard:
    name = "loss"
    iterative = False  # True when prox solves iteratively (inexact x-steps)
    options = NO_OPTIONS
    target_name = "b_local"  # in error messages

    @classmethod
    def check(cls, targets, options):
        return None

    @classmethod
    def prepare_targets(cls, b, xp):
        return b

    @classmethod
    def null_intercept(cls, targets, comm, options):
        raise NotImplementedError(f"the {cls.name} loss has no null intercept; lambda_max with an intercept needs one")

    def __init__(self, design, xp):
        self.design, self.xp = design, xp
        self.rows, self.n = design.rows, design.n
        self.active = self.rows > 0
        self.rho = None

    @property
    def kind(self):
        if not self.active:
            return "empty"
        return "tall" if self.rows >= self.n else "wide"

    def factorize(self, rho):
        self.rho = rho

    def prox(self, v, tolerance=None):
        raise NotImplementedError

    def value(self, x):
        raise NotImplementedError

    def gradient(self, x):
        raise NotImplementedError

    curvature_bound = 1.0  # the loss's second derivative is at most this (1 for squared and Huber, 1/4 logistic)

    def curvature(self):
        """Average diagonal of the Hessian's upper bound (for the default rho); one pass over A, then cached."""
        if getattr(self, "_curvature", None) is None:
            self._curvature = self.curvature_bound * self.design.squared_norm() / max(self.n, 1)
        return self._curvature

    def state(self):
        return {}

    def restore(self, state):
        pass
