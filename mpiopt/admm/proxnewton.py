"""Distributed proximal Newton on a working set: a smooth loss plus a coordinate-separable penalty.

Proximal Newton (Lee, Sun and Saunders 2014) with coordinate-descent subproblems, as skglm's ProxNewton
(Bertrand et al. 2022) and glmnet's IRLS-CD (Friedman, Hastie and Tibshirani 2010), with the rows split
over the ranks.  On the restricted problem  P(x) = sum_j phi(a_j^T x) + g(x),  x the working set's
coefficients (and the intercept, unpenalized), g = sum_k l1 |x_k| + l2 x_k^2 / 2 (the L1 and elastic-net
penalties: ``coordinate_parts``, declared by ``PROX_NEWTON``):

    margin = A x on each rank
    repeat:
        one pass: phi'(margin), phi''(margin), f(x) and the dual's sum (``newton_terms``)
        one all-reduce: grad = A^T phi', f(x), the dual's sum                (k + 2 numbers)
        stop (rank 0's word, broadcast) when the estimated restricted gap / P <= tol (a bound; with an
                intercept confirmed by gap.dual_point, the restricted problem's exact certificate)
        one all-reduce: H = A^T diag(phi'') A                                 (k^2 numbers)
        rank 0: d = argmin_d grad^T d + d^T H d / 2 + g(x + d)            (coordinate descent on H, no pass
                over the rows, to eta x the violation at x), broadcast with Delta
        line search (Armijo): P(x + t d) <= P(x) + 1e-4 t Delta, Delta = grad^T d + g(x + d) - g(x) < 0:
                t = 1 (its pass computes every term, reused by the next iteration), then 1/2 .. 1/16, then
                1/32 .. 1/256, one all-reduce per group (rank 0 picks t); deep in Newton's region the full step
        x += t d, margin += t A d

Cost of one iteration on rank i (m_i rows, k = |W| + intercept columns): 2 m_i k^2 flops for H (one
symmetric BLAS product), 4 m_i k for the gradient and A d, all-reduces of k^2 and k + 2 doubles, a
broadcast of k + 1, and a few all-reduces of scalars; on rank 0 the coordinate
descent, O(k^2) per epoch.  Near the answer Newton converges quadratically, so a handful of iterations
reach any tolerance where an ADMM inner solve takes tens, each an inexact Newton x-step of its own.

On sparse columns H comes from the rows' pairs of nonzeros (mpiopt.kernels.cd.block_hessians: no sparse
product), and beyond BLOCKED_FROM columns it is never formed: the direction is found by block coordinate
descent on the model with its gradient carried by the rows (:class:`Blocks`), all-reducing |W| x BLOCK_WIDTH
numbers of diagonal blocks a direction instead of |W|^2, and BLOCK_WIDTH numbers a block a pass.

Every decision is rank 0's, broadcast (the direction, the step, the stop), so every rank takes the same
steps; at another rank count only the sums' rounding differs.
"""
import time

import numpy as np
from mpi4py import MPI

from ..core.signals import pending
from .gap import certificate_of, dual_point
from .penalties import PROX_NEWTON, capabilities_of

ARMIJO = 1e-4
LOCAL = 1e-12                     # a predicted decrease below this x |P|: the full step, unless P rises by more
TRIALS = ((1.0,), (0.5, 0.25, 0.125, 0.0625), (2.0 ** -5, 2.0 ** -6, 2.0 ** -7, 2.0 ** -8))  # one all-reduce each
MAX_EPOCHS = 1000                 # coordinate-descent epochs of one direction
FORCING = 0.3                     # the subproblem is solved to eta x the violation at x, eta = violation / l1
FORCING_MIN = 1e-4                # clipped to [FORCING_MIN, FORCING] (superlinear, and above rounding)
REFINE_STEPS = 2                  # the certificate's point: a Newton step, then chord steps on its Hessian
ROUNDING = 1e-13                  # and never below this x l1 (the subproblem's own rounding)
BLOCK_WIDTH = 512                 # the blocked direction's column blocks (its all-reduces: one per block a pass)
BLOCK_ENTRIES = 2 ** 20           # the diagonal blocks' numbers in all, at most: narrower blocks beyond 2048 columns
BLOCKED_FROM = 512                # sparse working sets with more columns than this take the blocked direction
BLOCK_PASSES = 200                # passes over the blocks of one direction
BLOCK_FORCING = 0.03              # the blocked direction's subproblem: to at most this x the violation at x
ANDERSON = 5                      # the blocked direction extrapolates every this many passes
BLOCK_EPOCHS = 8                  # coordinate-descent epochs on one block in one pass


