"""Cyclic coordinate descent on a dense quadratic with an L1 + L2 penalty: proximal Newton's subproblem
(mpiopt/admm/proxnewton.py, ``penalized_quadratic``), on rank 0's host.

``sweep(order, y, r, H, diagonal, l1, l2, penalized)`` updates, for each coordinate k of ``order`` in turn,

    y_k <- S(H_kk y_k - r_k, l1) / (H_kk + l2)   (k < penalized; S the soft threshold)
    y_k <- y_k - r_k / H_kk                      (k >= penalized: unpenalized)
    r   <- r + (new y_k - old y_k) H_k           (r the model's gradient at y)

skipping coordinates with H_kk <= 0.  The numpy twin (:func:`sweep_numpy`) loops in Python with one
O(k) numpy update per changed coordinate, so the interpreter's cost per coordinate dominates on a wide
design (docs/admm.md, "Proximal Newton inner solves", has the times); with numba (the ``fast`` extra) the
loop is compiled (:func:`sweep_compiled`): the same operations in the same order, without contraction
into fused multiply-adds, so the two are bitwise equal (tests/test_kernels_cd.py).  ``MPIOPT_NUMBA=0`` keeps the twin
(:mod:`.compiled`, the switch of every compiled kernel).
"""
import math

import numpy as np

from . import compiled


def coordinate(k, old, curvature, gradient, l1, l2, penalized):
    """The new y_k from y_k = ``old``, H_kk = ``curvature`` > 0 and r_k = ``gradient`` (the rule above), the
    one statement of it: the numpy twin calls it as it is, the compiled sweep compiled."""
    if k >= penalized:
        return old - gradient / curvature
    v = curvature * old - gradient
    magnitude = abs(v) - l1
    if magnitude < 0.0:
        magnitude = 0.0
    return math.copysign(magnitude, v) / (curvature + l2)


def sweep_numpy(order, y, r, H, diagonal, l1, l2, penalized):
    """The numpy twin: :func:`sweep` as a Python loop, r updated a row at a time."""
    for k in order:
        curvature = diagonal[k]
        if curvature <= 0:
            continue
        old = y[k]
        new = coordinate(k, old, curvature, r[k], l1, l2, penalized)
        if new != old:
            r[:] += (new - old) * H[k]
            y[k] = new


_update = compiled.jit(coordinate)


@compiled.jit
def sweep_compiled(order, y, r, H, diagonal, l1, l2, penalized):
    """The compiled sweep: the twin's loop, with r's update as an inner loop (numba, the ``fast`` extra)."""
    size = r.shape[0]
    for index in range(order.shape[0]):
        k = order[index]
        curvature = diagonal[k]
        if curvature <= 0:
            continue
        old = y[k]
        new = _update(k, old, curvature, r[k], l1, l2, penalized)
        if new != old:
            delta = new - old
            for j in range(size):
                r[j] += delta * H[k, j]
            y[k] = new


def sweep(order, y, r, H, diagonal, l1, l2, penalized):
    """One pass of coordinate descent over ``order`` (an int64 array), in place on y and r."""
    if compiled.enabled():
        sweep_compiled(np.asarray(order, dtype=np.int64), y, r, H, diagonal, float(l1), float(l2), int(penalized))
    else:
        sweep_numpy(order, y, r, H, diagonal, l1, l2, penalized)
