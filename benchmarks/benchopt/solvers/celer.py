import celer  # noqa: F401 - benchopt's install check; the fit is sparse_solvers.py's

from benchmark_utils.solvers import CompetitorSolver


class Solver(CompetitorSolver):
    """celer's working sets with dual extrapolation."""
    name = "celer"
    requirements = ["pip::celer"]
    labels = {"lasso": "celer Lasso", "logistic": "celer LogisticRegression"}
