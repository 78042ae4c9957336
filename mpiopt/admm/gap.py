"""Duality gaps across ranks: a certificate of optimality for sparse GLMs.

For P(w) = sum_j phi(a_j^T w, t_j) + g(w), with the rows a_j split over the
ranks and g a penalty on every coordinate but an unpenalized intercept,
Fenchel duality gives for any theta in R^m

    D(theta) = -sum_j phi*(-theta_j, t_j) - g*(A^T theta) <= P(w*) <= P(w),

so gap = P(w) - D(theta) >= 0 bounds P(w) - P(w*).  The dual point comes from
the (generalized) residual at w, rescaled into the dual's domain, in the
manner of glmnet, celer and skglm (Massias et al. 2018, Ndiaye et al. 2017):

* squared loss phi = (m - b)^2 / 2: theta = r = b - A w, and
  -phi*(-theta) summed is theta^T b - ||theta||^2 / 2;
* logistic loss phi = log(1 + exp(-y m)), labels +-1: theta_j = y_j p_j with
  p_j = sigmoid(-y_j m_j) in [0, 1], and -phi*(-theta_j) = H(p_j), the binary
  entropy -p log p - (1 - p) log(1 - p);
* intercept (an unpenalized column of ones): the dual needs sum_j theta_j = 0;
  the squared loss's residual is centered, the logistic one balanced (the
  larger of the two label classes' sums of p_j is scaled down to the other,
  which keeps every p_j in [0, 1]);
* Huber phi = huber_delta(m - b): theta = clip(b - A w, -delta, delta), and
  -phi*(-theta) = theta^T b - ||theta||^2 / 2 on the box |theta_j| <= delta
  (balanced as the logistic point with an intercept, which keeps it there);
* L1: g* is the indicator of ||v||_inf <= l1, so theta is scaled by
  s = min(1, l1 / ||A^T theta||_inf); the group lasso lam sum_g w_g ||w_g||: by
  s = min(1, lam / max_g ||(A^T theta)_g|| / w_g); elastic net (l2 > 0):
  g*(v) = sum_k max(|v_k| - l1, 0)^2 / (2 l2) is finite, theta is used as it is.

These are capabilities of the pieces, not of this module: a loss provides its
dual point and value (``dual_sums``, ``dual_value``, ``dual_concavity``:
losses/base.py) and a penalty that declares ``DUAL`` its scaling and conjugate
(``dual_scale``, ``conjugate``), with ``SCREENING`` its screening levels
(``dual_levels``: penalties.py), so any pair that provides them gets gaps, and
with the levels gap-safe screening and working sets.

Cost of one evaluation: A w and A^T theta on each shard (one pass over its
rows, dense or sparse; a tall squared shard uses its Gram matrix instead,
O(n^2)), one all-reduce of n + 3 numbers (A^T theta and the scalar sums) and,
with an intercept or a rescaled logistic point, one or two all-reduces of a
few scalars.  The all-reduces are plain MPI sums, not the z-step's reducer
(which may compress): the certificate is exact.  Ranks without rows contribute zeros.  Other
losses or penalties have no gap here (:func:`certificate_of` returns None).
"""
import dataclasses

import numpy as np

from ..core import backend
from .losses.base import host_allreduce
from .penalties import SCREENING, Unpenalized, capabilities_of


@dataclasses.dataclass
class Gap:
    """One evaluation: the primal and dual values, gap = primal - dual, and the relative gap."""
    primal: float
    dual: float
    gap: float
    relative: float  # gap / max(|primal|, tiny)
    correlation: object = dataclasses.field(default=None, repr=False, compare=False)  # A^T theta (penalized
                                                                                      # columns), the same on every rank
    scale: float = 1.0  # theta = scale x the (generalized, centered) residual: correlation / scale is -grad


@dataclasses.dataclass(frozen=True)
class Certificate:
    """What a duality gap needs of a loss and penalty: the penalty on the penalized columns (its dual
    capabilities) and whether the last coordinate is an unpenalized intercept (then sum_j theta_j = 0)."""
    penalty: object
    intercept: bool

    @property
    def screens(self):
        """Whether the penalty declares its dual levels (``SCREENING``): gap-safe screening and working sets."""
        return SCREENING in capabilities_of(self.penalty)


def certificate_of(loss, penalty):
    """The Certificate when this loss and penalty have a duality gap, else None (the same on every rank)."""
    intercept = False
    if type(penalty) is Unpenalized:
        if penalty.count != 1 or not loss.design.intercept:
            return None
        penalty, intercept = penalty.penalty, True
    elif getattr(loss.design, "intercept", False):
        return None
    if loss.dual_concavity is None or not penalty.certifiable():
        return None
    return Certificate(penalty, intercept)


def dual_point(loss, penalty, z, comm, theta_wanted=True, margin=None, dual_margin=None):
    """(Gap, theta) at the consensus point z; theta is this rank's rows of the dual point, None on a rank
    without rows (collective).

    ``dual_margin``: the margins A_aug z' of another point z', whose residual makes the dual point (P is
    still taken at z): the working sets' proximal Newton passes z' = z + its next direction, about as far
    from the optimum as the square of z's distance, so that the gap tracks P(z) - P* where the
    dual point of z's own residual gives a gap of the order of its square root.

    With ``theta_wanted=False`` a tall squared shard (which keeps its Gram matrix G = A^T A) works from G
    alone, O(n^2) instead of a pass over its rows: A^T r = A^T b - G z, r^T b = b^T b - (A^T b)^T z and
    ||r||^2 = 2 f_i(z) (the same value the objective uses); theta is then None.  It does so only once the
    Gram matrix is formed (the working-set solver never forms it and passes ``margin`` = A_aug z instead,
    computed from the working set's columns, which saves a pass).
    """
    certificate = certificate_of(loss, penalty)
    intercept = certificate.intercept
    # the sums below depend on z alone, not on the weights: a path's next weight starts at the point where the
    # last one was certified, so they are kept for that point (O(n) to recognise it) and reused
    theta = None
    if theta_wanted:
        host, state, theta = loss.dual_sums(z, comm, intercept, True, margin, dual_margin)
    elif dual_margin is None and has_dual_sums(loss, penalty, z):
        cached = loss._dual_sums
        host, state = cached[2].copy(), cached[3]
    else:
        host, state = kept_dual_sums(loss, z, comm, intercept, margin, dual_margin)
    return _gap_of_sums(loss, penalty, certificate, z, comm, host, state, theta)


