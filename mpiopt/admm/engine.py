"""Consensus ADMM engine (Boyd et al. 2011, sections 3.3, 7.1 and 8.2).

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
the three sums are one allreduce of three doubles.  Both all-reduces go
through the reducer named in the settings (mpiopt.collectives; default auto).  Ranks without rows take no
part in the consensus (their x_i is z and their u_i stays 0), so the iterates do
not depend on how many empty ranks there are.

Per iteration, per rank: one x-step (two triangular solves for a tall shard),
O(n) vector work, one allreduce of n doubles and one of 3.
"""
import math
import time

from mpi4py import MPI

from ..collectives import get_reducer
from .printing import IterationLog
from .result import ADMMResult


class ConsensusADMM:
    """Runs consensus ADMM for one loss shard per rank and one penalty on z."""

    def __init__(self, loss, penalty, settings, comm, xp):
        self.loss = loss
        self.penalty = penalty
        self.settings = settings
        self.comm = comm
        self.xp = xp
        self.active_ranks = comm.allreduce(int(loss.active), op=MPI.SUM)
        # Sizes are fixed by construction (n and 3), so the per-call collective check is skipped.
        self.reducer = get_reducer(settings.reducer, comm, check=False)

    def objective(self, z):
        """Global objective sum_i f_i(z) + g(z) (one scalar allreduce)."""
        return self.comm.allreduce(self.loss.value(z), op=MPI.SUM) + self.penalty.value(z)

    def solve(self, setup_time, info, banner_lines, title):
        xp, s, loss = self.xp, self.settings, self.loss
        n = loss.n
        count = self.active_ranks
        rho = s.rho
        log = IterationLog(s.verbose and self.comm.rank == 0)
        log.banner(title, banner_lines)

        z = xp.zeros(n)
        u = xp.zeros(n)
        x = z
        sums = xp.zeros(n)
        scalars = xp.zeros(3)
        history = {key: [] for key in ("iter", "r_norm", "eps_pri", "s_norm", "eps_dual", "rho", "time")}
        objective_history = {"iter": [], "objective": []}
        x_time = comm_time = 0.0
        sqrt_count_n = math.sqrt(count * n)
        status = "max_iter"
        start = time.perf_counter()
        iteration = 0
        for iteration in range(1, s.max_iter + 1):
            tick = time.perf_counter()
            if loss.active:
                x = loss.prox(z - u)
                x_relaxed = s.alpha * x + (1.0 - s.alpha) * z
                sums[...] = x_relaxed + u
            else:
                sums[...] = 0.0
            tock = time.perf_counter()
            x_time += tock - tick
            self.reducer.allreduce(sums, sums)
            comm_time += time.perf_counter() - tock

            z_previous = z
            z = self.penalty.prox(sums / count, 1.0 / (count * rho))
            if loss.active:
                u = u + x_relaxed - z
                difference = x - z
                scalars[0] = float(difference @ difference)
                scalars[1] = float(x @ x)
                scalars[2] = float(u @ u)
            else:
                x = z
                scalars[...] = 0.0
            tock = time.perf_counter()
            self.reducer.allreduce(scalars, scalars)
            comm_time += time.perf_counter() - tock

            step = z - z_previous
            z_norm = float(xp.sqrt(z @ z))
            r_norm = math.sqrt(float(scalars[0]))
            s_norm = rho * math.sqrt(count) * float(xp.sqrt(step @ step))
            eps_pri = sqrt_count_n * s.eps_abs + s.eps_rel * max(math.sqrt(float(scalars[1])),
                                                                 math.sqrt(count) * z_norm)
            eps_dual = sqrt_count_n * s.eps_abs + s.eps_rel * rho * math.sqrt(float(scalars[2]))
            elapsed = time.perf_counter() - start
            for key, value in zip(history, (iteration, r_norm, eps_pri, s_norm, eps_dual, rho, elapsed)):
                history[key].append(value)

            if r_norm <= eps_pri and s_norm <= eps_dual:
                status = "converged"
            elif s.time_limit and elapsed >= s.time_limit:
                status = "time_limit"
            finished = status != "max_iter" or iteration == s.max_iter
            if iteration == 1 or iteration % s.log_every == 0 or finished:
                objective = self.objective(z)
                objective_history["iter"].append(iteration)
                objective_history["objective"].append(objective)
                log.row(iteration, objective, r_norm, eps_pri, s_norm, eps_dual, rho, elapsed)
            if finished:
                break

        solve_time = time.perf_counter() - start
        self.reducer.close()
        timings = {
            "setup": setup_time,
            "solve": solve_time,
            "per_iteration": solve_time / max(iteration, 1),
            "x_step": x_time,
            "communication": comm_time,
            "total": setup_time + solve_time,
        }
        result = ADMMResult(x=z, objective=objective_history["objective"][-1], iterations=iteration,
                            status=status, history=history, objective_history=objective_history,
                            timings=timings, info=info)
        log.footer(result)
        return result
