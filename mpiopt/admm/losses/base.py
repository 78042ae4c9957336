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

A loss with a Fenchel dual (mpiopt.admm.gap: duality gaps, gap-safe screening
and working sets, with any penalty that bounds its own dual) also provides:

* ``dual_concavity``: mu, the dual's strong concavity (1 for the squared and
  Huber losses, 4 for the logistic one); None (the default): no dual;
* ``dual_sums(z, comm, intercept, theta_wanted, margin, dual_margin)``: at z,
  theta_j = -phi'(a_j^T z) (balanced to sum 0 with an intercept; with
  ``dual_margin``, the margins of another point, -phi' there), and the
  all-reduced host array [A^T theta, f(z), s_1, s_2]; returns (that array, the
  loss's own state for ``dual_value``, this rank's theta or None);
* ``dual_value(sums, scale, state, comm)``: -sum_j phi*(-scale theta_j) from
  the sums (collective when it needs one more all-reduce).
"""
import numpy as np
from mpi4py import MPI

from ...core.options import NO_OPTIONS


def host_allreduce(comm, values):
    """Sum a host list or array over the ranks (plain MPI: exact, whatever reducer the z-step uses)."""
    values = np.array(values, dtype=float)
    comm.Allreduce(MPI.IN_PLACE, values, op=MPI.SUM)
    return values


def quadratic_dual_value(sums, scale):
    """-sum_j phi*(-s theta_j) = s theta^T b - s^2 ||theta||^2 / 2 from sums = [theta^T b, ||theta||^2] (the
    squared loss, and the Huber loss inside its domain |theta_j| <= delta)."""
    first, second = float(sums[0]), float(sums[1])
    return scale * first - 0.5 * scale * scale * second


def balance_signs(theta, comm, xp, active):
    """theta with sum 0 for an intercept, keeping each entry in [0, theta_j]: the larger of the positive and the
    negative parts' sums is scaled down to the other (one all-reduce of two scalars)."""
    local = [float(theta[theta > 0].sum()), float(-theta[theta < 0].sum())] if active else [0.0, 0.0]
    positive, negative = host_allreduce(comm, local)
    if positive > negative:
        factors = (negative / positive, 1.0)
    else:
        factors = (1.0, positive / negative if negative > 0 else 1.0)
    if active and factors != (1.0, 1.0):
        theta = theta * xp.where(theta > 0, factors[0], factors[1])
    return theta


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

    dual_concavity = None  # mu of the dual (module docstring); None: no dual, no certificate
    working_sets_by_default = True  # with a dual: working sets unless working_set=False (measured per loss)
    newton_inner = False  # True: ``newton_terms``, ``margin_value``, ``dual_value_bound``: proximal Newton on
                          # working sets (proxnewton.py)
    newton_dual_count = 1  # the dual sums ``newton_terms`` gives
    constant_hessian = False  # phi'' constant (``newton_terms`` gives None for it): the Hessian is formed once

    def dual_sums(self, z, comm, intercept, theta_wanted, margin, dual_margin=None):
        raise NotImplementedError(f"the {self.name} loss has no dual")

    def dual_value(self, sums, scale, state, comm):
        raise NotImplementedError(f"the {self.name} loss has no dual")

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
