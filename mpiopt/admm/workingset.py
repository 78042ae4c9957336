"""Working sets for sparse models across ranks: solve small, certify on everything.

In the manner of Blitz (Johnson and Guestrin 2015), celer (Massias, Gramfort and
Salmon 2018) and skglm (Bertrand et al. 2022), for every loss and
penalty with a duality gap (gap.py: L1, elastic net, group lasso; squared, logistic, Huber):

    x = warm start (the previous weight's solution, else 0 with the best intercept); kept = every column
    repeat:
        gap, theta = dual point on ALL columns               (one pass over each shard's rows; after a
                                                              proximal Newton solve theta comes from a
                                                              refined point: the gap tracks P(x) - P*)
        stop when gap / P(x) <= gap_tol                       (a certificate on the full problem)
        kept &= gap-safe sphere test (gap.py's screen)       (free: the pass above gave A^T theta)
        score_k = l1 - |a_k^T theta|                          (skglm's KKT violation)
        W = support(x) + the best-scored kept columns, |W| = max(p0, min(kept, 2 |support|)),
            and never smaller than the last W                (skglm's size rule, made monotone)
        solve the problem restricted to W, warm-started from x_W, by
            proximal Newton (proxnewton.py: the logistic loss with L1 or elastic net, the squared loss
                on sparse data; ``inner_solver``) to 0.1 x the full problem's relative gap, or
            consensus ADMM from (x_W, u_W, rho) to 0.3 x it     (celer's inner tolerance)
                (logistic: Newton x-steps while |W| <= 500, else the problem's x_solver)

Only the working set's columns are gathered on each rank (Fortran-ordered; CSC
from a CSC copy of a sparse shard; kept across outer iterations and along a
path) and, for the squared loss, only
their Gram matrix is formed, grown incrementally: new columns N cost
A_C^T A_N and A_N^T A_N, m_i |N| (|C| + |N|) flops; the rest is reused.  The
restricted x-step factors (|W| + 1)^2 numbers, so an inner ADMM iteration is
O(|W|^2) plus one all-reduce of |W| + 1 doubles.  The full m x n Gram matrix is
never formed.

Cost of one outer iteration on rank i (m_i rows, n columns, p ranks):
    dual point            2 m_i n flops, 8 m_i n bytes read, all-reduce of n + 3 doubles
    new columns' Grams    2 m_i |N| (|C| + |N|) flops
    inner ADMM            k (2 (|W| + 1)^2 flops + all-reduce of |W| + 1 and of 5 doubles)
    or proximal Newton    k (2 m_i |W|^2 flops for the Hessian (the squared loss: the Gram above, once),
                          a few passes over the working set's columns, all-reduces of |W|^2 and |W| + 3)
so with few outer iterations (typically 3-8) the solve costs a few passes over
the data, where the full solver's setup alone costs m_i n^2 flops.

Every decision is collective: the scores come from all-reduced sums and rank 0's
choice is broadcast, so every rank solves the same restricted problem.

Checkpoints (``checkpoint``): the state at the top of each outer iteration (x,
u, rho, the screened columns, the set, the cache's additions in order, the
counters, each rank's refined margins for the next certificate), and each inner
ADMM solve's own engine checkpoint beside it, so a run cut
anywhere resumes bit for bit (docs/admm.md, "Checkpoints and resume").
"""
import dataclasses
import math
import time

import numpy as np
from mpi4py import MPI

from .. import __version__
from ..collectives import reducer_for
from ..core import backend
from ..core.checkpoint import Checkpointer
from ..core.comm import check_collectively
from ..core.signals import SignalFlags, pending
from .engine import STATUS_OF_STOP as ENGINE_STATUS_OF_STOP
from .gap import certificate_of, column_norms, dual_point, has_dual_sums, sphere_test
from .losses.base import host_allreduce
from .losses.squared import SquaredLossShard
from .penalties import PROX_NEWTON, penalties_declaring
from .point import Point
from .printing import working_set_banner_lines, working_set_footer_lines, working_set_log
from . import proxnewton
from .proxnewton import ProxNewton, supports as newton_supports
from .result import ADMMResult

INNER_FRACTION = 0.3     # the restricted problem is solved to this fraction of the full problem's gap
NEWTON_FRACTION = 0.1    # proximal Newton's restricted solves go this far: the refined dual point's gap tracks the
                         # suboptimality, so 1e-3 (needed with x's own dual point) only overshoots
INNER_GAP_EVERY = 5      # the inner solves check their (cheap, restricted) gap this often
MAX_OUTER = 100
INNER_MIN_CAP = 100      # an inner solve runs at most max(this, the iterations so far) before a new certificate
FORMAT = "mpiopt-admm-working-set-checkpoint-1"
NEWTON_COLUMNS = 500     # restricted logistic problems up to this many columns take Newton x-steps (faster
                         # than L-BFGS there, where forming the Hessian is cheap); Huber's keep L-BFGS, whose
                         # Hessian changes at every kink