def supports(loss, penalty):
    """Whether proximal Newton applies: a loss with ``newton_inner`` (``newton_terms``, ``margin_value``,
    ``dual_value_bound``: the logistic and squared losses) and a penalty that declares ``PROX_NEWTON``
    (separable in the coordinates: ``coordinate_parts``)."""
    return getattr(loss, "newton_inner", False) and penalty_parts(penalty) is not None


def penalty_parts(penalty):
    """(l1, l2) of the penalty on the working set's coefficients, or None."""
    inner = getattr(penalty, "penalty", penalty)  # Unpenalized wraps the penalty of all but the intercept
    return inner.coordinate_parts() if PROX_NEWTON in capabilities_of(inner) else None


def distances(y, r, l1, l2, free):
    """Per coordinate, the distance from -r_k to the subdifferential of the penalty at y_k (r the smooth part's
    gradient; the last ``free`` coordinates unpenalized): skglm's subdiff_distance."""
    penalized = len(y) - free
    yp, rp = y[:penalized], r[:penalized] + l2 * y[:penalized]
    distance = np.where(yp != 0, np.abs(rp + l1 * np.sign(yp)), np.maximum(np.abs(rp) - l1, 0.0))
    return np.concatenate([distance, np.abs(r[penalized:])]) if free else distance


def violation(y, r, l1, l2, free):
    """The largest of :func:`distances`: 0 exactly at the minimizer."""
    return float(distances(y, r, l1, l2, free).max()) if len(y) else 0.0


def penalized_quadratic(H, grad, x, l1, l2, free, tolerance, max_epochs=MAX_EPOCHS):
    """argmin_y grad^T (y - x) + (y - x)^T H (y - x) / 2 + sum_k (l1 |y_k| + l2 y_k^2 / 2) over all but the
    last ``free`` coordinates, by cyclic coordinate descent on the dense symmetric H (Friedman et al. 2010),
    from y = x, until the violation (:func:`violation`) is <= ``tolerance``.

    The sweeps are mpiopt.kernels.cd's (compiled with numba when it is installed, bitwise equal to the numpy
    twin).  glmnet's active-set cycling: a sweep over every coordinate, then sweeps over the nonzero (and
    free) ones until their own violation is met, then a full sweep again, until a full sweep leaves the
    violation met.
    Returns (y, epochs)."""
    from ..kernels.cd import sweep  # here, not at the top: it imports numba, which only these sweeps need
    size = len(x)
    y = np.array(x, dtype=float)
    r = np.array(grad, dtype=float)  # the model's smooth gradient at y: grad + H (y - x)
    diagonal = np.diag(H).copy()
    penalized = size - free
    everything = np.arange(size, dtype=np.int64)
    H = np.ascontiguousarray(H, dtype=float)
    epochs = 0
    while epochs < max_epochs:
        sweep(everything, y, r, H, diagonal, l1, l2, penalized)
        epochs += 1
        if violation(y, r, l1, l2, free) <= tolerance:
            break
        while epochs < max_epochs:
            active = np.flatnonzero((y != 0) | (np.arange(size) >= penalized))
            sweep(active, y, r, H, diagonal, l1, l2, penalized)
            epochs += 1
            if not len(active) or float(distances(y, r, l1, l2, free)[active].max()) <= tolerance:
                break
    return y, epochs


