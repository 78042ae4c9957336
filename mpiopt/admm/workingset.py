"""Working sets for sparse models across ranks: solve small, certify on everything.

In the manner of Blitz (Johnson and Guestrin 2015), celer (Massias, Gramfort and
Salmon 2018) and skglm (Bertrand et al. 2022), for the L1 and elastic-net
penalties with the squared or logistic loss (those with a duality gap, gap.py):

    x = warm start (0 or the previous weight's solution); kept = every column
    repeat:
        gap, theta = dual point at x on ALL columns          (one pass over each shard's rows)
        stop when gap / P(x) <= gap_tol                       (a certificate on the full problem)
        kept &= gap-safe sphere test (gap.py's screen)       (free: the pass above gave A^T theta)
        score_k = (l1 - |a_k^T theta|) / ||a_k||              (celer's distance to the dual constraint)
        W = support(x) + the best-scored kept columns, |W| = max(p0, min(kept, 2 |support|)),
            and never smaller than the last W                (skglm's size rule, made monotone)
        solve the problem restricted to W by consensus ADMM, warm-started from (x_W, u_W, rho),
            to a relative gap 0.3 x the full problem's       (celer's inner tolerance)
            (logistic: Newton x-steps while |W| <= 500, else the problem's x_solver)

Only the working set's columns are gathered on each rank (Fortran-ordered,
kept across outer iterations and along a path) and, for the squared loss, only
their Gram matrix is formed, grown incrementally: new columns N cost
A_C^T A_N and A_N^T A_N, m_i |N| (|C| + |N|) flops; the rest is reused.  The
restricted x-step factors (|W| + 1)^2 numbers, so an inner ADMM iteration is
O(|W|^2) plus one all-reduce of |W| + 1 doubles.  The full m x n Gram matrix is
never formed.

Cost of one outer iteration on rank i (m_i rows, n columns, p ranks):
    dual point            2 m_i n flops, 8 m_i n bytes read, all-reduce of n + 3 doubles
    new columns' Grams    2 m_i |N| (|C| + |N|) flops
    inner ADMM            k (2 (|W| + 1)^2 flops + all-reduce of |W| + 1 and of 5 doubles)
so with few outer iterations (typically 3-8) the solve costs a few passes over
the data, where the full solver's setup alone costs m_i n^2 flops.

Every decision is collective: the scores come from all-reduced sums and rank 0's
choice is broadcast, so every rank solves the same restricted problem.

Checkpoints (``checkpoint``): the state at the top of each outer iteration (x,
u, rho, the screened columns, the set, the cache's additions in order, the
counters), and each inner solve's own engine checkpoint beside it, so a run cut
anywhere resumes bit for bit (docs/admm.md, "Checkpoints and resume").
"""
import dataclasses
import math
import time
import types

import numpy as np
from mpi4py import MPI

import os

from .. import __version__
from ..collectives import Reducer, get_reducer
from ..core import backend
from ..core.checkpoint import Checkpointer
from ..core.signals import SignalFlags, pending
from .gap import column_norms, dual_point, gap_terms, sphere_test
from .losses.squared import SquaredLossShard
from .result import ADMMResult

INNER_FRACTION = 0.3     # the restricted problem is solved to this fraction of the full problem's gap
INNER_GAP_EVERY = 5      # the inner solves check their (cheap, restricted) gap this often
MAX_OUTER = 100
INNER_MIN_CAP = 100      # an inner solve runs at most max(this, the iterations so far) before a new certificate
FORMAT = "mpiopt-admm-working-set-checkpoint-1"
NEWTON_COLUMNS = 500     # restricted logistic problems up to this many columns take Newton x-steps (measured
                         # faster than L-BFGS there: 0.26 vs 0.42 s on a wide, 1.0 vs 3.1 s on a sparse design)


