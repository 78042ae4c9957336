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


# ---------------------------------------------------------------- blocks of sparse columns
# proximal Newton's Hessian-free direction on a sparse working set (mpiopt/admm/proxnewton.py, ``Blocked``):
# the columns of a CSC block in consecutive ranges, each range's gradient A_B^T w, its update w += D A_B delta,
# and the diagonal blocks A_B^T diag(D) A_B of the Hessian from the CSR copy.  Each twin is scipy's or numpy's
# product; the compiled kernels run the same sums in the same order (by column, by row index).


def block_gradient_numpy(indptr, indices, data, lo, hi, w, out):
    """out[j - lo] = a_j^T w for the CSC columns lo <= j < hi."""
    for j in range(lo, hi):
        start, stop = indptr[j], indptr[j + 1]
        out[j - lo] = float(data[start:stop] @ w[indices[start:stop]]) if stop > start else 0.0


@compiled.jit
def block_gradient_compiled(indptr, indices, data, lo, hi, w, out):
    for j in range(lo, hi):
        total = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            total += data[p] * w[indices[p]]
        out[j - lo] = total


def block_update_numpy(indptr, indices, data, lo, hi, delta, weights, w):
    """w[i] += a_ij delta[j - lo] weights[i] for the CSC columns lo <= j < hi with delta != 0 (the row indices
    of a column are distinct, so one fancy-indexed addition per column)."""
    for j in range(lo, hi):
        change = delta[j - lo]
        if change != 0.0:
            start, stop = indptr[j], indptr[j + 1]
            rows = indices[start:stop]
            w[rows] += data[start:stop] * change * weights[rows]


@compiled.jit
def block_update_compiled(indptr, indices, data, lo, hi, delta, weights, w):
    for j in range(lo, hi):
        change = delta[j - lo]
        if change != 0.0:
            for p in range(indptr[j], indptr[j + 1]):
                i = indices[p]
                w[i] += data[p] * change * weights[i]


@compiled.jit
def block_hessians_compiled(indptr, indices, data, weights, width, offsets, sizes, out):
    """out[offsets[B] + a * sizes[B] + c] += sum_i weights_i a_i,(B width + a) a_i,(B width + c) over the CSR rows
    (sorted column indices), both columns in block B = column // width: the diagonal blocks only, each summed
    on its upper triangle and mirrored (``out`` starts at 0: the mirror overwrites the lower triangle)."""
    for i in range(indptr.shape[0] - 1):
        weight = weights[i]
        start, stop = indptr[i], indptr[i + 1]
        p = start
        while p < stop:
            block = indices[p] // width
            q = p
            while q < stop and indices[q] // width == block:
                q += 1
            base, size, first = offsets[block], sizes[block], block * width
            for s in range(p, q):  # the upper triangle (the indices are sorted), mirrored below
                scaled = weight * data[s]
                row = base + (indices[s] - first) * size - first
                for t in range(s, q):
                    out[row + indices[t]] += scaled * data[t]
            p = q
    for block in range(offsets.shape[0]):
        base, size = offsets[block], sizes[block]
        for a in range(size):
            for c in range(a + 1, size):
                out[base + c * size + a] = out[base + a * size + c]


def block_hessians_numpy(csc, weights, width, offsets, sizes, out):
    """The diagonal blocks by scipy's products, block by block (the twin of :func:`block_hessians_compiled`, the
    same values up to the order of the sums)."""
    scaled = csc.multiply(weights[:, None]).tocsc()
    for block, (base, size) in enumerate(zip(offsets, sizes)):
        lo = block * width
        piece = (csc[:, lo:lo + size].T @ scaled[:, lo:lo + size]).toarray()
        out[base:base + size * size] += piece.ravel()


def block_gradient(csc, lo, hi, w, out):
    if compiled.enabled():
        block_gradient_compiled(csc.indptr, csc.indices, csc.data, lo, hi, w, out)
    else:
        block_gradient_numpy(csc.indptr, csc.indices, csc.data, lo, hi, w, out)


def block_update(csc, lo, hi, delta, weights, w):
    if compiled.enabled():
        block_update_compiled(csc.indptr, csc.indices, csc.data, lo, hi, delta, weights, w)
    else:
        block_update_numpy(csc.indptr, csc.indices, csc.data, lo, hi, delta, weights, w)


def block_hessians(csc, csr, weights, width, offsets, sizes, out):
    """Add this rank's diagonal blocks A_B^T diag(weights) A_B into ``out`` (flat, block B at offsets[B], row-major
    sizes[B] x sizes[B]); ``offsets`` and ``sizes`` int64 arrays."""
    if compiled.enabled():
        block_hessians_compiled(csr.indptr, csr.indices, csr.data, weights, width, offsets, sizes, out)
    else:
        block_hessians_numpy(csc, weights, width, offsets, sizes, out)


def _distance(y, r, l1, l2):
    """The distance from -(r + l2 y) to l1's subdifferential at y (proxnewton.distances for one coordinate)."""
    shifted = r + l2 * y
    if y != 0.0:
        return abs(shifted + math.copysign(l1, y))
    return max(abs(shifted) - l1, 0.0)


_distance_compiled = compiled.jit(_distance)


def block_solve_numpy(H, diagonal, y, r, l1, l2, tolerance, max_epochs):
    """Cyclic coordinate descent on one block's penalized quadratic (every coordinate penalized), in place on y
    and r (the model's gradient at y), until the largest distance is <= ``tolerance``, at most ``max_epochs``
    sweeps.  Returns (the largest distance before the first sweep, the sweeps)."""
    order = np.arange(len(y), dtype=np.int64)
    first = max((_distance(y[k], r[k], l1, l2) for k in range(len(y))), default=0.0)
    worst, epochs = first, 0
    while worst > tolerance and epochs < max_epochs:
        sweep_numpy(order, y, r, H, diagonal, l1, l2, len(y))
        epochs += 1
        worst = max((_distance(y[k], r[k], l1, l2) for k in range(len(y))), default=0.0)
    return first, epochs


@compiled.jit
def block_solve_compiled(H, diagonal, y, r, l1, l2, tolerance, max_epochs):
    size = y.shape[0]
    order = np.arange(size)
    first = 0.0
    for k in range(size):
        first = max(first, _distance_compiled(y[k], r[k], l1, l2))
    worst, epochs = first, 0
    while worst > tolerance and epochs < max_epochs:
        sweep_compiled(order, y, r, H, diagonal, l1, l2, size)
        epochs += 1
        worst = 0.0
        for k in range(size):
            worst = max(worst, _distance_compiled(y[k], r[k], l1, l2))
    return first, epochs


def block_solve(H, diagonal, y, r, l1, l2, tolerance, max_epochs):
    if compiled.enabled():
        return block_solve_compiled(H, diagonal, y, r, float(l1), float(l2), float(tolerance), int(max_epochs))
    return block_solve_numpy(H, diagonal, y, r, l1, l2, tolerance, max_epochs)