class ColumnCache:
    """This rank's gathered columns A_C (m_i x capacity, Fortran-ordered; CSC when the shard is sparse, gathered
    from a CSC copy of a CSR shard made once: a CSR column gather scans every row) and, for the squared loss
    while the block stays tall, their Gram matrix A_C^T A_C and column sums, grown incrementally.

    Columns are kept in the order they were added (a path's later weights reuse them); ``take`` returns the
    block and the Gram matrix of a subset."""

    def __init__(self, design, xp, gram_wanted):
        self.design, self.xp = design, xp
        self.gram_wanted = gram_wanted
        self.order = np.empty(0, dtype=np.int64)   # column index at each position
        self.position = {}
        self.block = None       # dense: m_i x capacity, the first len(order) columns filled
        self.gram = None        # len x len (capacity x capacity storage)
        self.sums = None        # column sums, for the intercept's row of the Gram matrix
        self.by_columns = None  # a sparse shard in CSC, made on the first gather
        self.time = 0.0

    def __len__(self):
        return len(self.order)

    def add(self, columns):
        """Gather the columns not yet cached and extend the Gram matrix with their products only."""
        new = np.array([c for c in columns if c not in self.position], dtype=np.int64)
        if not len(new):
            return
        tick = time.perf_counter()
        xp, design, count = self.xp, self.design, len(self.order)
        total = count + len(new)
        if design.sparse:
            import scipy.sparse
            if self.by_columns is None:
                self.by_columns = design.A.tocsc()
            gathered = self.by_columns[:, new]
            self.block = gathered if self.block is None else scipy.sparse.hstack([self.block, gathered],
                                                                                format="csc")
            old = self.block[:, :count] if count else None
        else:
            gathered = design.columns(new)
            if self.block is None or self.block.shape[1] < total:  # grow the storage geometrically
                capacity = max(total, 2 * (0 if self.block is None else self.block.shape[1]), 16)
                block = xp.empty((design.rows, min(capacity, design.features)), order="F")
                if count:
                    block[:, :count] = self.block[:, :count]
                self.block = block
            self.block[:, count:total] = gathered
            old = self.block[:, :count]
        if self.gram_wanted and design.rows >= total + 1 and not (design.sparse and total > proxnewton.BLOCKED_FROM):
            # (a large sparse set's proximal Newton works from blocks of its Hessian: proxnewton.Blocks)
            cross = _dense(old.T @ gathered) if count else None
            square = _dense(gathered.T @ gathered)
            sums = np.asarray(gathered.sum(axis=0)).ravel() if design.sparse else gathered.sum(axis=0)
            gram = xp.empty((total, total))
            if count:
                gram[:count, :count] = self.gram
                gram[:count, count:] = cross
                gram[count:, :count] = cross.T
            gram[count:, count:] = square
            self.gram = gram
            self.sums = xp.concatenate([self.sums, xp.asarray(sums).ravel()]) if count else xp.asarray(sums).ravel()
        else:
            self.gram_wanted, self.gram, self.sums = False, None, None  # wide from now on: the x-step's own way
        for offset, column in enumerate(new):
            self.position[int(column)] = count + offset
        self.order = np.concatenate([self.order, new])
        self.time += time.perf_counter() - tick

    def ordered(self, columns):
        """``columns`` with the cached ones first, in the cache's order, then the others in increasing order."""
        cached = sorted((self.position[int(c)], int(c)) for c in columns if int(c) in self.position)
        others = sorted(int(c) for c in columns if int(c) not in self.position)
        return np.array([c for _, c in cached] + others, dtype=np.int64)

    def _positions(self, columns):
        """(positions, contiguous): where ``columns`` are in the block; contiguous when they are its first ones."""
        positions = np.array([self.position[int(c)] for c in columns], dtype=np.int64)
        return positions, bool(np.array_equal(positions, np.arange(len(positions))))

    def take(self, columns):
        """(A_W, Gram of [A_W, 1] or of A_W, or None) for the working set ``columns`` (cached, in that order)."""
        xp, design = self.xp, self.design
        positions, contiguous = self._positions(columns)
        if self.block is None:  # nothing gathered yet: no column (the intercept alone)
            import scipy.sparse
            block = scipy.sparse.csc_matrix((design.rows, 0)) if design.sparse else xp.empty((design.rows, 0))
        elif design.sparse:  # CSC: a column subset is a copy of those columns only
            block = self.block[:, positions] if not contiguous or self.block.shape[1] != len(positions) \
                else self.block
        else:
            block = self.block[:, :len(positions)] if contiguous else xp.asfortranarray(
                self.block[:, xp.asarray(positions)])
        if self.gram is None:
            return block, None
        index = xp.asarray(positions)
        core = self.gram[:len(positions), :len(positions)] if contiguous else self.gram[index[:, None], index]
        if not design.intercept:
            return block, xp.ascontiguousarray(core)
        k = len(positions)
        gram = xp.empty((k + 1, k + 1))
        gram[:k, :k] = core
        sums = self.sums[index]
        gram[:k, k] = sums
        gram[k, :k] = sums
        gram[k, k] = float(design.rows)
        return block, gram

    def margin(self, x_columns, columns, intercept_value):
        """A_aug x for x supported on ``columns`` (cached), without a pass over the whole shard."""
        xp, design = self.xp, self.design
        if not len(columns):
            y = xp.zeros(design.rows)
        else:
            positions, contiguous = self._positions(columns)
            if design.sparse:
                y = np.asarray(self.block[:, positions] @ x_columns).ravel()
            else:
                y = (self.block[:, :len(positions)] if contiguous else self.block[:, xp.asarray(positions)]) \
                    @ x_columns
        return y + intercept_value if design.intercept else y


