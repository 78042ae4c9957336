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
O(n) vector work, one allreduce of n doubles and one of five.
"""
import math
import signal
import time

from mpi4py import MPI

from ..collectives import get_reducer
from .anderson import AndersonAccelerator
from .printing import IterationLog
from .result import ADMMResult

HISTORY = ("iter", "r_norm", "eps_pri", "s_norm", "eps_dual", "rho", "time")


class ConsensusADMM:
    """Runs consensus ADMM for one loss shard per rank and one penalty on z."""

    def __init__(self, loss, penalty, settings, comm, xp):
        self.loss, self.penalty, self.settings, self.comm, self.xp = loss, penalty, settings, comm, xp
        self.active_ranks = comm.allreduce(int(loss.active), op=MPI.SUM)
        # Sizes are fixed by construction (n and 5), so the per-call collective check is skipped.
        self.reducer = get_reducer(settings.reducer, comm, check=False)
        self.rho = settings.rho if settings.rho is not None else self.default_rho()
        n = loss.n
        self.z, self.u, self.x = xp.zeros(n), xp.zeros(n), xp.zeros(n)
        self.z_plain = self.z  # the last plain iterate (the answer), when Anderson extrapolates self.z
        self.iteration = 0
        self.status = None  # "converged" once converged: a resumed converged run does not iterate again
        self.previous_residuals = (math.inf, math.inf)
        self.history = {key: [] for key in HISTORY}
        self.objective_history = {"iter": [], "objective": []}
        self.rho_changes = 0
        self.checkpointer = None
        self.anderson = AndersonAccelerator(settings.anderson, comm, self.active_ranks) if settings.anderson else None

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
        self.reducer.allreduce(gradient, gradient)
        return float(xp.abs(z - self.penalty.prox(z - gradient, 1.0)).max())

    def state(self):
        """Everything the iteration depends on, for a checkpoint."""
        return {"z": self.z, "z_plain": self.z_plain, "u": self.u, "x": self.x, "rho": self.rho,
                "iteration": self.iteration, "status": self.status,
                "previous_residuals": self.previous_residuals, "history": self.history,
                "objective_history": self.objective_history, "loss": self.loss.state(),
                "anderson": self.anderson.state() if self.anderson else {}, "rho_changes": self.rho_changes}

    def restore(self, state):
        xp = self.xp
        self.z, self.z_plain, self.u, self.x = (xp.asarray(state[key], dtype=float)
                                                for key in ("z", "z_plain", "u", "x"))
        self.rho, self.iteration = float(state["rho"]), int(state["iteration"])
        self.status = state.get("status")
        self.previous_residuals = tuple(float(v) for v in state["previous_residuals"])
        self.history = {key: list(values) for key, values in state["history"].items()}
        self.objective_history = {key: list(values) for key, values in state["objective_history"].items()}
        self.rho_changes = int(state["rho_changes"])
        self.loss.restore(state["loss"])
        if self.anderson is not None:
            self.anderson.restore(state.get("anderson", {}))

    def _adapt_rho(self, r_norm, s_norm, x_norm, z_norm, u_norm):
        s, rho = self.settings, self.rho
        if s.adaptive_rho == "none" or self.iteration % s.adaptive_rho_interval:
            return rho
        tiny = 1e-300
        if s.adaptive_rho == "balance":
            proposal = rho * 2.0 if r_norm > 10 * s_norm else rho / 2.0 if s_norm > 10 * r_norm else rho
            return proposal
        primal = r_norm / max(x_norm, math.sqrt(self.active_ranks) * z_norm, tiny)
        dual = s_norm / max(rho * u_norm, tiny)
        if primal <= 0 or dual <= 0:
            return rho
        proposal = rho * math.sqrt(primal / dual)
        factor = s.adaptive_rho_tolerance
        return proposal if proposal > factor * rho or proposal < rho / factor else rho

    def solve(self, setup_time, info, banner_lines, title):
        xp, s, loss, comm = self.xp, self.settings, self.loss, self.comm
        n, count = loss.n, self.active_ranks
        log = IterationLog(s.verbose and comm.rank == 0)
        log.banner(title, banner_lines)
        resumed_at = self.iteration
        if self.status == "converged" or resumed_at >= s.max_iter:
            log.note(f"resumed at iteration {resumed_at} ({'converged' if self.status == 'converged' else 'max_iter'})"
                     ", nothing left to do")
        loss.factorize(self.rho)

        z, u, x = self.z, self.u, self.x
        sums = xp.zeros(n)
        scalars = xp.zeros(5)
        x_time = comm_time = 0.0
        sqrt_count_n = math.sqrt(count * n)
        status = "converged" if self.status == "converged" else "max_iter"
        signals = _SignalFlags(self.checkpointer is not None)
        anderson = self.anderson
        start = time.perf_counter()
        elapsed_before = self.history["time"][-1] if self.history["time"] else 0.0
        try:
            while status == "max_iter" and self.iteration < s.max_iter:
                self.iteration += 1
                iteration, rho = self.iteration, self.rho
                tick = time.perf_counter()
                if loss.active:
                    smallest = min(self.previous_residuals)
                    tolerance = max(s.x_tol_min, s.x_tol_factor * smallest) \
                        if loss.iterative and math.isfinite(smallest) else None
                    x = loss.prox(z - u, tolerance)
                    x_relaxed = z + s.alpha * (x - z)
                    xp.add(x_relaxed, u, out=sums)
                else:
                    sums[...] = 0.0
                tock = time.perf_counter()
                x_time += tock - tick
                self.reducer.allreduce(sums, sums)
                comm_time += time.perf_counter() - tock

                z_previous, u_previous = z, u
                z = z_plain = self.penalty.prox(sums / count, 1.0 / (count * rho))
                if loss.active:
                    u = u + x_relaxed
                    u -= z
                    difference = x - z
                    scalars[0] = float(difference @ difference)
                    scalars[1] = float(x @ x)
                    scalars[2] = float(u @ u)
                else:
                    x = z
                    scalars[:3] = 0.0
                scalars[3], scalars[4] = signals.take()
                tock = time.perf_counter()
                self.reducer.allreduce(scalars, scalars)
                comm_time += time.perf_counter() - tock

                step = z - z_previous
                z_norm = math.sqrt(float(z @ z))
                x_norm, u_norm = math.sqrt(float(scalars[1])), math.sqrt(float(scalars[2]))
                r_norm = math.sqrt(float(scalars[0]))
                s_norm = rho * math.sqrt(count) * math.sqrt(float(step @ step))
                eps_pri = sqrt_count_n * s.eps_abs + s.eps_rel * max(x_norm, math.sqrt(count) * z_norm)
                eps_dual = sqrt_count_n * s.eps_abs + s.eps_rel * rho * u_norm
                elapsed = elapsed_before + time.perf_counter() - start
                for key, value in zip(HISTORY, (iteration, r_norm, eps_pri, s_norm, eps_dual, rho, elapsed)):
                    self.history[key].append(value)
                self.previous_residuals = (r_norm, s_norm)

                if r_norm <= eps_pri and s_norm <= eps_dual:
                    status = "converged"
                elif s.time_limit and elapsed >= s.time_limit:
                    status = "time_limit"
                elif scalars[4] > 0:
                    status = "interrupted"
                finished = status != "max_iter" or iteration == s.max_iter
                # The objective costs a pass over the Gram matrix or the rows: evaluated for the log rows
                # when the log is on (as OSQP does), and always at the end.
                if finished or (s.verbose and (iteration == 1 or iteration % s.log_every == 0)):
                    objective = self.objective(z)
                    self.objective_history["iter"].append(iteration)
                    self.objective_history["objective"].append(objective)
                    log.row(iteration, objective, r_norm, eps_pri, s_norm, eps_dual, rho, elapsed)

                if status != "converged":  # also at max_iter, so that a resumed run follows the same path
                    new_rho = self._adapt_rho(r_norm, s_norm, x_norm, z_norm, u_norm)
                    if new_rho != rho:
                        u = u * (rho / new_rho)
                        self.rho = new_rho
                        self.rho_changes += 1
                        loss.factorize(new_rho)
                        if anderson is not None:
                            anderson.reset()
                    elif anderson is not None:
                        z, u = anderson.step(z_previous, u_previous, z, u)
                self.z, self.z_plain, self.u, self.x = z, z_plain, u, x
                self.status = status if status == "converged" else None
                if self.checkpointer is not None and (finished or scalars[3] > 0 or (
                        s.checkpoint_every and iteration % s.checkpoint_every == 0)):
                    self.checkpointer.write(self.state())
                if finished:
                    break
            z_plain = self.z_plain  # also right when a run resumed at its last iteration does no iteration
            if not self.objective_history["objective"]:
                self.objective_history = {"iter": [self.iteration], "objective": [self.objective(z_plain)]}
            kkt = self.kkt_residual(z_plain)
        finally:
            signals.restore()
            self.reducer.close()

        solve_time = time.perf_counter() - start
        iterations_here = max(self.iteration - resumed_at, 1)
        timings = {
            "setup": setup_time,
            "solve": solve_time,
            "per_iteration": solve_time / iterations_here,
            "x_step": x_time,
            "communication": comm_time,
            "total": setup_time + solve_time,
        }
        info = dict(info, rho_final=self.rho, rho_changes=self.rho_changes, kkt_residual=kkt,
                    nonzeros=int(xp.count_nonzero(z_plain)), iterations_run=self.iteration - resumed_at)
        if loss.iterative:
            info["inner_iterations"] = comm.allreduce(getattr(loss, "inner_iterations", 0))
        # The answer is the last plain ADMM iterate (a prox output: sparse, feasible); the engine's own
        # state may have been extrapolated by Anderson acceleration for the next iteration.
        result = ADMMResult(x=z_plain, objective=self.objective_history["objective"][-1], iterations=self.iteration,
                            status=status, history=self.history, objective_history=self.objective_history,
                            timings=timings, info=info)
        log.footer(result)
        return result


class _SignalFlags:
    """SIGUSR1 (checkpoint now) and SIGTERM (checkpoint and stop) set flags read once per iteration."""

    def __init__(self, enabled):
        self.usr1 = self.term = False
        self.previous = {}
        if enabled:
            for number, handler in ((signal.SIGUSR1, self._on_usr1), (signal.SIGTERM, self._on_term)):
                try:
                    self.previous[number] = signal.signal(number, handler)
                except ValueError:  # not the main thread: no signal handling
                    pass

    def _on_usr1(self, *_):
        self.usr1 = True

    def _on_term(self, *_):
        self.term = True

    def take(self):
        flags = (float(self.usr1), float(self.term))
        self.usr1 = False
        return flags

    def restore(self):
        for number, handler in self.previous.items():
            signal.signal(number, handler)