def kept_dual_sums(loss, z, comm, intercept, margin=None, dual_margin=None):
    """(The all-reduced dual sums at z: [A^T theta, f(z), the loss's two sums], the loss's state), theta =
    -phi'(A z) (or at ``dual_margin``), balanced with an ``intercept``, kept on the loss for :func:`dual_point`
    at the same z (collective).  lambda_max takes its gradient from them (-A^T theta at the null model, where
    an intercept's own gradient is 0, so the balance changes nothing but rounding): the working sets' first
    certificate at that point then makes no pass of its own."""
    host, state, _ = loss.dual_sums(z, comm, intercept, False, margin, dual_margin)
    loss._dual_sums = (intercept, z.copy(), host.copy(), state)
    return host, state


def has_dual_sums(loss, penalty, z):
    """Whether :func:`dual_point` would reuse kept sums at z (a path's next weight starts where the last
    weight was certified): a refined dual point is then not worth its Hessian."""
    cached = getattr(loss, "_dual_sums", None)
    return cached is not None and cached[0] == certificate_of(loss, penalty).intercept \
        and cached[1].shape == z.shape and bool((cached[1] == z).all())


def _gap_of_sums(loss, penalty, certificate, z, comm, host, state, theta):
    """(Gap, theta) from the all-reduced sums ``host``: theta scaled into the dual's domain by the penalty's
    ``dual_scale``, the dual value the loss's at that scale less the penalty's conjugate there."""
    n, intercept = loss.n, certificate.intercept
    host_correlation = host[:n - 1] if intercept else host[:n]
    primal = float(host[n]) + penalty.value(z)
    scale = certificate.penalty.dual_scale(host_correlation)
    scaled = host_correlation if scale == 1.0 else scale * host_correlation
    dual = loss.dual_value(host[n + 1:], scale, state, comm) - certificate.penalty.conjugate(scaled)
    if theta is not None and scale != 1.0:
        theta = scale * theta
    gap = max(primal - dual, 0.0)  # >= 0 in exact arithmetic; a tight dual point at the optimum may round below
    return Gap(primal=primal, dual=dual, gap=gap, relative=gap / max(abs(primal), 1e-300),
               correlation=loss.xp.asarray(scaled), scale=scale), theta


def safe_radius(loss, gap):
    """The radius of the gap-safe sphere around the dual point: the dual is mu-strongly concave (the loss's
    ``dual_concavity``: 1 for the squared and Huber losses, 4 for the logistic one), so
    ||theta - theta*|| <= sqrt(2 gap / mu)."""
    return float(np.sqrt(2.0 * max(gap, 0.0) / loss.dual_concavity))


def column_norms(loss, comm):
    """||a_k|| over all the rows, for each penalized column, on the host (collective: one all-reduce)."""
    design = loss.design
    if loss.active and design.rows:
        local = np.asarray(backend.to_host(design.column_squares()), dtype=float).ravel()
    else:
        local = np.zeros(design.features)
    return np.sqrt(host_allreduce(comm, local))


def screen(loss, penalty, z, comm, norms):
    """The gap-safe sphere test (Fercoq, Gramfort and Salmon 2015; Ndiaye et al. 2017) at z (collective).

    Returns (kept, Gap): ``kept`` a host boolean array over the penalized columns, False where the
    penalty's level plus r times its spread is below its bound (L1: |a_k^T theta| + r ||a_k|| < l1; a group:
    ||A_g^T theta|| + r ||A_g||_F < lam w_g), which proves the coefficient (or group) zero at the optimum
    (its subgradient condition holds strictly); every rank gets the same mask, computed from all-reduced
    quantities.  The intercept is never screened.
    """
    gap, _ = dual_point(loss, penalty, z, comm, theta_wanted=False)
    return sphere_test(loss, gap, norms, certificate_of(loss, penalty).penalty, comm), gap


def sphere_test(loss, gap, norms, penalty, comm):
    """The columns the gap-safe sphere around ``gap``'s dual point does not prove zero for ``penalty`` (the
    certificate's, on the penalized columns): a host boolean array, the same on every rank (all-reduced sums
    may round differently on different ranks, so rank 0 decides)."""
    correlation = np.asarray(backend.to_host(gap.correlation), dtype=float)
    level, bound, spread = penalty.dual_levels(correlation, norms)
    kept = (level + safe_radius(loss, gap.gap) * spread >= bound * (1.0 - 1e-9)).astype(np.uint8)  # margin
    comm.Bcast(kept, root=0)
    return kept.astype(bool)


def duality_gap(loss, penalty, z, comm):
    """The Gap at z, or None when the loss and penalty have none here (collective)."""
    if certificate_of(loss, penalty) is None:
        return None
    return dual_point(loss, penalty, z, comm, theta_wanted=False)[0]