def _dense(matrix):
    return matrix.toarray() if hasattr(matrix, "toarray") else matrix


def scores(correlation, norms, penalty, kept):
    """The priority d_k = bound - level of the penalty's dual levels (L1: l1 - |a_k^T theta|; a group's members
    share lam w_g - ||A_g^T theta||), smaller: closer to entering the support: skglm's rule, the KKT violation
    itself.  celer's (bound - level) / spread, which divides by ||a_k||, favours short columns: on sparse data
    with power-law column frequencies it let the working sets take short columns that stay zero, and needed
    11-12 outer iterations where this rule needs 2-3 (lasso at 0.01 and 0.005 lambda_max, 100000 x 10000
    CSR).  +inf for screened columns and for columns that are zero everywhere."""
    level, bound, spread = penalty.dual_levels(correlation, norms)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = bound - level
    d[~kept | (spread == 0)] = np.inf
    return d


def choose(d, support, previous, p0):
    """The next working set (sorted host indices): the support, then the best-scored columns, of size
    max(p0, min(candidates, 2 |support|), |previous set|)."""
    candidates = int(np.isfinite(d).sum() + (support & ~np.isfinite(d)).sum())
    size = max(min(p0, candidates), min(candidates, 2 * int(support.sum())), min(previous, candidates), 1)
    priority = d.copy()
    priority[support] = -np.inf
    if size >= len(priority):
        chosen = np.arange(len(priority))
    else:
        chosen = np.argpartition(priority, size - 1)[:size]
    return np.sort(chosen[np.isfinite(priority[chosen]) | support[chosen]]) if len(chosen) else chosen


def default_gap_tol(settings):
    """The relative duality gap to stop at when ``gap_tol`` is not given: eps_rel (1e-6 by default), the
    relative accuracy the residual rule asks for, floored at 1e-14."""
    return max(settings.eps_rel, 1e-14)


# Why the working sets stopped (info["stop"]) and the status word: the engine's, and the outer loop's own cap.
STATUS_OF_STOP = dict(ENGINE_STATUS_OF_STOP, max_outer="max_iterations")


@dataclasses.dataclass(frozen=True)
class Restricted:
    """How a restricted solve ended: the status word and the stop (a key of STATUS_OF_STOP, or "stalled")."""
    status: str
    stop: str


def working_set_solve(problem, settings, threads, start, penalty_object, engine_penalty, options, largest,
                      warm, log_stream=None):
    """The outer loop of the module docstring for ``problem`` (a solver.Problem) from ``warm`` (a Point or
    None), with the BLAS threads ``threads`` (a core.threads.ThreadPlan, in force while it runs); returns an
    ADMMResult of the full problem, the same on every rank (collective).  ``log_stream``: where rank 0's log
    goes (None: standard output)."""
    return WorkingSetSolver(problem, settings, threads, start, penalty_object, engine_penalty, largest, warm,
                            log_stream).run(options.get("lam"))


