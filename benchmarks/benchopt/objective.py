import numpy as np
from benchopt import BaseObjective
from benchmark_utils import problems
from benchmark_utils.solvers import ProgressCriterion


class Objective(BaseObjective):
    """L1-penalized least squares (lasso) or logistic regression in mpiopt's scaling.

    P(x) = (1/2) ||Ax - b||^2 + lam ||x||_1, or sum_j log(1 + exp(-y_j a_j^T x)) + lam ||x||_1 with
    y in {-1, 1}; sums over the rows, no intercept, lam = lam_ratio * lambda_max.  Every solver's x is
    scored by this P (benchmarks/sparse_solvers.py's functions), never by the solver's own report;
    ``duality_gap`` is P(x) - D(theta) at the rescaled dual point of x."""
    name = "L1 regression"
    min_benchopt_version = "1.10"
    requirements = []
    parameters = {"loss": list(problems.LOSSES), "lam_ratio": [0.1, 0.01]}
    # Every solver: a tolerance ladder, ended once five rungs (decades) improve the best P by under 1e-9 of
    # the first drop.  benchopt's eps, 1e-10, spends minutes on rungs far below the 1e-6 of interest; its
    # patience, 3, ends mpiopt, whose working sets often meet several decades of gap_tol at once, early.
    stopping_criterion = ProgressCriterion(strategy="tolerance", eps=1e-9, patience=5)

    def set_data(self, X, y, labels):
        self.X = X
        self.y = y if self.loss == "lasso" else labels
        self.lam = self.lam_ratio * problems.lambda_max(self.loss, X, self.y)
        self.primal = problems.primal(self.loss, X, self.y, self.lam)

    def get_objective(self):
        return dict(loss=self.loss, X=self.X, y=self.y, lam=self.lam)

    def evaluate_result(self, x):
        x = np.asarray(x, dtype=float).ravel()
        value = self.primal(x)
        return dict(value=value, duality_gap=problems.duality_gap(self.loss, self.X, self.y, self.lam, x, value),
                    support_size=int(np.count_nonzero(x)))

    def get_one_result(self):
        return dict(x=np.zeros(self.X.shape[1]))
