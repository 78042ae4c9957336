"""Duality gaps across ranks: a certificate of optimality for sparse GLMs (L1 and elastic net).

For P(w) = sum_j phi(a_j^T w, t_j) + g(w), with the rows a_j split over the
ranks and g = l1 ||w||_1 + (l2 / 2) ||w||^2 on every coordinate but an
unpenalized intercept, Fenchel duality gives for any theta in R^m

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
* L1 (l2 = 0): g* is the indicator of ||v||_inf <= l1, so theta is scaled by
  s = min(1, l1 / ||A^T theta||_inf); elastic net (l2 > 0):
  g*(v) = sum_k max(|v_k| - l1, 0)^2 / (2 l2) is finite, theta is used as it is.

Cost of one evaluation: A w and A^T theta on each shard (one pass over its
rows, dense or sparse; a tall squared shard uses its Gram matrix instead,
O(n^2)), one all-reduce of n + 3 numbers (A^T theta and the scalar sums) and,
with an intercept or a rescaled logistic point, one or two all-reduces of a
few scalars.  The all-reduces are plain MPI sums, not the z-step's reducer
(which may compress): the certificate is exact.  Ranks without rows contribute zeros.  Other
losses or penalties have no gap here (:func:`gap_terms` returns None).
"""
import dataclasses

import numpy as np
from mpi4py import MPI

from ..core import backend
from .losses.glm import LogisticLossShard
from .losses.squared import SquaredLossShard
from .penalties import L1, ElasticNet, Unpenalized


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


def gap_terms(loss, penalty):
    """(l1, l2, intercept) when the gap is available for this loss and penalty, else None (same on every rank)."""
    intercept = False
    if type(penalty) is Unpenalized:
        if penalty.count != 1 or not loss.design.intercept:
            return None
        penalty, intercept = penalty.penalty, True
    elif getattr(loss.design, "intercept", False):
        return None
    if type(loss) not in (SquaredLossShard, LogisticLossShard):
        return None
    if type(penalty) is L1:
        return penalty.lam, 0.0, intercept
    if type(penalty) is ElasticNet:
        return penalty.lam * penalty.l1_ratio, penalty.lam * (1.0 - penalty.l1_ratio), intercept
    return None


def _allreduce(comm, values):
    """Sum a host list or array over the ranks (plain MPI: exact, whatever reducer the z-step uses)."""
    values = np.array(values, dtype=float)
    comm.Allreduce(MPI.IN_PLACE, values, op=MPI.SUM)
    return values


def _entropy(p, xp):
    """sum_j H(p_j) = -sum_j p_j log p_j + (1 - p_j) log(1 - p_j), with 0 log 0 = 0."""
    safe = xp.where(p > 0, p, 1.0)
    below = xp.where(p < 1, p, 0.0)
    terms = xp.where(p > 0, p * xp.log(safe), 0.0) + xp.where(p < 1, (1.0 - p) * xp.log1p(-below), 0.0)
    return -float(terms.sum())


def dual_point(loss, penalty, z, comm, theta_wanted=True, margin=None):
    """(Gap, theta) at the consensus point z; theta is this rank's rows of the dual point, None on a rank
    without rows (collective).

    With ``theta_wanted=False`` a tall squared shard (which keeps its Gram matrix G = A^T A) works from G
    alone, O(n^2) instead of a pass over its rows: A^T r = A^T b - G z, r^T b = b^T b - (A^T b)^T z and
    ||r||^2 = 2 f_i(z) (the same value the objective uses); theta is then None.  It does so only once the
    Gram matrix is formed (the working-set solver never forms it and passes ``margin`` = A_aug z instead,
    computed from the working set's columns, which saves a pass).
    """
    l1, l2, intercept = gap_terms(loss, penalty)
    logistic = isinstance(loss, LogisticLossShard)
    # the sums below depend on z alone, not on the weights: a path's next weight starts at the point where the
    # last one was certified, so they are kept for that point (O(n) to recognise it) and reused
    cached = getattr(loss, "_dual_sums", None)
    theta = None
    if not theta_wanted and cached is not None and cached[0] == intercept and cached[1].shape == z.shape \
            and bool((cached[1] == z).all()):
        host, p = cached[2].copy(), cached[3]
    else:
        sums = _logistic_sums if logistic else _squared_sums
        host, p, theta = sums(loss, z, comm, intercept, theta_wanted, margin)
        if not theta_wanted:
            loss._dual_sums = (intercept, z.copy(), host.copy(), p if logistic and loss.active else None)
    return _gap_of_sums(loss, penalty, z, comm, host, p, theta, l1, l2, intercept)