class WorkingSetSolver:
    """One working-set solve (the module docstring's loop), in the steps of its outer iteration: ``certify``
    (the gap on every column, the screening), ``choose`` (the next working set), ``solve_restricted`` (the
    problem on it, whose answer the point embeds: ``Point.embed``, shared with screening), and the checkpoint
    at the top of each outer iteration (``write_boundary``)."""

    def __init__(self, problem, settings, threads, start, penalty_object, engine_penalty, largest, warm,
                 log_stream):
        self.problem, self.settings, self.threads, self.start = problem, settings, threads, start
        self.penalty_object, self.engine_penalty, self.largest = penalty_object, engine_penalty, largest
        self.comm, self.xp, self.shard = comm, xp, shard = problem.comm, problem.xp, problem.shard
        self.features, self.intercept = shard.design.features, problem.intercept
        self.dual_penalty = certificate_of(shard, engine_penalty).penalty  # its levels: screening, scores
        self.tol = settings.gap_tol if settings.gap_tol is not None else default_gap_tol(settings)
        if problem._column_norms is None:
            problem._column_norms = column_norms(shard, comm)
        self.norms = problem._column_norms
        if problem._column_cache is None:
            problem._column_cache = ColumnCache(shard.design, xp, isinstance(shard, SquaredLossShard))
        self.cache = problem._column_cache
        self.cache_time_before = self.cache.time
        self.extra_setup = problem.setup_time if warm is None else 0.0  # as Problem._solve
        self.setup_time = time.perf_counter() - start + self.extra_setup
        self.point = Point.of(warm, xp, shard.n)  # x, u and rho
        if warm is None and self.intercept:  # from the null model (every coefficient 0, the best intercept),
            # as glmnet and skglm: at lambda_max it is the answer, certified at once
            self.point.x[-1] = type(shard).null_intercept(problem.b, comm, problem.loss_options)
        self.inner_base = dataclasses.replace(  # the restricted ADMM solves' settings, less their budget
            settings, screening=False, working_set=False, checkpoint=None, verbose=False, eps_abs=0.0,
            eps_rel=0.0, gap_every=INNER_GAP_EVERY, blas_threads=0)  # the threads: in force
        self.log = working_set_log(settings.verbose and comm.rank == 0, log_stream)
        self.kept = np.ones(self.features, dtype=bool)
        self.iterations, self.solve_time, self.gap_time, self.outer = 0, 0.0, 0.0, 0
        self.stop, self.history, self.outer_rows, self.result = None, {}, [], None
        self.checkpointer, self.resumed_at, self.resuming = None, 0, False
        self.gap = self.correlation = None
        self.inner = self.inner_solver_of(settings)
        self.newton_epochs, self.newton, self.margin, self.dual_margin = 0, None, None, None

    def inner_solver_of(self, settings):
        """"prox_newton" or "admm" for the restricted solves (the setting ``inner_solver``).  "auto": proximal
        Newton where it applies (a loss with ``newton_inner``, a penalty declaring ``PROX_NEWTON``, numpy data),
        except for a loss with a constant Hessian (the squared loss) on dense data, where ADMM's x-step works
        from the working set's Gram matrix alone and measured faster (docs/admm.md; on sparse data proximal
        Newton is faster).  Asking for it where it does not apply is an error on every rank."""
        fits = backend.is_numpy(self.xp) and newton_supports(self.shard, self.engine_penalty)
        check_collectively(self.comm, None if fits or settings.inner_solver != "prox_newton" else
                           f"inner_solver='prox_newton' needs a loss with a Hessian (logistic, squared) and the "
                           f"{' or '.join(penalties_declaring(PROX_NEWTON))} penalty on numpy data; got "
                           f"{self.problem.loss} + "
                           f"{self.engine_penalty.describe()} on {self.xp.__name__}")
        if not fits or settings.inner_solver == "admm":
            return "admm"
        if settings.inner_solver == "auto" and self.shard.constant_hessian and \
                not self.comm.allreduce(int(self.shard.design.sparse), op=MPI.MAX):
            return "admm"
        return "prox_newton"

    def run(self, lam_value):
        """The whole solve: the banner, the start (or resume), the outer loop, the result."""
        with reducer_for(self.settings.reducer, self.comm, check=False) as reducer:
            self.inner_base = dataclasses.replace(self.inner_base, reducer=reducer)
            self.log.banner(f"mpiopt {__version__}: consensus ADMM on working sets", working_set_banner_lines(
                self.problem, self.settings, self.engine_penalty, self.largest, self.threads, self.inner,
                self.inner_fraction(), self.tol, self.setup_time))
            self.start_or_resume()
            signals = SignalFlags(self.checkpointer is not None)
            try:
                self.loop()
            finally:
                signals.restore()
        return self.finish(lam_value, getattr(reducer, "name", str(reducer)))

    def inner_fraction(self):
        """The restricted solves' tolerance, as a fraction of the full problem's relative gap."""
        return NEWTON_FRACTION if self.inner == "prox_newton" else INNER_FRACTION

    def start_or_resume(self):
        """The first working set, the warm start's support (so that A x comes from the cached columns), or
        the state of a checkpoint when there is one."""
        self.columns = self.comm.bcast(np.flatnonzero(np.asarray(backend.to_host(
            self.point.x[:self.features])) != 0).astype(np.int64), root=0)
        self.batches = [self.columns]  # what the cache was given, in order: a resume replays it (the same Gram)
        self.cache.add(self.columns)
        if self.settings.checkpoint:
            self.checkpointer = Checkpointer(self.settings.checkpoint, self.comm, dict(
                self.problem.fingerprint(self.engine_penalty), solver="working_set"), FORMAT, "ADMM working-set")
            restored = {}
            if self.checkpointer.restore(lambda shared, mine, meta: restored.update(shared=shared, mine=mine,
                                                                                      meta=meta),
                                         _validator(self.shard.n, self.features)):
                self.restore(restored["shared"], restored["mine"], restored["meta"])
        self.times_before = (self.solve_time, self.gap_time)  # runs before a resume: in the history only
        self.resumed = self.resuming
        if self.resuming:
            self.log.note(f"resumed:  from the checkpoint {self.settings.checkpoint} at iteration "
                          f"{self.iterations} (outer {self.outer})")

    def restore(self, shared, mine, meta):
        xp = self.xp
        self.point.x = xp.asarray(shared["x"], dtype=float)
        self.point.u = xp.asarray(mine["u"], dtype=float) if mine["u"].size else None
        saved = mine.get("dual_margin")  # the certificate's refined point, as the uninterrupted run has it
        self.dual_margin = np.asarray(saved, dtype=float) if saved is not None and saved.size else None
        self.kept, self.columns = shared["kept"].astype(bool), shared["columns"].astype(np.int64)
        self.batches = np.split(shared["cache_order"].astype(np.int64), np.cumsum(shared["cache_sizes"])[:-1])
        for batch in self.batches:
            self.cache.add(batch)
        self.iterations, self.outer, self.point.rho = int(meta["iterations"]), int(meta["outer"]), meta["rho"]
        self.solve_time, self.gap_time = float(meta["solve_time"]), float(meta["gap_time"])
        self.history, self.outer_rows = meta["history"], meta["outer_rows"]
        self.resumed_at, self.resuming = self.iterations, True

    def write_boundary(self):
        """The state at the top of an outer iteration (a resume starts here, recomputing its gap) and the
        removal of the inner solve's checkpoint that led to it (finished)."""
        sizes = np.array([len(batch) for batch in self.batches], dtype=np.int64)
        self.checkpointer.write(
            {"x": self.point.x, "kept": self.kept.astype(np.uint8), "columns": self.columns,
             "cache_order": np.concatenate(self.batches).astype(np.int64) if self.batches
             else np.empty(0, np.int64), "cache_sizes": sizes},
            {"u": self.point.u if self.point.u is not None else self.xp.zeros(0),
             "dual_margin": self.dual_margin if self.dual_margin is not None else np.zeros(0)},
            {"iterations": self.iterations, "outer": self.outer, "rho": self.point.rho, "solve_time": self.solve_time,
             "gap_time": self.gap_time, "history": self.history, "outer_rows": self.outer_rows})
        # the inner solve that led here is finished: a leftover is harmless (a resume reads only the next
        # outer iteration's), so a failure to remove it is not fatal
        self.checkpointer.discard(_inner_path(self.settings.checkpoint, self.outer))

    def loop(self):
        """Certify, stop or choose the next working set and solve on it, until a stop (``self.stop``)."""
        while True:
            if self.checkpointer is not None:
                self.write_boundary()
            elapsed = self.certify(screening=True)
            self.stop = self.stop_before_inner(elapsed)
            if self.stop is not None:
                return
            self.outer += 1
            self.choose()
            result = self.solve_restricted(elapsed)
            if result.status != "converged" and (self.iterations >= self.settings.max_iter
                                                 or result.status != "max_iterations"):
                # cut by the iteration budget, the time limit or SIGTERM: end at this x
                self.stop = result.stop
                self.certify(screening=False)
                return

    def certify(self, screening):
        """The duality gap of the full problem at x (one pass over each shard's rows) with, when
        ``screening``, the gap-safe test of what it proves zero; an outer row of the history and the log.
        Returns the time so far (the same on every rank with a time limit)."""
        xp, columns, x, comm = self.xp, self.columns, self.point.x, self.comm
        tock = time.perf_counter()
        margin = self.cache.margin(x[xp.asarray(columns)] if len(columns) else None, columns,
                                   float(x[-1]) if self.intercept else 0.0) if self.shard.active else None
        dual_margin = self.refined_margin(margin)
        self.gap, _ = dual_point(self.shard, self.engine_penalty, x, comm, theta_wanted=False, margin=margin,
                                 dual_margin=dual_margin)
        self.margin = margin
        self.correlation = np.asarray(backend.to_host(self.gap.correlation), dtype=float)
        if screening:
            self.kept &= sphere_test(self.shard, self.gap, self.norms, self.dual_penalty, comm)
        self.gap_time += time.perf_counter() - tock
        elapsed = time.perf_counter() - self.start
        if self.settings.time_limit:  # one clock for every rank: the limit's decision and the inner settings
            elapsed = comm.allreduce(elapsed, op=MPI.MAX)
        gap, screened = self.gap, int(self.features - self.kept.sum())
        self.outer_rows.append({"outer": self.outer, "working_set": int(len(columns)),
                                "iterations": self.iterations, "gap": gap.gap, "relative_gap": gap.relative,
                                "screened": screened, "time": elapsed})
        self.log.row(self.outer, len(columns), screened, self.iterations, gap.primal, gap.gap, gap.relative,
                     elapsed)
        return elapsed

    def refined_margin(self, margin):
        """The margins of the refined point for the certificate's dual point (proxnewton.py, ``_refine``: a gap
        that tracks x's suboptimality): the last proximal Newton solve's, made on its last Hessian, else, at
        the first certificate of a warm start with a support (no Newton iteration has reached it), made here
        from the Hessian at x, unless the gap's sums at x are kept from the last certificate (a path's next
        weight); else None (the dual point of x's own residual: the null model, a cut inner solve)."""
        dual_margin, self.dual_margin = self.dual_margin, None
        if dual_margin is not None or self.inner != "prox_newton":
            return dual_margin
        if self.outer == 0 and len(self.columns) and not has_dual_sums(self.shard, self.engine_penalty, self.point.x):
            solver, index = self.newton_on(self.columns)
            return solver.refined_margin(backend.to_host(self.point.restricted(index).x), margin)
        return None

    def newton_on(self, columns):
        """(ProxNewton on the problem restricted to ``columns``, the indices of its coefficients in x), kept
        while the working set stays: the certificate after an inner solve reuses the solver's restricted
        problem."""
        if self.newton is None or self.newton[0] is not columns:
            block, gram = self.cache.take(columns)
            sub = self.problem.on_columns(block)
            hessian = None
            if sub.shard.constant_hessian and self.comm.allreduce(gram is None and sub.shard.active) == 0:
                hessian = np.array(backend.to_host(gram), dtype=float) if gram is not None \
                    else np.zeros((sub.shard.n, sub.shard.n))  # the squared loss: the cache's Gram, all-reduced
                self.comm.Allreduce(MPI.IN_PLACE, hessian, op=MPI.SUM)
            self.newton = (columns, ProxNewton(sub.shard, self.engine_penalty.on_columns(columns), self.comm,
                                               hessian), Point.index(columns, self.intercept))
        return self.newton[1], self.newton[2]

    def stop_before_inner(self, elapsed):
        """Why to stop after a certificate (a key of STATUS_OF_STOP), or None to solve on a new set."""
        settings, comm = self.settings, self.comm
        if comm.bcast(self.gap.relative <= self.tol, root=0):  # rank 0 decides, as for every choice below
            if self.resuming:
                self.log.note(f"resumed at iteration {self.iterations} (converged), nothing left to do")
            return "gap_tol"
        if self.iterations >= settings.max_iter:
            return "max_iter"
        if self.outer >= MAX_OUTER:
            return "max_outer"
        if settings.time_limit and elapsed >= settings.time_limit:
            return "time_limit"
        # SIGTERM between inner solves: the state above is on disk.  The flags are read, not taken, so a
        # SIGUSR1 that came during the certificate is left for the next inner solve to write its checkpoint.
        if self.checkpointer is not None and comm.allreduce(float(pending()[1]), op=MPI.MAX) > 0:
            return "signal"
        return None

    def choose(self):
        """Choose the next working set (rank 0's choice, broadcast) and gather its columns."""
        xp, x, kept, features = self.xp, self.point.x, self.kept, self.features
        host_x = np.asarray(backend.to_host(x[:features]))
        support = (host_x != 0) & kept
        if (host_x[~kept] != 0).any():  # coefficients proven zero at the optimum: set them so
            drop = np.flatnonzero((host_x != 0) & ~kept)
            x[xp.asarray(drop)] = 0.0
            if self.point.u is not None:
                self.point.u[xp.asarray(drop)] = 0.0
        d = scores(self.correlation, self.norms, self.dual_penalty, kept)
        chosen = self.comm.bcast(self.dual_penalty.whole(choose(d, support, len(self.columns),
                                                                self.settings.working_set_size)).astype(np.int64), root=0)
        self.columns = self.cache.ordered(chosen)  # the cached ones first, in the cache's order
        self.batches.append(self.columns)
        self.cache.add(self.columns)

    def solve_restricted(self, elapsed):
        """The problem restricted to the working set, by the chosen inner solver, from the point restricted to
        it; its answer embedded into the point.  Returns its Restricted."""
        return self.newton_solve() if self.inner == "prox_newton" else self.admm_solve(elapsed)

    def newton_solve(self):
        """The problem restricted to the working set by proximal Newton (proxnewton.py) from x, to a fraction
        of the current gap; its answer becomes x (u is dropped: no ADMM state), its Newton iterations count
        as iterations."""
        xp, settings, gap = self.xp, self.settings, self.gap
        tick = time.perf_counter()
        solver, index = self.newton_on(self.columns)
        epochs = solver.epochs
        tol = max(NEWTON_FRACTION * gap.relative, 0.5 * self.tol) if math.isfinite(gap.relative) else self.tol
        deadline = self.start + settings.time_limit if settings.time_limit else None
        x, iterations, stop, history = solver.solve(backend.to_host(self.point.restricted(index).x), tol,
                                                    settings.max_iter - self.iterations, deadline,
                                                    signals=self.checkpointer is not None)
        self.point.embed(index, xp.asarray(x))  # u dropped: proximal Newton has no ADMM state
        self.dual_margin = solver.dual_margin  # the next certificate's dual point (None after a cut solve)
        seconds = time.perf_counter() - tick
        _append_history(self.history, {"iter": history["iter"][1:], "gap": history["gap"][1:],
                                       "time": [seconds] * iterations}, self.iterations, self.solve_time)
        self.iterations += iterations
        self.solve_time += seconds
        self.newton_epochs += solver.epochs - epochs
        return Restricted("converged" if stop in ("gap_tol", "stalled") else STATUS_OF_STOP[stop], stop)

    def admm_solve(self, elapsed):
        """The problem restricted to the working set by consensus ADMM, warm-started, to a fraction of the
        current gap; its answer is taken into x, u and rho and its history appended (the ADMMResult kept as
        ``self.result``)."""
        columns = self.columns
        block, gram = self.cache.take(columns)
        sub = self.problem.on_columns(block, gram, x_solver="newton" if len(columns) + self.intercept
                                      <= NEWTON_COLUMNS and self.problem.loss == "logistic" else None)
        result = self.point.solve_on(sub, columns, self.intercept, self.penalty_object, self.inner_settings(elapsed),
                                     self.threads)
        if self.resuming:  # the first inner solve after a resume may itself have resumed part-way
            self.resumed_at, self.resuming = self.iterations + int(result.info.get("resumed_at") or 0), False
        _append_history(self.history, result.history, self.iterations, self.solve_time)
        self.iterations += result.iterations
        self.solve_time += result.timings["solve"]
        self.result = result
        return Restricted(result.status, result.info["stop"])

    def inner_settings(self, elapsed):
        """The inner solve's settings.  One that stalls short of its tolerance returns for a new certificate
        (which may already suffice): at most max(100, the iterations so far), so the caps grow geometrically."""
        settings, gap, tol = self.settings, self.gap, self.tol
        cap = max(INNER_MIN_CAP, self.iterations)
        budget = dict(max_iter=min(settings.max_iter - self.iterations, cap),
                      gap_tol=max(INNER_FRACTION * gap.relative, 0.5 * tol) if math.isfinite(gap.relative) else tol)
        if settings.time_limit:
            budget["time_limit"] = max(settings.time_limit - elapsed, 1e-9)
        if self.checkpointer is not None:  # the inner solve checkpoints itself: a resume continues it bitwise
            budget["checkpoint"] = _inner_path(settings.checkpoint, self.outer)
        return dataclasses.replace(self.inner_base, **budget)

    def finish(self, lam_value, reducer_name):
        """The ADMMResult of the full problem at x (the last inner solve's, completed), and the log's footer."""
        xp, x, gap, features = self.xp, self.point.x, self.gap, self.features
        host_x = np.asarray(backend.to_host(x[:features]))
        gradient = self.negative_gradient()
        kkt = float(np.abs(host_x - np.asarray(backend.to_host(
            self.penalty_object.prox(xp.asarray(host_x + gradient), 1.0)))).max()) if features else 0.0
        result = self.result
        if result is None:  # certified at the start (the warm start, or 0 above lambda_max): no ADMM iteration
            result = ADMMResult(x=x, objective=gap.primal, iterations=0, status=None, history={},
                                objective_history={}, timings={}, u=self.point.u, info={
                                    "rho_final": self.point.rho, "rho_changes": 0, "ranks": self.comm.size,
                                    "reducer": reducer_name, "intercept": self.intercept,
                                    "loss": self.problem.loss, "backend": xp.__name__})
        result.x, result.u, result.gap, result.relative_gap = x, self.point.u, gap.gap, gap.relative
        result.iterations, result.status, result.objective = self.iterations, STATUS_OF_STOP[self.stop], gap.primal
        result.history = self.history or result.history
        result.objective_history = {"iter": [self.iterations], "objective": [gap.primal]}
        result.info.update(self.info(lam_value, kkt, host_x))
        result.timings = self.timings(result.timings)
        self.log.footer(working_set_footer_lines(result, self.shard.n, self.inner, self.setup_time,
                                                 self.resumed_at if self.resumed else None))
        return result

    def negative_gradient(self):
        """-grad of the loss at x on the penalized columns (host), for the KKT residual: the certificate's
        A^T theta / scale when theta is x's own residual (ADMM inner solves; with an intercept, balanced), else
        (a refined dual point) one more pass over the rows and an all-reduce of n numbers."""
        gap, shard = self.gap, self.shard
        if self.inner != "prox_newton":
            return self.correlation / gap.scale if gap.scale else self.correlation
        local = np.zeros(shard.n)
        if shard.active:  # -phi'(A x) is the unbalanced, unscaled dual point of x
            local[:] = backend.to_host(shard.design.rmatvec(shard.dual_theta(self.margin)))
        return host_allreduce(self.comm, local)[:self.features]

    def info(self, lam_value, kkt, host_x):
        """The full problem's part of the result's ``info``."""
        problem, gap, largest, kept, settings = self.problem, self.gap, self.largest, self.kept, self.settings
        threads, x = self.threads, self.point.x
        return dict(
            problem=f"{problem.loss} + {self.engine_penalty.describe()}", n=self.shard.n,
            features=problem.n_features, rows=problem.total_rows, lambda_max=largest, lam=lam_value,
            lam_ratio=lam_value / largest if largest and lam_value is not None else None,
            gap=gap.gap, relative_gap=gap.relative, dual_objective=gap.dual,
            screened=int(self.features - kept.sum()), screened_columns=np.flatnonzero(~kept).tolist(),
            kkt_residual=kkt, outer_iterations=self.outer,
            working_set_sizes=[row["working_set"] for row in self.outer_rows[1:]],
            outer=self.outer_rows, working_set=True, inner_solver=self.inner, coordinate_epochs=self.newton_epochs,
            settings=settings.as_dict(), penalty=self.penalty_object.name,
            resumed_at=self.resumed_at, blas_threads=threads.threads, blas_threads_reason=threads.reason,
            iterations_run=self.iterations - self.resumed_at, stop=self.stop,
            nonzeros=int(np.count_nonzero(host_x)) + (int(float(x[-1]) != 0) if self.intercept else 0))

    def timings(self, inner):
        """This run's seconds (as the engine's: a resumed run's earlier time is in the history only), with the
        last inner solve's x-step and communication times ``inner``."""
        self.total = time.perf_counter() - self.start + self.extra_setup
        self.gather_time = self.cache.time - self.cache_time_before
        solve_time, gap_time = self.solve_time - self.times_before[0], self.gap_time - self.times_before[1]
        return {"setup": self.setup_time, "gather": self.gather_time, "solve": solve_time, "gap": gap_time,
                "per_iteration": solve_time / max(self.iterations - self.resumed_at, 1),
                "x_step": inner.get("x_step", 0.0), "communication": inner.get("communication", 0.0),
                "total": self.total}


