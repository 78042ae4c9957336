"""scikit-learn estimators backed by consensus ADMM.

    from mpiopt.estimators import LassoADMM
    model = LassoADMM(alpha=0.1).fit(X_local, y_local)      # under mpiexec: each rank its own rows
    model.predict(X_new)

They follow scikit-learn's objectives and parameter names, so a model can be
swapped for sklearn.linear_model.Lasso, ElasticNet or LogisticRegression:

    LassoADMM:              1/(2m) ||y - Xw - b||^2 + alpha ||w||_1
    ElasticNetADMM:         1/(2m) ||y - Xw - b||^2 + alpha l1_ratio ||w||_1 + alpha (1 - l1_ratio)/2 ||w||^2
    LogisticRegressionADMM: C sum_j log(1 + exp(-y_j (x_j^T w + b))) + ||w||_1   (penalty="l1")
                                                               or + ||w||^2 / 2  (penalty="l2")
                            (one-vs-rest for more than two classes)

where m is the number of rows over all ranks.  For the L1 and elastic-net penalties on CPU data they solve on
working sets by default (``working_set=None``; mpiopt.admm.workingset) and stop at the relative duality gap
``gap_tol`` (``tol`` when None); ``working_set=False`` runs the full solver with the residual rule ``tol``.  ``fit`` is collective over
``comm`` (every rank calls it with its own rows; a rank may hold none); ``score``
is too, and reports the score over all ranks' rows.  Needs scikit-learn.
"""
import numpy as np
from mpi4py import MPI
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from .admm.solver import Problem
from .core.comm import resolve_comm
from .core.registry import names, options

L1_RATIO = options("penalty", "elastic_net")["l1_ratio"].default  # the declarations' defaults, as sklearn shows them
X_SOLVER = options("loss", "logistic")["x_solver"].default


class _ADMMEstimator(BaseEstimator):
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _settings(self):
        return {"eps_abs": self.tol, "eps_rel": self.tol, "max_iter": self.max_iter, "rho": self.rho,
                "reducer": self.reducer, "verbose": self.verbose, "gap_tol": self.gap_tol,
                "working_set": self.working_set}

    def _rows(self, X, comm):
        return comm.allreduce(int(X.shape[0]), op=MPI.SUM)

    def _store(self, result):
        x = np.asarray(result.x)
        self.coef_ = x[:-1].copy() if self.fit_intercept else x.copy()
        self.intercept_ = float(x[-1]) if self.fit_intercept else 0.0
        self.n_iter_ = result.iterations
        # scikit-learn's Lasso/ElasticNet report the gap of (1/2n)||y - Xw||^2 + ...: ours divided by the rows
        self.dual_gap_ = None if result.gap is None else result.gap / self._rows_seen
        self.result_ = result
        return self


class LassoADMM(RegressorMixin, _ADMMEstimator):
    def __init__(self, alpha=1.0, *, fit_intercept=True, max_iter=10000, tol=1e-8, rho=None, reducer="auto",
                 verbose=False, comm=None, gap_tol=None, working_set=None):
        self.alpha, self.fit_intercept, self.max_iter, self.tol = alpha, fit_intercept, max_iter, tol
        self.rho, self.reducer, self.verbose, self.comm, self.gap_tol = rho, reducer, verbose, comm, gap_tol
        self.working_set = working_set

    def _penalty(self):
        return "l1", {}

    def fit(self, X, y):
        X, y = validate_data(self, X, y, accept_sparse=("csr", "csc"), dtype=(np.float64, np.float32),
                             y_numeric=True)
        comm = resolve_comm(self.comm)
        rows = self._rows_seen = self._rows(X, comm)
        penalty, extra = self._penalty()
        problem = Problem(X, np.asarray(y, dtype=np.float64), "squared", comm, intercept=self.fit_intercept)
        result = problem.solve(penalty, self.alpha * rows, **extra, **self._settings())
        return self._store(result)

    def predict(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse=("csr", "csc"), reset=False)
        return np.asarray(X @ self.coef_).ravel() + self.intercept_

    def score(self, X, y, sample_weight=None):
        """R^2 over every rank's rows (collective)."""
        comm = resolve_comm(self.comm)
        y = np.asarray(y, dtype=np.float64)
        residual = y - self.predict(X)
        if comm.size == 1:
            return super().score(X, y, sample_weight)
        total = np.array([residual @ residual, y.sum(), y @ y, y.size], dtype=float)
        comm.Allreduce(MPI.IN_PLACE, total)
        ss_res, s, ss, count = total
        ss_tot = ss - s * s / count
        return 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0