class ProxNewton:
    """One restricted problem's solver: ``shard`` the loss on the working set's columns (a solver.Problem's
    shard), ``penalty`` the engine's penalty there (the intercept left free), ``comm`` the ranks."""

    def __init__(self, shard, penalty, comm, hessian=None):
        """``hessian``: the all-reduced Hessian when the loss's is constant (the squared loss: the working set's
        Gram matrix, which the column cache grows incrementally); None: formed from the rows when needed."""
        self.shard, self.penalty, self.comm = shard, penalty, comm
        self.constant = hessian
        self.l1, self.l2 = penalty_parts(penalty)
        self.free = getattr(penalty, "count", 0)  # Unpenalized's free last coordinates: the intercept
        self.dual_penalty = certificate_of(shard, penalty).penalty
        self.epochs = 0
        design = shard.design
        self.blocks = None  # sparse columns: the Hessian by the kernels of Blocks (a dense H from one block)
        if design.sparse and design.features > BLOCKED_FROM:
            self.blocks = Blocks(shard, block_width(design.features))
        elif design.sparse and hessian is None:
            self.blocks = Blocks(shard, max(design.features, 1))

    def solve(self, x, tol, max_iter, deadline=None, signals=False):
        """Newton iterations from x (host array over the working set and the intercept) until the restricted
        problem's estimated relative duality gap (:meth:`estimate`) is <= ``tol``; at most ``max_iter`` of
        them, stopping at ``deadline`` (time.perf_counter() on rank 0's clock) or, with ``signals``, at a
        pending SIGTERM.

        Returns (x, iterations, stop, history) with stop "gap_tol", "max_iter", "time_limit", "signal" or
        "stalled" (no trial step decreases P: rounding allows no more progress).  After "gap_tol" or "stalled",
        ``self.dual_margin`` is the margins of the refined point for the certificate (:meth:`_refine`, on the
        last Hessian: no new one), else None."""
        shard, comm = self.shard, self.comm
        x = np.array(x, dtype=float)
        margin = shard.design.matvec(x) if shard.active else None
        history = {"iter": [], "gap": []}
        iterations, H = 0, None
        terms = shard.newton_terms(margin) if shard.active else None
        self.dual_margin = None
        while True:
            grad, objective, dual, second = self._gradient(x, terms)
            relative = self.estimate(grad, objective, dual)
            if self.free and comm.bcast(relative <= tol if comm.rank == 0 else None, root=0):
                # with an intercept, confirmed by the restricted problem's own certificate (gap.py: a balanced
                # dual point, the exact dual value), which the estimate's unbalanced point may undercut; without
                # one the estimate is itself a bound (its theta is feasible once scaled, s H(p) <= H(s p))
                relative = dual_point(shard, self.penalty, x, comm, theta_wanted=False, margin=margin)[0].relative
            history["iter"].append(iterations)
            history["gap"].append(relative)
            stop = self._stop(relative <= tol, iterations, max_iter, deadline, signals)
            if stop is not None:
                if stop == "gap_tol":
                    self.dual_margin = self._refine(x, margin, grad, H if H is not None else self._hessian(second))
                return x, iterations, stop, history
            H = self._hessian(second)
            direction, decrease = self._direction(x, grad, H, FORCING_MIN)
            step, margin, terms = self._line_search(x, margin, direction, objective, decrease, terms)
            iterations += 1
            if step == 0.0:
                self.dual_margin = self._refine(x, margin, grad, H)
                return x, iterations, "stalled", history
            x = x + step * direction

    def refined_margin(self, x, margin):
        """:meth:`_refine` at x with the gradient and Hessian there (one pass, their all-reduces): for a point
        that no Newton iteration has reached (a warm start)."""
        grad, _, _, second = self._gradient(x, self.shard.newton_terms(margin) if self.shard.active else None)
        return self._refine(x, margin, grad, self._hessian(second))

    def _refine(self, x, margin, grad, H):
        """A x' on this rank's rows (None without rows), x' = x + d1 + d2 with d1 the proximal Newton direction
        of the model (grad at x, H) and d2 a chord step on the same H from x + d1 (its gradient: one pass over
        the working set's columns), not taken (collective).  x' is about as far from the restricted optimum as
        the square of x's distance (H at x, or at the iterate before x: the chord steps still converge
        superlinearly), so the dual point of its margins (gap.py's ``dual_margin``) gives a duality gap at x
        that tracks x's suboptimality where the dual point of x's own margins gives one of the order of its
        square root.  Rank 0's coordinate
        descents go further than a step's (to violation^2 / l1, at least ROUNDING x l1)."""
        shard, active = self.shard, self.shard.active
        steps = 1 if isinstance(H, BlockHessian) else REFINE_STEPS  # a blocked direction costs passes: no chord step
        for step in range(steps):
            direction, _ = self._direction(x, grad, H, 0.0)
            x = x + direction
            margin = margin + shard.design.matvec(direction) if active else None
            if step + 1 < steps:
                grad = self._gradient(x, shard.newton_terms(margin) if active else None)[0]
        return margin

    def _gradient(self, x, terms):
        """(grad, P(x), the dual's sums, phi'') from this rank's ``newton_terms`` at x: one all-reduce of
        k + 1 + (the loss's dual sums: 1 logistic, 2 squared) numbers."""
        shard, size = self.shard, self.shard.n
        count = shard.newton_dual_count
        sums = np.zeros(size + 1 + count)  # A^T phi'(margin), f(x), the dual's sums: one all-reduce
        second = None
        if shard.active:
            value, first, second, dual = terms
            sums[:size] = shard.design.rmatvec(first)
            sums[size] = value
            sums[size + 1:] = dual
        self.comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
        return sums[:size], float(sums[size]) + self.penalty.value(x), sums[size + 1:], second

    def _hessian(self, second):
        """H = A^T diag(phi'') A over every rank's rows: one all-reduce of k^2 numbers; a constant Hessian (the
        loss's ``constant_hessian``: the squared loss) is formed once and kept."""
        shard = self.shard
        if shard.constant_hessian and self.constant is not None:
            return self.constant
        if self.blocks is not None and len(self.blocks.starts) > 1:
            H = self.blocks.hessian(second, self.comm)
        elif self.blocks is not None:  # one block: H itself, from the rows' pairs of nonzeros (no sparse product)
            H = self.blocks.dense_hessian(second, self.comm)
        else:
            H = np.zeros((shard.n, shard.n))
            if shard.active:
                H[:] = shard.design.gram(weights=second)
            self.comm.Allreduce(MPI.IN_PLACE, H, op=MPI.SUM)
        if shard.constant_hessian:
            self.constant = H
        return H

    def _direction(self, x, grad, H, floor):
        """(d, Delta): the minimizer of the penalized quadratic model (grad, H) at x, less x, and its predicted
        decrease Delta = grad^T d + g(x + d) - g(x): rank 0's coordinate descent to eta x the violation at x,
        eta = violation / l1 clipped to [``floor``, FORCING], broadcast."""
        comm, size = self.comm, self.shard.n
        packet = np.empty(size + 1)
        if isinstance(H, BlockHessian):
            # each pass costs a pass over the columns: a looser model solve than the dense one's, which is free
            packet[:size] = self.blocks.direction(x, grad, H, self.target(x, grad, floor, BLOCK_FORCING), self)
        if comm.rank == 0:
            if isinstance(H, BlockHessian):
                y = x + packet[:size]
            else:
                y, epochs = penalized_quadratic(H, grad, x, self.l1, self.l2, self.free, self.target(x, grad, floor))
                self.epochs += epochs
                packet[:size] = y - x
            packet[size] = float(grad @ packet[:size]) + self.penalty.value(y) - self.penalty.value(x)
        comm.Bcast(packet, root=0)
        return packet[:size].copy(), float(packet[size])

    def target(self, x, grad, floor, least=0.0):
        """The subproblem's tolerance: eta x the violation at x, eta = violation / l1 clipped to [floor, FORCING],
        at least ``least`` x the violation and at least ROUNDING x l1."""
        here = violation(x, grad, self.l1, self.l2, self.free)
        return max(min(FORCING, max(here / max(self.l1, 1e-300), floor, least)) * here, ROUNDING * self.l1)

    def estimate(self, grad, objective, dual):
        """The restricted problem's relative duality gap from the sums of one pass, a bound that needs no
        second pass: theta = -phi'(margin) (not balanced for an intercept: an estimate, only to stop the inner
        solve, which the working sets' certificate of the full problem then checks), scaled by s into the
        penalty's dual domain, and the loss's dual value at s from its value at 1 (``dual_value_bound``:
        s H(p) <= H(s p) for the logistic loss's concave entropy; exact for the squared loss)."""
        correlation = -grad[:len(grad) - self.free]
        scale = self.dual_penalty.dual_scale(correlation)
        dual = self.shard.dual_value_bound(dual, scale) - self.dual_penalty.conjugate(scale * correlation)
        return (objective - dual) / max(abs(objective), 1e-300)

    def _stop(self, small, iterations, max_iter, deadline, signals):
        """Rank 0's decision, broadcast: a stop word, or None to take another step."""
        comm = self.comm
        word = None
        if comm.rank == 0:
            if small:
                word = "gap_tol"
            elif iterations >= max_iter:
                word = "max_iter"
            elif deadline is not None and time.perf_counter() >= deadline:
                word = "time_limit"
        if signals and comm.allreduce(float(pending()[1]), op=MPI.MAX) > 0 and word is None:
            word = "signal"  # a SIGTERM on any rank stops every rank (the outer boundary's checkpoint is on disk)
        return comm.bcast(word, root=0)

    def _line_search(self, x, margin, direction, objective, decrease, terms):
        """(t, the margins at x + t d, the loss's ``newton_terms`` there): the largest trial step (1, then
        1/2 .. 1/16, then 1/32 .. 1/256) with Armijo's decrease, each group from one pass and one all-reduce;
        t = 0 (and the margins and terms unchanged) when none does or when the predicted decrease is below the
        objective's rounding.  Rank 0's choice, broadcast.  The full step's trial computes every term, which
        the next iteration reuses: near the answer, one pass over the rows an iteration."""
        shard, comm = self.shard, self.comm
        if not np.any(direction) or decrease > LOCAL * abs(objective):  # no step, or no descent direction
            return 0.0, margin, terms
        # deep in Newton's quadratic region the decrease is below the values' rounding (computed, it may even
        # round to >= 0), where Armijo's test cannot tell; the full step is taken there unless it raises P by
        # more than rounding
        local = -decrease <= LOCAL * abs(objective)
        margin_step = shard.design.matvec(direction) if shard.active else None
        choice = np.zeros(1)
        full = None
        for trials in TRIALS:
            if trials == (1.0,):
                full = shard.newton_terms(margin + margin_step) if shard.active else None
                values = np.array([full[0] if shard.active else 0.0])
            else:
                values = np.array([shard.margin_value(margin + t * margin_step) if shard.active else 0.0
                                   for t in trials])
            comm.Allreduce(MPI.IN_PLACE, values, op=MPI.SUM)
            if comm.rank == 0:
                for t, value in zip(trials, values):
                    trial = value + self.penalty.value(x + t * direction)
                    if trial <= objective + ARMIJO * t * decrease or \
                            (local and t == 1.0 and trial <= objective + LOCAL * abs(objective)):
                        choice[0] = t
                        break
            comm.Bcast(choice, root=0)
            if choice[0] > 0 or local:
                break
        step = float(choice[0])
        if step == 0.0 or not shard.active:
            return step, margin, terms
        if step == 1.0:
            return step, margin + margin_step, full
        margin = margin + step * margin_step
        return step, margin, shard.newton_terms(margin)