def _inner_path(path, outer):
    """The checkpoint of the inner solve of outer iteration ``outer``, beside the working sets' own."""
    return f"{path}.inner{outer}.npz"


def _validator(n, features):
    """Rank 0's check, before anything is restored, that a working-set checkpoint fits this problem."""
    def validate(shared, parts, meta):
        missing = [key for key in ("x", "kept", "columns", "cache_order", "cache_sizes") if key not in shared]
        missing += [key for key in ("iterations", "outer", "rho", "history", "outer_rows") if key not in meta]
        missing += [f"rank{rank}_u" for rank, part in enumerate(parts) if "u" not in part]
        if missing:
            raise ValueError(f"entries {', '.join(missing)} are missing")
        if shared["x"].shape != (n,) or shared["kept"].shape != (features,):
            raise ValueError(f"x or kept do not have {n} and {features} entries")
        if any(part["u"].shape not in ((n,), (0,)) for part in parts):
            raise ValueError(f"a rank's u does not have {n} entries")
        if shared["columns"].size and (shared["columns"].min() < 0 or shared["columns"].max() >= features):
            raise ValueError("a working-set column is out of range")
    return validate


def _append_history(history, part, offset, time_offset):
    """Concatenate an inner solve's history, its iterations and times shifted to follow the earlier ones."""
    for key, values in part.items():
        values = list(values)
        if key == "iter":
            values = [offset + value for value in values]
        elif key == "time":
            values = [time_offset + value for value in values]
        history.setdefault(key, []).extend(values)