def _logistic_sums(loss, z, comm, intercept, theta_wanted, margin):
    """(the all-reduced [A^T theta, loss value, sum_j H(p_j)], p, theta) of the logistic loss at z: theta_j =
    y_j p_j with p_j = sigmoid(-y_j m_j), balanced over the two label classes with an intercept."""
    xp, design, n, active = loss.xp, loss.design, loss.n, loss.active
    p = theta = None
    if active:
        if margin is None:
            margin = design.matvec(z)
        y = loss.targets
        signed = y * margin
        p = 0.5 * (1.0 + xp.tanh(-0.5 * signed))  # sigmoid(-y m)
        value = float(xp.logaddexp(0.0, -signed).sum())
    if intercept:  # make sum(theta) = 0: the larger class's sum of p scaled down to the other's
        local = [float(p[y > 0].sum()), float(p[y < 0].sum())] if active else [0.0, 0.0]
        positive, negative = _allreduce(comm, local)
        if positive > negative:
            factors = (negative / positive, 1.0)
        else:
            factors = (1.0, positive / negative if negative > 0 else 1.0)
        if active and factors != (1.0, 1.0):
            p = p * xp.where(y > 0, factors[0], factors[1])
    buffer = xp.zeros(n + 3)  # A^T theta and the scalar sums: one allreduce of n + 3 numbers
    if active:
        theta = y * p
        buffer[n] = value
        buffer[:n] = design.rmatvec(theta)
        buffer[n + 1] = _entropy(p, xp)
    return _allreduce(comm, backend.to_host(buffer)), p, theta


def _squared_sums(loss, z, comm, intercept, theta_wanted, margin):
    """(the all-reduced [A^T theta, loss value, theta^T b, ||theta||^2], None, theta) of the squared loss at z:
    theta the residual b - A z, centered with an intercept; from the Gram matrix when it is formed and theta
    is not wanted (theta None then), from A^T b at a point with every coefficient 0."""
    xp, design, n, active = loss.xp, loss.design, loss.n, loss.active
    from_gram = not theta_wanted and getattr(loss, "method", None) == "cholesky-tall" and loss.gram_formed \
        and margin is None
    # at a point with every coefficient 0 (a path's start), A_aug^T r comes from A^T b: no pass over the rows
    from_atb = not from_gram and active and not bool(z[:design.features].any())
    theta = None
    if active:
        if from_gram:
            correlation_local = loss.Atb - loss.gram @ z  # A_aug^T r; its last entry is sum(r) with an intercept
            value = loss.value(z)
            rb = 2.0 * loss.half_bb - float(loss.Atb @ z)
            rsum = float(correlation_local[-1]) if intercept else 0.0
        else:
            residual = loss.b - (design.matvec(z) if margin is None else margin)
            value = 0.5 * float(residual @ residual)
            rsum = float(residual.sum())
    center = 0.0
    if intercept:  # make sum(theta) = 0 (one allreduce of a few scalars)
        total, rows = _allreduce(comm, [rsum if active else 0.0, loss.rows])
        center = float(total) / rows
    buffer = xp.zeros(n + 3)  # A^T theta and the scalar sums: one allreduce of n + 3 numbers
    if active:
        buffer[n] = value
        if from_gram:  # theta = r - center: A^T 1 is G's intercept column, sum(b) the last entry of A^T b
            buffer[:n] = correlation_local - center * loss.gram[:, -1] if intercept else correlation_local
            sb = float(loss.Atb[-1]) if intercept else 0.0
            buffer[n + 1] = rb - center * sb
            buffer[n + 2] = 2.0 * value - 2.0 * center * rsum + center * center * loss.rows
        else:
            theta = residual - center if intercept else residual
            if from_atb:  # theta = b - (c + center) 1 with c the intercept's value
                shift = (float(z[-1]) if design.intercept else 0.0) + (center if intercept else 0.0)
                buffer[:n] = loss.Atb - shift * design.ones_correlation() if shift else loss.Atb
            else:
                buffer[:n] = design.rmatvec(theta)
            buffer[n + 1] = float(theta @ loss.b)
            buffer[n + 2] = float(theta @ theta)
    return _allreduce(comm, backend.to_host(buffer)), None, theta