class ElasticNetADMM(LassoADMM):
    def __init__(self, alpha=1.0, *, l1_ratio=L1_RATIO, fit_intercept=True, max_iter=10000, tol=1e-8, rho=None,
                 reducer="auto", verbose=False, comm=None, gap_tol=None, working_set=None):
        super().__init__(alpha, fit_intercept=fit_intercept, max_iter=max_iter, tol=tol, rho=rho,
                         reducer=reducer, verbose=verbose, comm=comm, gap_tol=gap_tol, working_set=working_set)
        self.l1_ratio = l1_ratio

    def _penalty(self):
        return "elastic_net", {"l1_ratio": self.l1_ratio}


class LogisticRegressionADMM(ClassifierMixin, _ADMMEstimator):
    """Binary, or one-vs-rest for more classes (as liblinear); coef_ is (1 or n_classes, n_features)."""

    def __init__(self, C=1.0, *, penalty="l1", fit_intercept=True, max_iter=10000, tol=1e-8, rho=None,
                 x_solver=X_SOLVER, reducer="auto", verbose=False, comm=None, gap_tol=None, working_set=None):
        self.C, self.penalty, self.fit_intercept, self.max_iter, self.tol = C, penalty, fit_intercept, max_iter, tol
        self.rho, self.x_solver, self.reducer, self.verbose, self.comm = rho, x_solver, reducer, verbose, comm
        self.gap_tol, self.working_set = gap_tol, working_set

    def fit(self, X, y):
        X, y = validate_data(self, X, y, accept_sparse=("csr", "csc"), dtype=(np.float64, np.float32))
        check_classification_targets(y)
        weight_only = [name for name in names("penalty") if tuple(options("penalty", name)) == ("lam",)]
        if self.penalty not in weight_only:
            raise ValueError(f"penalty must be one of {', '.join(map(repr, weight_only))} (a registered penalty "
                             f"with a weight only), got {self.penalty!r}")
        comm = resolve_comm(self.comm)
        labels = sorted(set().union(*comm.allgather(set(np.unique(y).tolist()))))
        if len(labels) < 2:
            raise ValueError(f"LogisticRegressionADMM needs samples of at least 2 classes; got 1 class ({labels})")
        self.classes_ = np.array(labels, dtype=np.asarray(y).dtype)
        targets = [self.classes_[1]] if len(labels) == 2 else list(self.classes_)
        coefs, intercepts, iterations, results = [], [], [], []
        for positive in targets:
            signed = np.where(np.asarray(y) == positive, 1.0, -1.0)
            problem = Problem(X, signed, "logistic", comm, intercept=self.fit_intercept, x_solver=self.x_solver)
            result = problem.solve(self.penalty, 1.0 / self.C, **self._settings())
            x = np.asarray(result.x)
            coefs.append(x[:-1] if self.fit_intercept else x)
            intercepts.append(float(x[-1]) if self.fit_intercept else 0.0)
            iterations.append(result.iterations)
            results.append(result)
        self.coef_, self.intercept_ = np.array(coefs), np.array(intercepts)
        self.n_iter_ = np.array(iterations)
        self.results_ = results
        return self

    def decision_function(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse=("csr", "csc"), reset=False)
        scores = np.asarray(X @ self.coef_.T) + self.intercept_
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict_proba(self, X):
        scores = self.decision_function(X)
        if scores.ndim == 1:
            positive = 0.5 * (1.0 + np.tanh(0.5 * scores))
            return np.column_stack([1.0 - positive, positive])
        probabilities = 0.5 * (1.0 + np.tanh(0.5 * scores))  # one-vs-rest, normalised as liblinear's
        return probabilities / probabilities.sum(axis=1, keepdims=True)

    def predict(self, X):
        scores = self.decision_function(X)
        index = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[index]

    def score(self, X, y, sample_weight=None):
        """Accuracy over every rank's rows (collective)."""
        comm = resolve_comm(self.comm)
        if comm.size == 1:
            return super().score(X, y, sample_weight)
        hits = np.array([float(np.sum(self.predict(X) == np.asarray(y))), float(len(y))])
        comm.Allreduce(MPI.IN_PLACE, hits)
        return hits[0] / hits[1]


__all__ = ["ElasticNetADMM", "LassoADMM", "LogisticRegressionADMM"]
