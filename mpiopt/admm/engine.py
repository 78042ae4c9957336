"""Consensus ADMM engine (Boyd et al. 2011, sections 3.3, 3.4, 7.1 and 8.2).

Each rank i holds a data term f_i (a *loss shard*, which owns its x-step and its
cached factorization); a *penalty* g with a proximal operator acts on the
consensus variable z.  With the N ranks that hold data, the scaled iteration is

    x_i     = argmin f_i(x) + (rho/2) ||x - (z - u_i)||^2          (local, cached factor)
    xh_i    = alpha x_i + (1 - alpha) z                             (over-relaxation)
    z       = prox_{g / (N rho)}( (1/N) sum_i (xh_i + u_i) )        (one allreduce of n doubles)
    u_i     = u_i + xh_i - z

and it stops when the global primal and dual residuals

    r = sqrt(sum_i ||x_i - z||^2),   s = rho sqrt(N) ||z - z_prev||

fall below eps_pri = sqrt(N n) eps_abs + eps_rel max(sqrt(sum_i ||x_i||^2), sqrt(N) ||z||)
and eps_dual = sqrt(N n) eps_abs + eps_rel rho sqrt(sum_i ||u_i||^2) (section 3.3.1);
the three sums travel in one small allreduce (with the checkpoint-signal flags).
Both all-reduces go through the reducer named in the settings
(mpiopt.collectives; default auto).  Ranks without rows take no part in the
consensus (their x_i is z and their u_i stays 0).

With ``anderson`` = m > 0, type-II Anderson acceleration with memory m
extrapolates (z, u) from the last m iterations (anderson.py); the stopping
rule is always evaluated on the plain ADMM step.

rho adapts every ``adaptive_rho_interval`` iterations: ``osqp`` proposes
rho sqrt(primal_rel / dual_rel) with primal_rel = r / max(||x||, sqrt(N)||z||) and
dual_rel = s / (rho ||u||) (the rule of OSQP, Stellato et al. 2020) and adopts it
only when it changes rho by more than ``adaptive_rho_tolerance``; ``balance`` is
residual balancing (section 3.4.1: x2 when r > 10 s, /2 when s > 10 r).  On a
change each loss refactorizes and u is rescaled by rho_old / rho_new, which
keeps the unscaled dual variable rho u.

Per iteration, per rank: one x-step (two triangular solves for a tall shard),
O(n) vector work, one allreduce of n doubles and one of six (the residual sums, the signal flags
and the time limit, agreed by every rank).

One code path, two backends: the vectors live in the array module ``xp`` of
the data (numpy, or CuPy with everything kept on the GPU across iterations).
The vector steps are the kernels of mpiopt.kernels.admm, whose numpy twins are
the formulas above: ``relax``, and for a penalty declaring ``SOFT_THRESHOLD`` (L1: ``threshold``)
the z- and u-steps fused into one pass (``z_u_update``); other penalties run
their prox and the u-step separately.  On the GPU the two all-reduces go
through host memory (the reducers work on numpy buffers), and only scalars
(the residual norms) come back to the host otherwise.

For the losses and penalties with a dual (gap.py: L1, elastic net, group lasso; squared, logistic, Huber) the engine
computes a duality gap (gap.py): at the end always (``result.gap``), and with
``gap_tol`` every ``gap_every`` iterations as a second stopping rule.

The loop reads as the algorithm: each step is a short method (``x_step``,
``relax``, ``z_step``, ``u_step``, ``residuals``, ``termination``,
``adapt_rho``, ``accelerate``, ``checkpoint``), in the manner of OSQP's
``auxil.c``.  The engine prints nothing itself: the caller gives it an
iteration log (mpiopt.core.log) whose banner and footer it builds.
"""
import contextlib
import dataclasses
import math
import time

import numpy as np
from mpi4py import MPI

from ..collectives import reducer_for
from ..core import backend
from ..core.signals import SignalFlags
from .anderson import AndersonAccelerator
from ..kernels import admm as kernels
from .gap import certificate_of, duality_gap
from .penalties import SOFT_THRESHOLD, capabilities_of
from .checkpoint import admm_checkpointer, join_state, split_state, validator
from .result import ADMMResult