def block_width(columns):
    """The blocks' width for a working set of ``columns``: BLOCK_WIDTH, narrower where the diagonal blocks
    would pass BLOCK_ENTRIES numbers (their all-reduce, once a direction), never below 64."""
    return int(min(BLOCK_WIDTH, max(64, BLOCK_ENTRIES // max(columns, 1))))


class BlockHessian:
    """H kept as its all-reduced diagonal blocks (flat ``values``, the intercept's curvature ``total``) and this
    rank's row weights phi'' (the rest of H acts through them)."""

    def __init__(self, values, total, weights, diagonals):
        self.values, self.total, self.weights, self.diagonals = values, total, weights, diagonals


class Blocks:
    """The Hessian-free direction on a sparse working set: block coordinate descent on the proximal Newton model

        q(d) = grad^T d + d^T H d / 2 + g(x + d),   H = sum over ranks of A_i^T diag(phi''_i) A_i,

    the columns in consecutive blocks B of BLOCK_WIDTH (the intercept a block of its own).  H is never formed:
    each rank keeps w_i = diag(phi''_i) A_i d, so the model's gradient on a block is grad_B + sum_i A_iB^T w_i
    (one all-reduce of |B| numbers), and the block's subproblem is solved on its diagonal block H_BB (all
    all-reduced once a direction, |W| x BLOCK_WIDTH numbers in all) by cyclic coordinate descent
    (mpiopt.kernels.cd.block_solve); then w_i += diag(phi''_i) A_iB delta_B on each rank.  Passes over the blocks
    end when the largest violation seen in a pass (each block's, before its update) is <= the target: the
    direction is the model's minimizer to that tolerance, as the dense one.  Every rank solves the blocks
    itself from the same all-reduced numbers; rank 0 decides the passes and its direction is broadcast, so
    the ranks take one step.

    Cost on rank i: the diagonal blocks, sum over its rows of (nonzeros of the row in each block)^2; a pass,
    2 nnz(A_iW) flops and |W| / BLOCK_WIDTH all-reduces of BLOCK_WIDTH numbers.  skglm's and liblinear's
    coordinate descent (one column product per coordinate, no Hessian) made distributed a block at a time."""

    def __init__(self, shard, width):
        """``width``: the blocks' (one block of every column: the dense Hessian, :meth:`dense_hessian`)."""
        import scipy.sparse
        design = shard.design
        self.active, self.rows, self.features = shard.active, design.rows, design.features
        self.intercept = design.intercept
        csc = scipy.sparse.csc_matrix(design.A) if design.A.format != "csc" else design.A
        if not csc.has_sorted_indices:
            csc = csc.sorted_indices()
        self.csc, self.csr = csc, csc.tocsr()
        self.csr.sort_indices()
        self.width = width
        self.starts = np.arange(0, self.features, width, dtype=np.int64)
        self.sizes = np.minimum(width, self.features - self.starts).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes * self.sizes)[:-1]]).astype(np.int64)
        self.count = int((self.sizes * self.sizes).sum())

    def hessian(self, weights, comm):
        """The all-reduced diagonal blocks (and the intercept's curvature sum phi''): one all-reduce."""
        from ..kernels.cd import block_hessians
        values = np.zeros(self.count + 1)
        if self.active:
            weights = np.ones(self.rows) if weights is None else np.ascontiguousarray(weights, dtype=float)
            block_hessians(self.csc, self.csr, weights, self.width, self.offsets, self.sizes, values[:-1])
            values[-1] = float(weights.sum())
        comm.Allreduce(MPI.IN_PLACE, values, op=MPI.SUM)
        diagonals = np.concatenate([np.diag(values[offset:offset + width * width].reshape(width, width))
                                    for offset, width in zip(self.offsets, self.sizes)]) if self.features else np.zeros(0)
        return BlockHessian(values[:-1], float(values[-1]), weights if self.active else None, diagonals)

    def dense_hessian(self, weights, comm):
        """H = A^T diag(weights) A (with the intercept's row and column) as a dense array, all-reduced: the
        columns in one block."""
        from ..kernels.cd import block_hessians
        n, features = self.features + int(self.intercept), self.features
        H = np.zeros((n, n))
        if self.active:
            weights = np.ones(self.rows) if weights is None else np.ascontiguousarray(weights, dtype=float)
            if features:
                block = np.zeros(features * features)
                block_hessians(self.csc, self.csr, weights, self.width, self.offsets, self.sizes, block)
                H[:features, :features] = block.reshape(features, features)
            if self.intercept:
                sums = np.asarray(self.csc.T @ weights).ravel()
                H[:features, -1] = sums
                H[-1, :features] = sums
                H[-1, -1] = float(weights.sum())
        comm.Allreduce(MPI.IN_PLACE, H, op=MPI.SUM)
        return H

    def direction(self, x, grad, H, target, solver):
        """d (rank 0's, before the caller's broadcast) minimizing the model to ``target``."""
        from ..kernels.cd import block_gradient, block_solve, block_update
        comm, l1, l2 = solver.comm, solver.l1, solver.l2
        size = len(x)
        d = np.zeros(size)
        w = np.zeros(self.rows)
        weights = H.weights
        part = np.empty(self.width)
        blocks = len(self.starts)
        iterates = []
        # glmnet's cycling, by blocks: a full pass, then passes over the blocks with a nonzero coefficient until
        # they meet the target, then a full pass again, until a full pass meets it.  The blocks to visit are
        # rank 0's, broadcast with its verdict, so every rank makes the same all-reduces.
        plan = np.ones(blocks + 1)  # [the last pass met the target, which blocks to visit]
        full = True
        for _ in range(BLOCK_PASSES):
            worst = 0.0
            for index in np.flatnonzero(plan[1:]):
                lo, width, offset = self.starts[index], self.sizes[index], self.offsets[index]
                hi = lo + width
                local = part[:width]
                if self.active:
                    block_gradient(self.csc, lo, hi, w, local)
                else:
                    local[:] = 0.0
                comm.Allreduce(MPI.IN_PLACE, local, op=MPI.SUM)
                model = grad[lo:hi] + local
                here = x[lo:hi] + d[lo:hi]
                y = here.copy()
                first, epochs = block_solve(H.values[offset:offset + width * width].reshape(width, width),
                                            H.diagonals[lo:hi], y, model, l1, l2, target, BLOCK_EPOCHS)
                worst = max(worst, first)
                solver.epochs += epochs
                delta = y - here
                if delta.any():
                    d[lo:hi] += delta
                    if self.active:
                        block_update(self.csc, lo, hi, delta, weights, w)
            if self.intercept and H.total > 0:
                total = np.array([float(w.sum()) if self.active else 0.0])
                comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
                model = grad[-1] + float(total[0])
                worst = max(worst, abs(model))
                delta = -model / H.total
                d[-1] += delta
                if self.active:
                    w += weights * delta
            iterates.append(d.copy())
            extrapolated = False
            if len(iterates) == ANDERSON + 1:
                extrapolated = self.extrapolate(iterates, x, grad, H, d, w, comm, l1, l2)
                iterates.clear()
            if comm.rank == 0:
                met = worst <= target and not extrapolated  # an extrapolated d is checked by one more pass
                if met and full:
                    plan[0] = 1.0
                else:
                    plan[0] = 0.0
                    full = met  # met on the nonzero blocks: check every block again
                    nonzero = np.add.reduceat((x[:self.features] + d[:self.features]) != 0, self.starts) > 0 \
                        if blocks else np.zeros(0, dtype=bool)
                    plan[1:] = 1.0 if full or not nonzero.any() else nonzero
            comm.Bcast(plan, root=0)
            if plan[0]:
                break
        return d

    def margins(self, d):
        """A_i d on this rank's rows."""
        u = np.asarray(self.csc @ d[:self.features]).ravel() if self.features else np.zeros(self.rows)
        return u + d[-1] if self.intercept else u

    def extrapolate(self, iterates, x, grad, H, d, w, comm, l1, l2):
        """Anderson extrapolation of the last passes' directions (skglm's AndersonCD, Bertrand and Massias
        2021): d' = sum_k c_k d_k with c minimizing ||sum_k c_k (d_k - d_(k-1))|| subject to sum_k c_k = 1, taken
        (d and w overwritten in place) when it lowers the model; rank 0 decides.  Two passes over the columns
        (A d, A d') and one all-reduce.  Returns whether it was taken."""
        U = np.diff(np.array(iterates), axis=0)
        try:
            z = np.linalg.solve(U @ U.T, np.ones(len(U)))
        except np.linalg.LinAlgError:
            z = None
        proposal = None
        if z is not None and np.isfinite(z).all() and z.sum() != 0:
            proposal = (z / z.sum()) @ np.array(iterates[1:])
        verdict = np.zeros(1)
        if comm.bcast(proposal is not None if comm.rank == 0 else None, root=0):
            if proposal is None:  # rank 0 has one: the others follow it with its broadcast below
                proposal = np.zeros_like(d)
            comm.Bcast(proposal, root=0)
            sums = np.zeros(2)
            if self.active:
                weights = H.weights
                now, new = self.margins(d), self.margins(proposal)
                sums[:] = 0.5 * float(weights @ (now * now)), 0.5 * float(weights @ (new * new))
            comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
            if comm.rank == 0:
                f = self.features

                def model(step):
                    y = x[:f] + step[:f]
                    return float(grad @ step) + l1 * float(np.abs(y).sum()) + 0.5 * l2 * float(y @ y)
                verdict[0] = float(model(proposal) + sums[1] < model(d) + sums[0])
            comm.Bcast(verdict, root=0)
            if verdict[0]:
                d[:] = proposal
                if self.active:
                    w[:] = H.weights * new
        return bool(verdict[0])
