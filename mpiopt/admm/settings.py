"""Solver settings for consensus ADMM, validated once (the OSQP/SCS pattern).

Defaults live here and nowhere else.  Unknown settings are rejected by name
(mpiopt.core.settings.Settings).
"""
import dataclasses

from ..collectives import REDUCERS, Reducer
from ..core.settings import Settings, is_integer, is_number
from ..core.threads import threads_problem

ADAPTIVE_RHO = ("none", "osqp", "balance")
INNER_SOLVERS = ("auto", "admm", "prox_newton")


@dataclasses.dataclass(frozen=True)
class ADMMSettings(Settings):
    label = "ADMM"
    choices = {"adaptive_rho": ADAPTIVE_RHO, "reducer": lambda: list(REDUCERS), "inner_solver": INNER_SOLVERS}

    rho: float = None         # initial penalty parameter; None: from the data scale (mean Hessian diagonal)
    alpha: float = 1.6        # over-relaxation, in (0, 2); 1 means none
    eps_abs: float = 1e-6     # absolute tolerance of the stopping rule (Boyd et al. 3.3.1)
    eps_rel: float = 1e-6     # relative tolerance of the stopping rule
    max_iter: int = 10000     # iteration limit ("max_iterations" when it stops there)
    gap_tol: float = None     # also stop ("converged") when the relative duality gap is <= this (where the loss
                              # and penalty have a dual: gap.py); None: the residual rule only
    gap_every: int = 10       # with gap_tol, evaluate the gap every this many iterations (a pass over the rows)
    time_limit: float = 0.0   # seconds for the iterations; 0 means none
    verbose: bool = False     # iteration log on rank 0
    log_every: int = 25       # with verbose, log (and evaluate the objective) every this many iterations
    reducer: str = "auto"     # all-reduce of the z-step: a registered name or a Reducer (mpiopt.collectives)
    adaptive_rho: str = "osqp"          # "none", "osqp" (rho * sqrt(primal/dual relative residuals)), "balance"
    adaptive_rho_interval: int = 5      # check every this many iterations
    adaptive_rho_tolerance: float = 2.0  # adopt only a change by more than this factor
    anderson: int = 5           # Anderson acceleration memory (0: off); see anderson.py
    x_tol_factor: float = 0.01  # iterative x-steps stop at gradient norm x_tol_factor * min(r_norm, s_norm)
    x_tol_min: float = 1e-12    # the iterative x-steps' gradient-norm tolerance never goes below this
    screening: bool = False     # gap-safe screening before the solve (where there is a gap;
                                # off with a checkpoint); see docs/admm.md "Screening"
    working_set: bool = None    # working sets (workingset.py) where the loss and penalty have a
                                # duality gap: stop at the relative duality gap gap_tol (eps_rel if None); None: on for
                                # numpy / scipy data where the loss says so (not Huber), off on the GPU
    working_set_size: int = 10  # the first working set's size (p0 of celer and skglm)
    inner_solver: str = "auto"  # the working sets' restricted solves: "prox_newton" (proxnewton.py: a loss with
                                # a Hessian, logistic or squared, and a penalty declaring PROX_NEWTON, numpy data),
                                # "admm", or "auto": prox_newton where it applies (the squared loss: on sparse
                                # data only), else admm
    checkpoint: str = None      # npz path for checkpoints (None: none)
    checkpoint_every: int = 0   # write every this many iterations (0: only on SIGUSR1/SIGTERM)
    blas_threads: int = None    # BLAS threads per rank while solving; None: cores per rank when ranks share a
                                # node and no OMP/OPENBLAS/MKL_NUM_THREADS is set; 0: leave them (core/threads.py)

    def checks(self):
        """(ok, message) pairs; the first failing one is reported (see mpiopt.core.settings)."""
        number, integer = is_number, is_integer
        return [
            (self.rho is None or (number(self.rho) and self.rho > 0),
             f"rho must be a finite number > 0, got {self.rho!r}"),
            (number(self.alpha) and 0 < self.alpha < 2, f"alpha must be in (0, 2), got {self.alpha!r}"),
            (number(self.eps_abs) and self.eps_abs >= 0, f"eps_abs must be >= 0, got {self.eps_abs!r}"),
            (number(self.eps_rel) and self.eps_rel >= 0, f"eps_rel must be >= 0, got {self.eps_rel!r}"),
            (self.gap_tol is None or (number(self.gap_tol) and self.gap_tol >= 0),
             f"gap_tol must be a number >= 0 or None, got {self.gap_tol!r}"),
            (integer(self.gap_every) and self.gap_every >= 1,
             f"gap_every must be an integer >= 1, got {self.gap_every!r}"),
            (integer(self.max_iter) and self.max_iter >= 1, f"max_iter must be an integer >= 1, got {self.max_iter!r}"),
            (number(self.time_limit) and self.time_limit >= 0, f"time_limit must be >= 0, got {self.time_limit!r}"),
            (integer(self.log_every) and self.log_every >= 1, f"log_every must be an integer >= 1, got {self.log_every!r}"),
            (isinstance(self.reducer, Reducer) or self.reducer in REDUCERS,
             lambda: f"reducer must be one of {', '.join(REDUCERS)} or a Reducer, got {self.reducer!r}"),
            (self.adaptive_rho in ADAPTIVE_RHO,
             f"adaptive_rho must be one of {', '.join(ADAPTIVE_RHO)}, got {self.adaptive_rho!r}"),
            (integer(self.adaptive_rho_interval) and self.adaptive_rho_interval >= 1,
             f"adaptive_rho_interval must be an integer >= 1, got {self.adaptive_rho_interval!r}"),
            (number(self.adaptive_rho_tolerance) and self.adaptive_rho_tolerance >= 1,
             f"adaptive_rho_tolerance must be >= 1, got {self.adaptive_rho_tolerance!r}"),
            (integer(self.anderson) and self.anderson >= 0, f"anderson must be an integer >= 0, got {self.anderson!r}"),
            (number(self.x_tol_factor) and self.x_tol_factor > 0, f"x_tol_factor must be > 0, got {self.x_tol_factor!r}"),
            (number(self.x_tol_min) and self.x_tol_min > 0, f"x_tol_min must be > 0, got {self.x_tol_min!r}"),
            (isinstance(self.screening, bool), f"screening must be True or False, got {self.screening!r}"),
            (self.working_set is None or isinstance(self.working_set, bool),
             f"working_set must be True, False or None, got {self.working_set!r}"),
            (self.inner_solver in INNER_SOLVERS,
             f"inner_solver must be one of {', '.join(INNER_SOLVERS)}, got {self.inner_solver!r}"),
            (integer(self.working_set_size) and self.working_set_size >= 1,
             f"working_set_size must be an integer >= 1, got {self.working_set_size!r}"),
            (self.checkpoint is None or isinstance(self.checkpoint, str),
             f"checkpoint must be a path or None, got {self.checkpoint!r}"),
            (integer(self.checkpoint_every) and self.checkpoint_every >= 0,
             f"checkpoint_every must be an integer >= 0, got {self.checkpoint_every!r}"),
            (threads_problem(self.blas_threads) is None, lambda: threads_problem(self.blas_threads)),
        ]
