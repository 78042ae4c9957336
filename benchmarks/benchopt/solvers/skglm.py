import skglm  # noqa: F401 - benchopt's install check; the fit is sparse_solvers.py's

from benchmark_utils.solvers import CompetitorSolver


class Solver(CompetitorSolver):
    """skglm's working-set Anderson coordinate descent (lasso) and proximal Newton (logistic)."""
    name = "skglm"
    requirements = ["pip::skglm"]
    labels = {"lasso": "skglm Lasso", "logistic": "skglm SparseLogisticRegression"}