HISTORY = ("iter", "r_norm", "eps_pri", "s_norm", "eps_dual", "rho", "time")
# How a run ended (info["stop"]) and its status word (mpiopt.core.result.STATUSES).
STATUS_OF_STOP = {"tolerances": "converged", "gap_tol": "converged", "max_iter": "max_iterations",
                  "time_limit": "time_limit", "signal": "interrupted"}


@dataclasses.dataclass
class Residuals:
    """The global residuals of one iteration and the norms the stopping rule and rho adaptation use."""
    r_norm: float
    s_norm: float
    eps_pri: float
    eps_dual: float
    x_norm: float
    z_norm: float
    u_norm: float
    checkpoint_requested: bool
    stop_requested: bool
    time_up: bool = False  # some rank's clock passed the time limit (every rank stops at the same iteration)


class ConsensusADMM:
    """Runs consensus ADMM for one loss shard per rank and one penalty on z.

    ``log``: an IterationLog (mpiopt.core.log) with the columns of HISTORY's
    order (iter, objective, r_norm, eps_pri, s_norm, eps_dual, rho, time), or
    None.  ``settings.reducer`` is a name or a Reducer; a Reducer given by the
    caller is used as it is and left open (the caller owns it); one built from a
    name is closed by :meth:`close`, which :meth:`solve` calls at its end (use
    the engine in a ``with`` block so that an error before it closes it too).
    """

    def __init__(self, loss, penalty, settings, comm, xp, log=None):
        self.loss, self.penalty, self.settings, self.comm, self.xp = loss, penalty, settings, comm, xp
        self.log = log
        self.active_ranks = comm.allreduce(int(loss.active), op=MPI.SUM)
        self.rho = settings.rho if settings.rho is not None else self.default_rho()
        n = loss.n
        self.z, self.u, self.x = xp.zeros(n), xp.zeros(n), xp.zeros(n)
        self.z_plain = self.z  # the last plain iterate (the answer), when Anderson extrapolates self.z
        self.iteration = 0
        self.status = None  # "converged" once converged: a resumed converged run does not iterate again
        self.stop = None    # with it, the rule that was met (info["stop"]: "tolerances" or "gap_tol")
        self.previous_residuals = (math.inf, math.inf)
        self.history = {key: [] for key in HISTORY}
        self.objective_history = {"iter": [], "objective": []}
        # the duality gap (gap.py) where the loss and penalty have a dual, else None
        self.gap_available = certificate_of(loss, penalty) is not None
        self.gap_checked = settings.gap_tol is not None and self.gap_available  # a stopping rule on the gap
        if self.gap_checked:
            self.history["gap"] = []
        self.last_gap = None  # (iteration, Gap) of the latest evaluation
        self.rho_changes = 0
        self.checkpointer = None
        self.anderson = AndersonAccelerator(settings.anderson, comm, xp) if settings.anderson else None
        self.x_time = self.comm_time = self.gap_time = 0.0
        self._sums, self._scalars = xp.zeros(n), np.zeros(6)  # the six scalars live on the host
        # Last, so that nothing after it can fail and leave it open.  Sizes are fixed by construction (n and 6),
        # so the per-call collective check is skipped.
        self.resources = contextlib.ExitStack()
        self.reducer = self.resources.enter_context(reducer_for(settings.reducer, comm, check=False))

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    # -- set-up ------------------------------------------------------------------
    def default_rho(self):
        """The mean, over the ranks holding data, of each shard's Hessian scale per coordinate."""
        local = self.loss.curvature() if self.loss.active else 0.0
        total = self.comm.allreduce(local, op=MPI.SUM)
        return total / max(self.active_ranks, 1) if total > 0 else 1.0

    def warm_start(self, z=None, u=None, rho=None):
        """Start from a previous solution (the regularization path does this)."""
        if rho is not None:
            self.rho = float(rho)
        if z is not None:
            self.z = self.xp.array(z, dtype=float, copy=True)
            self.x = self.z.copy()
            self.z_plain = self.z
        if u is not None:
            self.u = self.xp.array(u, dtype=float, copy=True)

    def use_checkpoint(self, path, fingerprint):
        """Checkpoint to ``path`` and resume from it when it exists (collective); returns whether it resumed."""
        self.checkpointer = admm_checkpointer(path, self.comm, fingerprint)
        return self.checkpointer.restore(lambda *parts: self.restore(join_state(*parts)), validator(self.loss.n))

    def state(self):
        """Everything the iteration depends on, for a checkpoint."""
        return {"z": self.z, "z_plain": self.z_plain, "u": self.u, "x": self.x, "rho": self.rho,
                "iteration": self.iteration, "status": self.status, "stop": self.stop,
                "previous_residuals": self.previous_residuals, "history": self.history,
                "objective_history": self.objective_history, "loss": self.loss.state(),
                "anderson": self.anderson.state() if self.anderson else {}, "rho_changes": self.rho_changes}

    def restore(self, state):
        xp = self.xp
        self.z, self.z_plain, self.u, self.x = (xp.asarray(state[key], dtype=float)
                                                for key in ("z", "z_plain", "u", "x"))
        self.rho, self.iteration = float(state["rho"]), int(state["iteration"])
        self.status = state.get("status")
        self.stop = state.get("stop") or ("tolerances" if self.status == "converged" else None)  # older files
        self.previous_residuals = tuple(float(v) for v in state["previous_residuals"])
        self.history = {key: list(values) for key, values in state["history"].items()}
        if self.gap_checked and "gap" not in self.history:  # a checkpoint written without gap_tol
            self.history["gap"] = [math.nan] * len(self.history["iter"])
        self.objective_history = {key: list(values) for key, values in state["objective_history"].items()}
        self.rho_changes = int(state["rho_changes"])
        self.loss.restore(state["loss"])
        if self.anderson is not None:
            self.anderson.restore(state.get("anderson", {}))

    # -- measures of the answer --------------------------------------------------
    def objective(self, z):
        """Global objective sum_i f_i(z) + g(z) (one scalar allreduce)."""
        return self.comm.allreduce(self.loss.value(z), op=MPI.SUM) + self.penalty.value(z)

    def kkt_residual(self, z):
        """||z - prox_g(z - grad f(z))||_inf with f = sum_i f_i: 0 exactly at a minimizer, for any loss and penalty.

        The fixed-point residual of a proximal-gradient step of length 1; costs one
        gradient per shard (a pass over its rows or its Gram matrix) and one
        allreduce of n doubles, so it is computed once, at the end.
        """
        xp = self.xp
        local = self.loss.gradient(z) if self.loss.active else xp.zeros(self.loss.n)
        gradient = xp.array(local, dtype=float)
        self.allreduce(gradient)
        return float(xp.abs(z - self.penalty.prox(z - gradient, 1.0)).max())

    def duality_gap(self, z):
        """The Gap (primal, dual, gap, relative) at z, or None when unavailable (collective; gap.py)."""
        if not self.gap_available:
            return None
        tock = time.perf_counter()
        gap = duality_gap(self.loss, self.penalty, z, self.comm)
        self.gap_time += time.perf_counter() - tock
        self.last_gap = (self.iteration, gap)
        return gap

    def allreduce(self, buffer):
        """Sum ``buffer`` over the ranks, in place, through the reducer; a GPU array is staged through host
        memory (the reducers work on numpy buffers), except at one rank, where there is nothing to add."""
        if backend.is_numpy(self.xp):
            self.reducer.allreduce(buffer, buffer)
        elif self.comm.size == 1:  # the sum over one rank is the buffer: no round trip through the host
            return
        else:
            host = backend.to_host(buffer)
            self.reducer.allreduce(host, host)
            buffer.set(host)

    # -- the steps of one iteration ----------------------------------------------
    def x_step(self, z, u):
        """x_i = argmin f_i(x) + (rho/2)||x - (z - u_i)||^2, inexact x-steps to a tolerance that tightens."""
        s, loss = self.settings, self.loss
        smallest = min(self.previous_residuals)
        tolerance = max(s.x_tol_min, s.x_tol_factor * smallest) \
            if loss.iterative and math.isfinite(smallest) else None
        return loss.prox(z - u, tolerance)

    def relax(self, x, z):
        """Over-relaxation xh_i = alpha x_i + (1 - alpha) z, computed as z + alpha (x - z) (one kernel)."""
        return kernels.relax(x, z, self.settings.alpha)

    def reduce_sums(self, sums):
        """The allreduce of n doubles of the z-step (timed as communication)."""
        tock = time.perf_counter()
        self.allreduce(sums)
        self.comm_time += time.perf_counter() - tock

    def z_step(self, sums, rho):
        """z = prox_{g / (N rho)}(mean of xh_i + u_i): one allreduce of n doubles, then the penalty's prox."""
        self.reduce_sums(sums)
        count = self.active_ranks
        return self.penalty.prox(sums / count, 1.0 / (count * rho))

    def z_u_step(self, sums, rho, u, x_relaxed):
        """The z-step then the u-step; for soft-thresholding penalties (L1) fused into one pass
        (kernels.z_u_update, the same values as the two steps)."""
        count = self.active_ranks
        step = 1.0 / (count * rho)
        fused = self.penalty.threshold(step) if SOFT_THRESHOLD in capabilities_of(self.penalty) else None
        if fused is None:
            z = self.z_step(sums, rho)
            return z, self.u_step(u, x_relaxed, z)
        self.reduce_sums(sums)
        kappa, free = fused
        return kernels.z_u_update(sums, count, kappa, u, x_relaxed, free)

    def u_step(self, u, x_relaxed, z):
        """u_i = u_i + xh_i - z."""
        u = u + x_relaxed
        u -= z
        return u

    def residuals(self, x, z, u, z_previous, rho, signals, time_up=False):
        """Global r, s and their tolerances (Boyd et al. 3.3.1) from one allreduce of six numbers
        (||x_i - z||^2, ||x_i||^2, ||u_i||^2 summed, the signal flags, and whether this rank's clock passed
        the time limit: the ranks' clocks differ, so the limit is one decision for all)."""
        s, count = self.settings, self.active_ranks
        scalars = self._scalars
        # The five dot products, then one copy to the host (a GPU syncs once per iteration here, not five times).
        step = z - z_previous
        dots = [z @ z, step @ step]
        if self.loss.active:
            difference = x - z
            dots = [difference @ difference, x @ x, u @ u] + dots
        if backend.is_numpy(self.xp):
            values = [float(value) for value in dots]
        else:
            values = backend.to_host(self.xp.stack(dots)).tolist()
        z_squared, step_squared = values[-2:]
        scalars[:3] = values[:3] if self.loss.active else 0.0
        scalars[3], scalars[4] = signals.take()
        scalars[5] = float(time_up)
        tock = time.perf_counter()
        self.reducer.allreduce(scalars, scalars)
        self.comm_time += time.perf_counter() - tock
        z_norm = math.sqrt(z_squared)
        x_norm, u_norm = math.sqrt(float(scalars[1])), math.sqrt(float(scalars[2]))
        sqrt_count_n = math.sqrt(count * self.loss.n)
        return Residuals(
            r_norm=math.sqrt(float(scalars[0])),
            s_norm=rho * math.sqrt(count) * math.sqrt(step_squared),
            eps_pri=sqrt_count_n * s.eps_abs + s.eps_rel * max(x_norm, math.sqrt(count) * z_norm),
            eps_dual=sqrt_count_n * s.eps_abs + s.eps_rel * rho * u_norm,
            x_norm=x_norm, z_norm=z_norm, u_norm=u_norm,
            checkpoint_requested=scalars[3] > 0, stop_requested=scalars[4] > 0, time_up=scalars[5] > 0)

    def gap_step(self, z):
        """With ``gap_tol``, the duality gap at z every ``gap_every`` iterations, else None."""
        if not self.gap_checked or self.iteration % self.settings.gap_every:
            return None
        return self.duality_gap(z)

    def termination(self, residuals, elapsed, gap=None):
        """Why to stop (a key of STATUS_OF_STOP): "tolerances" (the residual rule), "gap_tol" (the relative
        duality gap <= ``gap_tol``), "time_limit", "signal" (SIGTERM), or None to go on."""
        s = self.settings
        if residuals.r_norm <= residuals.eps_pri and residuals.s_norm <= residuals.eps_dual:
            return "tolerances"
        if gap is not None and gap.relative <= s.gap_tol:
            return "gap_tol"
        if s.time_limit and residuals.time_up:  # agreed in the residuals' all-reduce
            return "time_limit"
        if residuals.stop_requested:
            return "signal"
        return None

    def adapt_rho(self, residuals):
        """The next rho: OSQP's rule or residual balancing every ``adaptive_rho_interval`` iterations."""
        s, rho = self.settings, self.rho
        if s.adaptive_rho == "none" or self.iteration % s.adaptive_rho_interval:
            return rho
        r_norm, s_norm = residuals.r_norm, residuals.s_norm
        if s.adaptive_rho == "balance":
            return rho * 2.0 if r_norm > 10 * s_norm else rho / 2.0 if s_norm > 10 * r_norm else rho
        tiny = 1e-300
        primal = r_norm / max(residuals.x_norm, math.sqrt(self.active_ranks) * residuals.z_norm, tiny)
        dual = s_norm / max(rho * residuals.u_norm, tiny)
        if primal <= 0 or dual <= 0:
            return rho
        proposal = rho * math.sqrt(primal / dual)
        factor = s.adaptive_rho_tolerance
        return proposal if proposal > factor * rho or proposal < rho / factor else rho

    def change_rho(self, new_rho, u):
        """Adopt ``new_rho``: refactorize, rescale u by rho_old / rho_new (keeping rho u), reset acceleration."""
        u = u * (self.rho / new_rho)
        self.rho = new_rho
        self.rho_changes += 1
        self.loss.factorize(new_rho)
        if self.anderson is not None:
            self.anderson.reset()
        return u

    def accelerate(self, z_previous, u_previous, z, u):
        """Anderson's extrapolation of (z, u), or the plain step without acceleration."""
        if self.anderson is None:
            return z, u
        return self.anderson.step(z_previous, u_previous, z, u)

    def checkpoint(self, finished, residuals):
        """Write a checkpoint at the end, on SIGUSR1/SIGTERM, and every ``checkpoint_every`` iterations."""
        every = self.settings.checkpoint_every
        if self.checkpointer is not None and (finished or residuals.checkpoint_requested or (
                every and self.iteration % every == 0)):
            self.checkpointer.write(*split_state(self.state()))

    def record(self, residuals, elapsed, gap=None):
        for key, value in zip(HISTORY, (self.iteration, residuals.r_norm, residuals.eps_pri, residuals.s_norm,
                                        residuals.eps_dual, self.rho, elapsed)):
            self.history[key].append(value)
        if "gap" in self.history:  # NaN at the iterations without an evaluation
            self.history["gap"].append(gap.gap if gap is not None else math.nan)
        self.previous_residuals = (residuals.r_norm, residuals.s_norm)

    def log_row(self, z, residuals, elapsed, finished):
        """The objective costs a pass over the Gram matrix or the rows: evaluated for the log rows when the
        log is on (as OSQP does), and always at the end; so is the duality gap, when available, for a log
        row (the log then has a gap column)."""
        s = self.settings  # the objective is collective: every rank evaluates it at the same iterations
        if finished or (s.verbose and (self.iteration == 1 or self.iteration % s.log_every == 0)):
            objective = self.objective(z)
            self.objective_history["iter"].append(self.iteration)
            self.objective_history["objective"].append(objective)
            if s.verbose and self.gap_available:
                gap = self.last_gap[1] if self.last_gap and self.last_gap[0] == self.iteration \
                    else self.duality_gap(z)
            if self.log is not None:
                values = (self.iteration, objective, residuals.r_norm, residuals.eps_pri, residuals.s_norm,
                          residuals.eps_dual, self.rho, elapsed)
                self.log.row(*values, *((gap.gap,) if s.verbose and self.gap_available else ()))

    # -- the loop ----------------------------------------------------------------
    def iterate(self, signals, start, elapsed_before):
        """One ADMM iteration; returns (why it stops, a key of STATUS_OF_STOP, or None; finished)."""
        loss = self.loss
        self.iteration += 1
        rho, z, u = self.rho, self.z, self.u
        tick = time.perf_counter()
        if loss.active:
            x = self.x_step(z, u)
            x_relaxed = self.relax(x, z)
            self.xp.add(x_relaxed, u, out=self._sums)
        else:
            self._sums[...] = 0.0
        self.x_time += time.perf_counter() - tick
        z_previous, u_previous = z, u
        if loss.active:
            z, u = self.z_u_step(self._sums, rho, u, x_relaxed)
        else:
            z = x = self.z_step(self._sums, rho)
        z_plain = z
        time_up = bool(self.settings.time_limit) and \
            elapsed_before + time.perf_counter() - start >= self.settings.time_limit
        residuals = self.residuals(x, z, u, z_previous, rho, signals, time_up)
        gap = self.gap_step(z)
        elapsed = elapsed_before + time.perf_counter() - start
        self.record(residuals, elapsed, gap)
        stop = self.termination(residuals, elapsed, gap)
        converged = STATUS_OF_STOP.get(stop) == "converged"
        finished = stop is not None or self.iteration == self.settings.max_iter
        self.log_row(z, residuals, elapsed, finished)
        if not converged:  # also at max_iter, so that a resumed run follows the same path
            new_rho = self.adapt_rho(residuals)
            if new_rho != rho:
                u = self.change_rho(new_rho, u)
            else:
                z, u = self.accelerate(z_previous, u_previous, z, u)
        self.z, self.z_plain, self.u, self.x = z, z_plain, u, x
        self.status, self.stop = ("converged", stop) if converged else (None, None)
        self.checkpoint(finished, residuals)
        return stop, finished

    def solve(self):
        """Iterate until the stopping rule, a limit or SIGTERM; returns an ADMMResult (the engine's part of
        ``info`` and ``timings``: the caller adds the problem's description and the setup time).  The
        reducer built from a name is closed at the end."""
        s = self.settings
        resumed_at = self.iteration
        if self.log is not None and (self.status == "converged" or resumed_at >= s.max_iter):
            self.log.note(f"resumed at iteration {resumed_at} "
                          f"({'converged' if self.status == 'converged' else 'max_iter'}), nothing left to do")
        self.loss.factorize(self.rho)
        stop = self.stop if self.status == "converged" else None
        start = time.perf_counter()
        elapsed_before = self.history["time"][-1] if self.history["time"] else 0.0
        signals = SignalFlags(self.checkpointer is not None)
        try:
            while stop is None and self.iteration < s.max_iter:
                stop, finished = self.iterate(signals, start, elapsed_before)
                if finished:
                    break
            if not self.objective_history["objective"]:  # a run resumed at its end does no iteration
                self.objective_history = {"iter": [self.iteration], "objective": [self.objective(self.z_plain)]}
            kkt = self.kkt_residual(self.z_plain)
            gap = self.last_gap[1] if self.last_gap and self.last_gap[0] == self.iteration \
                else self.duality_gap(self.z_plain)  # the final certificate
        finally:
            signals.restore()
            self.close()
        return self.result(stop or "max_iter", time.perf_counter() - start, self.iteration - resumed_at, kkt, gap)

    def close(self):
        """Close the reducer built from a name (a caller's Reducer stays open)."""
        self.resources.close()

    def result(self, stop, solve_time, ran, kkt, gap):
        """The ADMMResult of a run that stopped for ``stop`` after ``ran`` iterations of ``solve_time``
        seconds, with the final KKT residual and Gap (or None)."""
        info = {"rho_final": self.rho, "rho_changes": self.rho_changes, "kkt_residual": kkt,
                "nonzeros": int(self.xp.count_nonzero(self.z_plain)), "iterations_run": ran,
                "gap": None if gap is None else gap.gap, "relative_gap": None if gap is None else gap.relative,
                "dual_objective": None if gap is None else gap.dual, "stop": stop}
        if self.loss.iterative:
            info["inner_iterations"] = self.comm.allreduce(getattr(self.loss, "inner_iterations", 0))
        timings = {"solve": solve_time, "per_iteration": solve_time / max(ran, 1), "x_step": self.x_time,
                   "communication": self.comm_time, "gap": self.gap_time}
        # The answer is the last plain ADMM iterate (a prox output: sparse, feasible); the engine's own
        # state may have been extrapolated by Anderson acceleration for the next iteration.
        return ADMMResult(x=self.z_plain, objective=self.objective_history["objective"][-1],
                          iterations=self.iteration, status=STATUS_OF_STOP[stop], history=self.history,
                          objective_history=self.objective_history, timings=timings, info=info, u=self.u,
                          gap=info["gap"], relative_gap=info["relative_gap"])
