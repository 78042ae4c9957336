"""What every solver of this benchmark shares: benchopt's tolerance sampling on one ladder, and the
competitors' fits, taken from benchmarks/sparse_solvers.py (the lam conversions live there)."""
import warnings

import scipy.sparse

from benchopt import BaseSolver
from benchopt.stopping_criterion import SufficientProgressCriterion

from benchmark_utils.problems import next_tolerance, sparse_solvers


class ToleranceSolver(BaseSolver):
    """run(tol): one solve from scratch to the solver's own tolerance ``tol``."""
    sampling_strategy = "tolerance"

    def get_next(self, stop_val):
        return next_tolerance(stop_val)

    def get_result(self):
        return dict(x=self.coef)


class CompetitorSolver(ToleranceSolver):
    """A sparse_solvers.py fitter: ``labels`` names it per loss (a key of lasso_fitters / logistic_fitters).

    The data are copied to the layout the solver prefers (CSC, Fortran order) in set_objective, before any
    clock starts, and a small fit there compiles (skglm's numba) and loads what this loss needs: benchopt's
    own warm_up runs once per solver object, and one object serves both losses.  The fit runs with the
    process's threads (both cores)."""
    labels = {}

    def set_objective(self, loss, X, y, lam):
        m, sparse = X.shape[0], scipy.sparse.issparse(X)
        fitters = sparse_solvers.lasso_fitters(m, lam, sparse) if loss == "lasso" else \
            sparse_solvers.logistic_fitters(m, lam, sparse)
        _, self.fit = fitters[self.labels[loss]]
        self.X, self.y = sparse_solvers.preferred_layout(X), y
        sparse_solvers.warm_up(self.fit, self.X, self.y, 1e-8)

    def run(self, tol):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence warnings at the loose rungs
            self.coef = self.fit(self.X, self.y, tol)[0]


class ProgressCriterion(SufficientProgressCriterion):
    """benchopt's SufficientProgressCriterion, whose patience starts once P has dropped below its first value,
    and whose ladder starts at 1, not benchopt's 3e38.

    At the loose rungs skglm returns x = 0 (its tolerance is on the gradient of P / m, far below 1e-2 here),
    and benchopt's criterion would end its ladder after three rungs without progress, before it started.
    liblinear at tol = 3e38 ran for minutes on the synthetic logistic design at 0.05 lambda_max."""

    def init_stop_val(self):
        stop_val = super().init_stop_val()
        return min(stop_val, 1.0) if self.strategy == "tolerance" else stop_val

    def check_convergence(self, objective_list):
        stop, progress = super().check_convergence(objective_list)
        key = self.key_to_monitor_
        if stop and min(entry[key] for entry in objective_list) >= objective_list[0][key]:
            return False, progress
        return stop, progress
