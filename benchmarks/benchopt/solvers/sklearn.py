import sklearn  # noqa: F401 - benchopt's install check; the fit is sparse_solvers.py's

from benchmark_utils.solvers import CompetitorSolver


class Solver(CompetitorSolver):
    """scikit-learn's coordinate descent Lasso and liblinear's L1 LogisticRegression."""
    name = "scikit-learn"
    requirements = ["pip::scikit-learn"]
    labels = {"lasso": "scikit-learn Lasso (precompute=False)",
              "logistic": "scikit-learn LogisticRegression (liblinear)"}