class ColumnCache:
    """This rank's gathered columns A_C (m_i x capacity, Fortran-ordered; CSR when the shard is) and, for the
    squared loss while the block stays tall, their Gram matrix A_C^T A_C and column sums, grown incrementally.

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
        gathered = design.columns(new)
        total = count + len(new)
        if design.sparse:
            import scipy.sparse
            self.block = gathered if self.block is None else scipy.sparse.hstack([self.block, gathered],
                                                                                format=gathered.format)
            old = self.block[:, :count] if count else None
        else:
            if self.block is None or self.block.shape[1] < total:  # grow the storage geometrically
                capacity = max(total, 2 * (0 if self.block is None else self.block.shape[1]), 16)
                block = xp.empty((design.rows, min(capacity, design.features)), order="F")
                if count:
                    block[:, :count] = self.block[:, :count]
                self.block = block
            self.block[:, count:total] = gathered
            old = self.block[:, :count]
        if self.gram_wanted and design.rows >= total + 1:
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
        if design.sparse:
            block = self.block[:, positions] if not contiguous or self.block.shape[1] != len(positions) \
                else self.block
            if design.A.format == "csr" and block.format != "csr":
                block = block.tocsr()
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


def scores(correlation, norms, l1, kept):
    """celer's priority d_k = (l1 - |a_k^T theta|) / ||a_k|| (smaller: closer to entering the support);
    +inf for screened columns and for columns that are zero everywhere."""
    with np.errstate(divide="ignore", invalid="ignore"):
        d = (l1 - np.abs(correlation)) / norms
    d[~kept | (norms == 0)] = np.inf
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


def working_set_solve(problem, settings, threads, start, penalty_object, engine_penalty, options, largest,
                      warm_start):
    """The outer loop of the module docstring for ``problem`` (a solver.Problem), with the BLAS threads
    ``threads`` (a core.threads.ThreadPlan, in force while it runs); returns an ADMMResult of the full problem,
    the same on every rank (collective)."""
    comm, xp, shard = problem.comm, problem.xp, problem.shard
    design = shard.design
    features, intercept = design.features, problem.intercept
    l1, _, _ = gap_terms(shard, engine_penalty)
    tol = settings.gap_tol if settings.gap_tol is not None else default_gap_tol(settings)
    if problem._column_norms is None:
        problem._column_norms = column_norms(shard, comm)
    norms = problem._column_norms
    if problem._column_cache is None:
        problem._column_cache = ColumnCache(design, xp, isinstance(shard, SquaredLossShard))
    cache = problem._column_cache
    cache_time_before = cache.time
    setup_time = time.perf_counter() - start + (problem.setup_time if warm_start is None else 0.0)  # as _solve
    x = xp.zeros(shard.n) if warm_start is None else xp.array(warm_start.x, dtype=float)
    u = None if warm_start is None or warm_start.u is None else xp.array(warm_start.u, dtype=float)
    rho = None if warm_start is None else warm_start.info.get("rho_final")
    given = {field.name: getattr(settings, field.name) for field in dataclasses.fields(settings)}
    given.update(screening=False, working_set=False, checkpoint=None, verbose=False, eps_abs=0.0, eps_rel=0.0,
                 gap_every=INNER_GAP_EVERY, blas_threads=0)  # the threads are this solve's, already in force
    own_reducer = not isinstance(settings.reducer, Reducer)
    reducer = get_reducer(settings.reducer, comm, check=False) if own_reducer else settings.reducer
    given["reducer"] = reducer
    log = _outer_log(settings.verbose and comm.rank == 0)
    log.banner(f"mpiopt {__version__}: consensus ADMM on working sets", [
        f"problem:  {problem.loss} loss + {engine_penalty.describe()}",
        f"          rows m = {problem.total_rows}, variables n = {shard.n}" + (" (with intercept)" if intercept else "")
        + f", ranks = {comm.size}" + (f", lambda_max = {largest:.4e}" if largest else ""),
        f"threads:  {threads.describe()}",
        f"working sets: first size {settings.working_set_size}, then max(that, 2 x support); inner ADMM to "
        f"{INNER_FRACTION} x the gap; gap-safe screening at each check",
        f"stopping: relative duality gap <= {tol:.1e} on all {features} columns, max_iter = {settings.max_iter} "
        f"ADMM iterations",
        f"setup:    {setup_time:.3f} s"])
    kept = np.ones(features, dtype=bool)
    # the working set starts as the warm start's support (so that A x comes from the cached columns)
    columns = comm.bcast(np.flatnonzero(np.asarray(backend.to_host(x[:features])) != 0).astype(np.int64), root=0)
    batches = [columns]  # what the cache was given, in order: a resume replays it (the same Gram, bitwise)
    cache.add(columns)
    iterations, solve_time, gap_time, outer, status = 0, 0.0, 0.0, 0, "max_iter"
    history = {}
    outer_rows = []
    result = None
    checkpointer, resumed_at, resuming = None, 0, False
    if settings.checkpoint:
        checkpointer = Checkpointer(settings.checkpoint, comm, dict(problem.fingerprint(engine_penalty),
                                                                     solver="working_set"), FORMAT, "ADMM working-set")
        restored = {}
        if checkpointer.restore(lambda shared, mine, meta: restored.update(shared=shared, mine=mine, meta=meta),
                                _validator(shard.n, features)):
            shared, mine, meta = restored["shared"], restored["mine"], restored["meta"]
            x = xp.asarray(shared["x"], dtype=float)
            u = xp.asarray(mine["u"], dtype=float) if mine["u"].size else None
            kept, columns = shared["kept"].astype(bool), shared["columns"].astype(np.int64)
            batches = np.split(shared["cache_order"].astype(np.int64), np.cumsum(shared["cache_sizes"])[:-1])
            for batch in batches:
                cache.add(batch)
            iterations, outer, rho = int(meta["iterations"]), int(meta["outer"]), meta["rho"]
            solve_time, gap_time = float(meta["solve_time"]), float(meta["gap_time"])
            history, outer_rows = meta["history"], meta["outer_rows"]
            resumed_at, resuming = iterations, True
    times_before = (solve_time, gap_time)  # the runs before a resume: in the history, not in this run's timings
    resumed = checkpointer is not None and resuming
    signals = SignalFlags(checkpointer is not None)
    if checkpointer is not None and resuming:
        log.note(f"resumed:  from the checkpoint {settings.checkpoint} at iteration {iterations} (outer {outer})")

    def write_boundary():
        """The state at the top of an outer iteration (a resume starts here, recomputing its gap) and the
        removal of the inner solve's checkpoint that led to it (finished)."""
        sizes = np.array([len(batch) for batch in batches], dtype=np.int64)
        checkpointer.write(
            {"x": x, "kept": kept.astype(np.uint8), "columns": columns,
             "cache_order": np.concatenate(batches).astype(np.int64) if batches else np.empty(0, np.int64),
             "cache_sizes": sizes},
            {"u": u if u is not None else xp.zeros(0)},
            {"iterations": iterations, "outer": outer, "rho": rho, "solve_time": solve_time, "gap_time": gap_time,
             "history": history, "outer_rows": outer_rows})
        if comm.rank == 0:
            try:  # a leftover is harmless (a resume reads only the next outer iteration's), a failure not fatal
                os.remove(_inner_path(settings.checkpoint, outer))
            except OSError:
                pass

    try:
        while True:
            if checkpointer is not None:
                write_boundary()
            # 1. the certificate on every column, and what it proves zero
            tock = time.perf_counter()
            margin = cache.margin(x[xp.asarray(columns)] if len(columns) else None, columns,
                                  float(x[-1]) if intercept else 0.0) if shard.active else None
            gap, _ = dual_point(shard, engine_penalty, x, comm, theta_wanted=False, margin=margin)
            correlation = np.asarray(backend.to_host(gap.correlation), dtype=float)
            kept &= sphere_test(shard, gap, norms, l1, comm)
            gap_time += time.perf_counter() - tock
            elapsed = time.perf_counter() - start
            if settings.time_limit:  # one clock for every rank: the limit's decision and the inner solves' settings
                elapsed = comm.allreduce(elapsed, op=MPI.MAX)
            outer_rows.append({"outer": outer, "working_set": int(len(columns)), "iterations": iterations,
                               "gap": gap.gap, "relative_gap": gap.relative, "screened": int(features - kept.sum()),
                               "time": elapsed})
            log.row(outer, len(columns), int(features - kept.sum()), iterations, gap.primal, gap.gap, gap.relative,
                    elapsed)
            if comm.bcast(gap.relative <= tol, root=0):  # rank 0 decides, as for every choice below
                status = "converged"
                if resuming:
                    log.note(f"resumed at iteration {iterations} (converged), nothing left to do")
                break
            if outer >= MAX_OUTER or iterations >= settings.max_iter:
                break
            if settings.time_limit and elapsed >= settings.time_limit:
                status = "time_limit"
                break
            # SIGTERM between inner solves: the state above is on disk.  The flags are read, not taken, so a
            # SIGUSR1 that came during the certificate is left for the next inner solve to write its checkpoint.
            if checkpointer is not None and comm.allreduce(float(pending()[1]), op=MPI.MAX) > 0:
                status = "interrupted"
                break
            outer += 1
            # 2. the next working set
            host_x = np.asarray(backend.to_host(x[:features]))
            support = (host_x != 0) & kept
            if (host_x[~kept] != 0).any():  # coefficients proven zero at the optimum: set them so
                drop = np.flatnonzero((host_x != 0) & ~kept)
                x[xp.asarray(drop)] = 0.0
                if u is not None:
                    u[xp.asarray(drop)] = 0.0
            d = scores(correlation, norms, l1, kept)
            chosen = comm.bcast(choose(d, support, len(columns), settings.working_set_size).astype(np.int64),
                                root=0)
            columns = cache.ordered(chosen)  # the cached ones first, in the cache's order: a view, not a copy
            # 3. the restricted problem, warm-started, to a fraction of the current gap
            batches.append(columns)
            cache.add(columns)
            block, gram = cache.take(columns)
            sub = problem.on_columns(block, gram, x_solver="newton" if len(columns) + intercept <= NEWTON_COLUMNS
                                     and shard.iterative else None)
            index = xp.asarray(np.concatenate([columns, [features]]) if intercept else columns)
            start_from = types.SimpleNamespace(x=x[index], u=None if u is None else u[index],
                                               info={"rho_final": rho})
            # an inner solve that stalls short of its tolerance returns for a new certificate (which may already
            # suffice): at most max(100, the iterations so far), so the caps grow geometrically
            cap = max(INNER_MIN_CAP, iterations)
            round_settings = dict(given, max_iter=min(settings.max_iter - iterations, cap),
                                  gap_tol=max(INNER_FRACTION * gap.relative, 0.5 * tol) if math.isfinite(
                                      gap.relative) else tol)
            if settings.time_limit:
                round_settings["time_limit"] = max(settings.time_limit - elapsed, 1e-9)
            if checkpointer is not None:  # the inner solve checkpoints itself: a resume continues it bitwise
                round_settings.update(checkpoint=_inner_path(settings.checkpoint, outer),
                                      checkpoint_every=settings.checkpoint_every)
            result = sub.solve(penalty_object, warm_start=start_from, **round_settings)
            if resuming:  # the first inner solve after a resume may itself have resumed part-way
                resumed_at, resuming = iterations + int(result.info.get("resumed_at") or 0), False
            _append_history(history, result.history, iterations, solve_time)
            iterations += result.iterations
            solve_time += result.timings["solve"]
            x = xp.zeros(shard.n)
            x[index] = xp.asarray(result.x)
            if result.u is not None:
                u = xp.zeros(shard.n)
                u[index] = xp.asarray(result.u)
            rho = result.info["rho_final"]
            if result.status != "converged" and (iterations >= settings.max_iter or result.status != "max_iter"):
                # cut by the iteration budget, the time limit or SIGTERM: end at this x
                status = result.status
                tock = time.perf_counter()
                margin = cache.margin(x[xp.asarray(columns)] if len(columns) else None, columns,
                                      float(x[-1]) if intercept else 0.0) if shard.active else None
                gap, _ = dual_point(shard, engine_penalty, x, comm, theta_wanted=False, margin=margin)
                correlation = np.asarray(backend.to_host(gap.correlation), dtype=float)
                gap_time += time.perf_counter() - tock
                outer_rows.append({"outer": outer, "working_set": int(len(columns)), "iterations": iterations,
                                   "gap": gap.gap, "relative_gap": gap.relative,
                                   "screened": int(features - kept.sum()), "time": time.perf_counter() - start})
                log.row(outer, len(columns), int(features - kept.sum()), iterations, gap.primal, gap.gap,
                        gap.relative, outer_rows[-1]["time"])
                break
    finally:
        signals.restore()
        if own_reducer:
            reducer.close()
    gather_time = cache.time - cache_time_before
    host_x = np.asarray(backend.to_host(x[:features]))
    gradient = correlation / gap.scale if gap.scale else correlation  # -grad of the loss at x (penalized)
    kkt = float(np.abs(host_x - np.asarray(backend.to_host(
        penalty_object.prox(xp.asarray(host_x + gradient), 1.0)))).max()) if features else 0.0
    if result is None:  # certified at the start (the warm start, or 0 above lambda_max): no ADMM iteration
        result = ADMMResult(x=x, objective=gap.primal, iterations=0, status=status, history={}, objective_history={},
                            timings={}, info={"rho_final": rho, "rho_changes": 0, "ranks": comm.size,
                                              "reducer": getattr(reducer, "name", str(reducer)),
                                              "intercept": intercept, "loss": problem.loss,
                                              "backend": xp.__name__}, u=u)
    lam_value = options["lam"]
    result.x, result.u, result.gap, result.relative_gap = x, u, gap.gap, gap.relative
    result.iterations, result.status, result.objective = iterations, status, gap.primal
    result.history = history or result.history
    result.objective_history = {"iter": [iterations], "objective": [gap.primal]}
    result.info.update(
        problem=f"{problem.loss} + {engine_penalty.describe()}", n=shard.n, features=problem.n_features,
        rows=problem.total_rows, lambda_max=largest, lam=lam_value,
        lam_ratio=lam_value / largest if largest and lam_value is not None else None,
        gap=gap.gap, relative_gap=gap.relative, dual_objective=gap.dual, screened=int(features - kept.sum()),
        screened_columns=np.flatnonzero(~kept).tolist(),
        kkt_residual=kkt, outer_iterations=outer, working_set_sizes=[row["working_set"] for row in outer_rows[1:]],
        outer=outer_rows, working_set=True, settings=settings.as_dict(), penalty=penalty_object.name,
        resumed_at=resumed_at, blas_threads=threads.threads, blas_threads_reason=threads.reason,
        iterations_run=iterations - resumed_at,
        nonzeros=int(np.count_nonzero(host_x)) + (int(float(x[-1]) != 0) if intercept else 0))
    total = time.perf_counter() - start + (problem.setup_time if warm_start is None else 0.0)
    solve_time, gap_time = solve_time - times_before[0], gap_time - times_before[1]  # this run's, as the engine's
    result.timings = {"setup": setup_time, "gather": gather_time, "solve": solve_time, "gap": gap_time,
                      "per_iteration": solve_time / max(iterations - resumed_at, 1),
                      "x_step": result.timings.get("x_step", 0.0),
                      "communication": result.timings.get("communication", 0.0), "total": total}
    log.footer([f"status:      {status} after {outer} outer and {iterations} ADMM iterations",
                f"objective:   {gap.primal:.12e}",
                f"optimality:  KKT residual ||x - prox_g(x - grad f(x))||_inf = {kkt:.3e}",
                f"certificate: duality gap {gap.gap:.3e} (relative {gap.relative:.3e}), "
                f"dual objective {gap.dual:.12e}",
                f"nonzeros:    {result.info['nonzeros']} of {shard.n}; screened {result.info['screened']}",
                f"time:        {total:.3f} s (setup {setup_time:.3f}, gather {gather_time:.3f}, "
                f"ADMM {solve_time:.3f}, gaps {gap_time:.3f})"
                + (f"; this run's, resumed at iteration {resumed_at}" if resumed else "")])
    return result


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


def _outer_log(enabled):
    from ..core.log import IterationLog
    return IterationLog(enabled, (("outer", "5d"), ("|W|", "6d"), ("screened", "8d"), ("iter", "7d"),
                                  ("objective", "14.8e"), ("gap", "10.3e"), ("rel_gap", "10.3e"), ("time(s)", "9.3f")))