def _gap_of_sums(loss, penalty, z, comm, host, p, theta, l1, l2, intercept):
    """(Gap, theta) from the all-reduced sums ``host``: theta scaled into the dual's domain (L1: by
    min(1, l1 / ||A^T theta||_inf); elastic net: as it is, with the conjugate's excess)."""
    xp, n, logistic = loss.xp, loss.n, isinstance(loss, LogisticLossShard)
    correlation = xp.asarray(host[:n - 1] if intercept else host[:n])
    loss_value, first, second = (float(v) for v in host[n:])
    primal = loss_value + penalty.value(z)
    if l2 > 0:  # elastic net: theta as it is
        scale = 1.0
        excess = xp.maximum(xp.abs(correlation) - l1, 0.0)
        conjugate = float(excess @ excess) / (2.0 * l2)
    else:
        largest = float(xp.abs(correlation).max()) if correlation.shape[0] else 0.0
        scale = 1.0 if largest <= l1 else l1 / largest
        conjugate = 0.0
    if logistic:
        if scale != 1.0:  # the entropy of the rescaled p (one allreduce of a scalar)
            first = float(_allreduce(comm, [_entropy(scale * p, xp) if loss.active else 0.0])[0])
        dual = first - conjugate
    else:
        dual = scale * first - 0.5 * scale * scale * second - conjugate
    if theta is not None and scale != 1.0:
        theta = scale * theta
    gap = primal - dual
    return Gap(primal=primal, dual=dual, gap=gap, relative=gap / max(abs(primal), 1e-300),
               correlation=scale * correlation if scale != 1.0 else correlation, scale=scale), theta


def safe_radius(loss, gap):
    """The radius of the gap-safe sphere around the dual point: the dual is mu-strongly concave (mu = 1 for
    the squared loss, 4 for the logistic one: H'' <= -4), so ||theta - theta*|| <= sqrt(2 gap / mu)."""
    mu = 4.0 if isinstance(loss, LogisticLossShard) else 1.0
    return float(np.sqrt(2.0 * max(gap, 0.0) / mu))


def column_norms(loss, comm):
    """||a_k|| over all the rows, for each penalized column, on the host (collective: one all-reduce)."""
    design = loss.design
    if loss.active and design.rows:
        local = np.asarray(backend.to_host(design.column_squares()), dtype=float).ravel()
    else:
        local = np.zeros(design.features)
    return np.sqrt(_allreduce(comm, local))


def screen(loss, penalty, z, comm, norms):
    """The gap-safe sphere test (Fercoq, Gramfort and Salmon 2015; Ndiaye et al. 2017) at z (collective).

    Returns (kept, Gap): ``kept`` a host boolean array over the penalized columns, False where
    |a_k^T theta| + r ||a_k|| < l1, which proves the k-th coefficient zero at the optimum (its
    subgradient condition |a_k^T theta*| <= l1 holds strictly); every rank gets the same mask, computed from
    all-reduced quantities.  The intercept is never screened.
    """
    gap, _ = dual_point(loss, penalty, z, comm, theta_wanted=False)
    return sphere_test(loss, gap, norms, gap_terms(loss, penalty)[0], comm), gap


def sphere_test(loss, gap, norms, l1, comm):
    """The columns the gap-safe sphere around ``gap``'s dual point does not prove zero (a host boolean array,
    the same on every rank: all-reduced sums may round differently on different ranks, so rank 0 decides)."""
    correlation = np.abs(np.asarray(backend.to_host(gap.correlation), dtype=float))
    kept = (correlation + safe_radius(loss, gap.gap) * norms >= l1 * (1.0 - 1e-9)).astype(np.uint8)  # margin
    comm.Bcast(kept, root=0)
    return kept.astype(bool)


def duality_gap(loss, penalty, z, comm):
    """The Gap at z, or None when the loss and penalty have none here (collective)."""
    if gap_terms(loss, penalty) is None:
        return None
    return dual_point(loss, penalty, z, comm, theta_wanted=False)[0]
