"""scikit-learn estimators: same answers as scikit-learn's own, in one process and under MPI."""
import numpy as np
import pytest
from mpi4py import MPI
from sklearn.base import clone
from sklearn.linear_model import ElasticNet, Lasso, LogisticRegression

from conftest import shard_bounds
from mpiopt.estimators import ElasticNetADMM, LassoADMM, LogisticRegressionADMM


def regression(seed=0, m=240, n=10):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n))
    y = X @ (rng.standard_normal(n) * (rng.random(n) < 0.6)) + 1.5 + 0.1 * rng.standard_normal(m)
    return X, y


def classification(seed=0, m=300, n=8):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, n))
    y = np.where(X @ rng.standard_normal(n) - 0.3 + rng.standard_normal(m) > 0, "yes", "no")
    return X, y


@pytest.mark.mpi
@pytest.mark.parametrize("ours, theirs", [  # (working sets: coefficients to about the root of the relative gap)
    (LassoADMM(alpha=0.05, gap_tol=1e-12), Lasso(alpha=0.05, tol=1e-14, max_iter=100000)),
    (ElasticNetADMM(alpha=0.05, l1_ratio=0.3, gap_tol=1e-12),
     ElasticNet(alpha=0.05, l1_ratio=0.3, tol=1e-14, max_iter=100000)),
    (LassoADMM(alpha=0.05, fit_intercept=False, gap_tol=1e-12),
     Lasso(alpha=0.05, fit_intercept=False, tol=1e-14, max_iter=100000)),
], ids=["lasso", "elastic-net", "lasso-no-intercept"])
def test_regressors_match_sklearn_with_rows_split_over_ranks(comm, ours, theirs):
    X, y = regression(1)
    start, stop = shard_bounds(X.shape[0], comm, "uneven")
    model = clone(ours).set_params(comm=comm).fit(X[start:stop], y[start:stop])
    reference = theirs.fit(X, y)
    assert np.allclose(model.coef_, reference.coef_, atol=1e-6)
    assert model.intercept_ == pytest.approx(reference.intercept_, abs=1e-6)
    assert np.allclose(model.predict(X), reference.predict(X), atol=1e-5)
    assert model.score(X[start:stop], y[start:stop]) == pytest.approx(reference.score(X, y), abs=1e-8)


@pytest.mark.mpi
def test_logistic_regression_l2_matches_sklearn(comm):
    X, y = classification(2)
    start, stop = shard_bounds(X.shape[0], comm, "even")
    model = LogisticRegressionADMM(C=0.5, penalty="l2", comm=comm).fit(X[start:stop], y[start:stop])
    reference = LogisticRegression(C=0.5, tol=1e-12, max_iter=10000).fit(X, y)
    assert list(model.classes_) == ["no", "yes"]
    assert model.coef_.shape == reference.coef_.shape == (1, X.shape[1])
    assert np.allclose(model.coef_, reference.coef_, atol=1e-5)
    assert np.allclose(model.intercept_, reference.intercept_, atol=1e-5)
    assert np.allclose(model.predict_proba(X), reference.predict_proba(X), atol=1e-6)
    assert np.array_equal(model.predict(X), reference.predict(X))
    assert model.score(X[start:stop], y[start:stop]) == pytest.approx(reference.score(X, y))


@pytest.mark.mpi
def test_logistic_regression_l1_is_sparse_and_matches_saga_objective(comm):
    X, y = classification(3, n=12)
    start, stop = shard_bounds(X.shape[0], comm, "even")
    model = LogisticRegressionADMM(C=0.05, penalty="l1", comm=comm).fit(X[start:stop], y[start:stop])
    reference = LogisticRegression(C=0.05, l1_ratio=1.0, solver="saga", tol=1e-10, max_iter=100000).fit(X, y)

    def objective(coef, intercept):
        margin = np.where(y == "yes", 1.0, -1.0) * (X @ coef + intercept)
        return 0.05 * np.logaddexp(0, -margin).sum() + np.abs(coef).sum()
    ours = objective(model.coef_.ravel(), model.intercept_[0])
    theirs = objective(reference.coef_.ravel(), reference.intercept_[0])
    assert ours <= theirs * (1 + 1e-6)
    assert np.count_nonzero(np.abs(model.coef_) > 1e-8) < X.shape[1]


def test_estimator_api_get_set_params_and_errors():
    model = LassoADMM(alpha=0.3)
    assert model.get_params()["alpha"] == 0.3
    assert clone(model.set_params(alpha=0.7)).alpha == 0.7
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError):
        model.predict(np.zeros((2, 3)))
    X, y = regression(4)
    fitted = LassoADMM(alpha=0.1).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        fitted.predict(np.zeros((2, X.shape[1] + 1)))
    with pytest.raises(ValueError, match="at least 2 classes"):
        LogisticRegressionADMM().fit(X, np.zeros(X.shape[0]))


def test_logistic_regression_one_vs_rest_for_three_classes():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 4))
    y = np.argmax(X[:, :3] + 0.3 * rng.standard_normal((300, 3)), axis=1)
    model = LogisticRegressionADMM(C=1.0, penalty="l2").fit(X, y)
    assert model.coef_.shape == (3, 4) and model.predict_proba(X).shape == (300, 3)
    assert np.allclose(model.predict_proba(X).sum(axis=1), 1.0)
    assert model.score(X, y) > 0.8


@pytest.mark.parametrize("estimator", [LassoADMM(alpha=0.1, max_iter=2000, tol=1e-6),
                                       ElasticNetADMM(alpha=0.1, max_iter=2000, tol=1e-6),
                                       # scikit-learn's checks test the API, not the optimum: its own harness caps
                                       # the iterations of iterative estimators.  Its unscaled data (features near 100
                                       # beside the intercept) takes this solver 140 Newton steps of 1000 sweeps each.
                                       LogisticRegressionADMM(max_iter=20, tol=1e-4)],
                         ids=lambda estimator: type(estimator).__name__)
def test_sklearn_estimator_checks(estimator):
    """scikit-learn's own estimator checks, in one process (they do not apply under mpiexec)."""
    from sklearn.utils.estimator_checks import check_estimator
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(estimator, on_fail=None)
    failed = [f"{r['check_name']}: {r['exception']}" for r in results if r["status"] == "failed"]
    assert not failed, "\n".join(failed)
