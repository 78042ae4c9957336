"""Models on flat parameter vectors: gradients against finite differences, losses against scikit-learn."""
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression as ScikitLogisticRegression
from sklearn.linear_model import Ridge
from sklearn.metrics import log_loss, mean_squared_error
from sklearn.neural_network import MLPClassifier, MLPRegressor

from mpiopt.core.registry import RegistryError, names
from mpiopt.models import MLP, LogisticRegression, SoftmaxRegression, get_model

# name, options, the kind of target: each model in the shapes the tests use.
MODELS = {
    "linear": ("linear", {}, "real"),
    "logistic": ("logistic", {}, 2),
    "softmax": ("softmax", {"n_classes": 4}, 4),
    "mlp-classifier": ("mlp", {"n_classes": 3, "hidden": (5, 4)}, 3),
    "mlp-regressor": ("mlp", {"hidden": (6,)}, "real"),
    "mlp-no-hidden": ("mlp", {"n_classes": 2, "hidden": ()}, 2),
}


def make_batch(rows, features, target, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, features)) * scale
    y = rng.standard_normal(rows) if target == "real" else rng.integers(0, target, rows)
    return X, y


def make_model(key, features, alpha=0.0):
    name, options, target = MODELS[key]
    return get_model(name, n_features=features, alpha=alpha, **options), target


def random_params(model, seed=1):
    return model.init_params(seed) + 0.5 * np.random.default_rng(seed).standard_normal(model.n_params)


def central_differences(model, params, X, y, step=1e-6):
    grad = np.empty(model.n_params)
    for index in range(model.n_params):
        shift = np.zeros(model.n_params)
        shift[index] = step
        grad[index] = (model.loss(params + shift, X, y) - model.loss(params - shift, X, y)) / (2 * step)
    return grad


@pytest.mark.parametrize("key", MODELS)
@pytest.mark.parametrize("rows, features, alpha", [(1, 3, 0.0), (17, 4, 0.3), (40, 6, 0.01)])
def test_gradient_matches_central_differences(key, rows, features, alpha):
    model, target = make_model(key, features, alpha)
    X, y = make_batch(rows, features, target, seed=rows)
    params = random_params(model, seed=features)
    loss, grad = model.loss_and_grad(params, X, y)
    assert isinstance(loss, float) and grad.shape == (model.n_params,) and grad.dtype == np.float64
    reference = central_differences(model, params, X, y)
    assert np.linalg.norm(grad - reference) <= 1e-6 * max(np.linalg.norm(reference), 1e-12)


@pytest.mark.parametrize("key", MODELS)
def test_losses_match_scikit_learn_metrics_plus_the_penalty(key):
    alpha = 0.2
    model, target = make_model(key, 5, alpha)
    X, y = make_batch(30, 5, target, seed=3)
    params = random_params(model)
    if target == "real":
        data_term = mean_squared_error(y, model.predict(params, X)) / 2
    else:
        data_term = log_loss(y, model.predict_proba(params, X), labels=np.arange(target))
    weights = model.views(params)[0::2]  # every model's layout alternates weights and intercepts
    penalty = alpha / 2 * sum(float(np.sum(weight ** 2)) for weight in weights)
    assert model.loss(params, X, y) == pytest.approx(data_term + penalty, rel=1e-12)


@pytest.mark.parametrize("key", MODELS)
def test_an_empty_batch_contributes_only_the_penalty(key):
    model, target = make_model(key, 4, alpha=0.5)
    X, y = make_batch(0, 4, target)
    params = random_params(model)
    loss, grad = model.loss_and_grad(params, X, y)
    penalty_only = model.loss_and_grad(params, *make_batch(3, 4, target))[1]  # nonzero data gradient
    weights = model.views(params)[0::2]
    assert loss == pytest.approx(0.25 * sum(float(np.sum(weight ** 2)) for weight in weights))
    for block, grad_block, param_block in zip(range(len(weights) * 2), model.views(grad), model.views(params)):
        assert np.allclose(grad_block, 0.5 * param_block if block % 2 == 0 else 0.0)
    assert not np.allclose(penalty_only, grad)


@pytest.mark.parametrize("key", MODELS)
def test_huge_scores_give_finite_losses_and_gradients(key):
    model, target = make_model(key, 3)
    X, y = make_batch(20, 3, target, scale=1e4)
    loss, grad = model.loss_and_grad(random_params(model) * 100, X, y)  # RuntimeWarnings are errors (pytest.ini)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    if target != "real":
        probabilities = model.predict_proba(random_params(model) * 100, X)
        assert np.all(np.isfinite(probabilities)) and np.allclose(probabilities.sum(axis=1), 1.0)


def test_parameter_blocks_are_views_into_the_flat_vector():
    model = MLP(4, n_classes=3, hidden=(5,))
    params = random_params(model)
    blocks = model.views(params)
    assert [block.shape for block in blocks] == [(4, 5), (5,), (5, 3), (3,)]
    assert all(np.shares_memory(block, params) for block in blocks)
    assert sum(block.size for block in blocks) == model.n_params == 4 * 5 + 5 + 5 * 3 + 3
    blocks[2][0, 0] = 123.0
    assert params[25] == 123.0


def test_linear_model_matches_ridge_with_alpha_times_n():
    X, y = make_batch(60, 5, "real", seed=4)
    alpha = 0.05
    ridge = Ridge(alpha=alpha * X.shape[0], tol=1e-12).fit(X, y)
    model = get_model("linear", n_features=5, alpha=alpha)
    params = np.concatenate([ridge.coef_, [ridge.intercept_]])
    assert np.abs(model.loss_and_grad(params, X, y)[1]).max() < 1e-10
    assert np.allclose(model.predict(params, X), ridge.predict(X), rtol=0, atol=1e-12)


def fit_scikit_logistic(X, y, C):
    return ScikitLogisticRegression(C=C, tol=1e-12, max_iter=10000).fit(X, y)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_fitted_scikit_learn_logistic_regression_gives_the_same_probabilities(n_classes):
    X, y = make_batch(80, 4, n_classes, seed=5)
    fitted = fit_scikit_logistic(X, y, C=1e6)
    if n_classes == 2:
        model = LogisticRegression(4)
        params = np.concatenate([fitted.coef_[0], fitted.intercept_])
    else:
        model = SoftmaxRegression(4, n_classes)
        params = np.concatenate([fitted.coef_.T.ravel(), fitted.intercept_])
    assert np.allclose(model.predict_proba(params, X), fitted.predict_proba(X), rtol=1e-10, atol=1e-14)
    assert np.array_equal(model.predict(params, X), fitted.predict(X))
    assert model.predict(params, X).dtype == np.int64


@pytest.mark.parametrize("n_classes", [2, 3])
def test_scikit_learn_logistic_minimizer_is_stationary_with_alpha_one_over_c_n(n_classes):
    X, y = make_batch(70, 3, n_classes, seed=6)
    C = 0.5
    fitted = fit_scikit_logistic(X, y, C=C)
    alpha = 1.0 / (C * X.shape[0])
    if n_classes == 2:
        model, params = LogisticRegression(3, alpha), np.concatenate([fitted.coef_[0], fitted.intercept_])
    else:
        model = SoftmaxRegression(3, n_classes, alpha)
        params = np.concatenate([fitted.coef_.T.ravel(), fitted.intercept_])
    assert np.abs(model.loss_and_grad(params, X, y)[1]).max() < 1e-7


def flat_mlp_parameters(fitted):
    return np.concatenate([np.concatenate([weight.ravel(), bias])
                           for weight, bias in zip(fitted.coefs_, fitted.intercepts_)])


def fit_quietly(estimator, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return estimator.fit(X, y)


def test_mlp_with_scikit_learn_classifier_weights_gives_its_probabilities_and_loss():
    X, y = make_batch(90, 4, 3, seed=7)
    fitted = fit_quietly(MLPClassifier(hidden_layer_sizes=(6, 5), solver="lbfgs", alpha=0.3, max_iter=50,
                                       random_state=0), X, y)
    model = MLP(4, n_classes=3, hidden=(6, 5), alpha=0.3 / X.shape[0])
    params = flat_mlp_parameters(fitted)
    assert params.size == model.n_params
    assert np.allclose(model.predict_proba(params, X), fitted.predict_proba(X), rtol=1e-10, atol=1e-14)
    assert np.array_equal(model.predict(params, X), fitted.predict(X))
    assert model.loss(params, X, y) == pytest.approx(fitted.loss_, rel=1e-10)


def test_mlp_holds_a_binary_scikit_learn_classifier_with_a_zero_first_output():
    X, y = make_batch(60, 3, 2, seed=8)
    fitted = fit_quietly(MLPClassifier(hidden_layer_sizes=(4,), solver="lbfgs", alpha=0.1, max_iter=50,
                                       random_state=0), X, y)
    model = MLP(3, n_classes=2, hidden=(4,), alpha=0.1 / X.shape[0])
    last_weight, last_bias = fitted.coefs_[-1], fitted.intercepts_[-1]  # one logistic unit
    fitted_as_softmax = np.concatenate([fitted.coefs_[0].ravel(), fitted.intercepts_[0],
                                        np.hstack([np.zeros_like(last_weight), last_weight]).ravel(),
                                        [0.0, last_bias[0]]])
    assert np.allclose(model.predict_proba(fitted_as_softmax, X), fitted.predict_proba(X), rtol=1e-10, atol=1e-14)
    assert model.loss(fitted_as_softmax, X, y) == pytest.approx(fitted.loss_, rel=1e-10)


def test_mlp_with_scikit_learn_regressor_weights_gives_its_predictions_and_loss():
    X, y = make_batch(70, 4, "real", seed=9)
    fitted = fit_quietly(MLPRegressor(hidden_layer_sizes=(5,), solver="lbfgs", alpha=0.2, max_iter=50,
                                      random_state=0), X, y)
    model = MLP(4, hidden=(5,), alpha=0.2 / X.shape[0])
    params = flat_mlp_parameters(fitted)
    assert np.allclose(model.predict(params, X), fitted.predict(X), rtol=1e-12, atol=1e-12)
    assert model.loss(params, X, y) == pytest.approx(fitted.loss_, rel=1e-10)


def test_init_params_is_seeded_zero_for_convex_models_and_he_glorot_for_the_mlp():
    assert not np.any(get_model("softmax", n_features=3, n_classes=3).init_params(5))
    model = MLP(400, n_classes=10, hidden=(300,))
    params = model.init_params(5)
    assert np.array_equal(params, model.init_params(5)) and not np.array_equal(params, model.init_params(6))
    (hidden_weight, hidden_bias), (output_weight, output_bias) = model.layers(params)
    assert hidden_weight.std() == pytest.approx(np.sqrt(2 / 400), rel=0.02)
    assert output_weight.std() == pytest.approx(np.sqrt(2 / 310), rel=0.05)
    assert not np.any(hidden_bias) and not np.any(output_bias)


def test_models_are_registered_and_chosen_by_name():
    assert {"linear", "logistic", "softmax", "mlp"} <= set(names("model"))
    assert isinstance(get_model("mlp", n_features=3, n_classes=2), MLP)
    with pytest.raises(RegistryError, match="model must be one of linear, logistic, mlp, softmax, got 'svm'"):
        get_model("svm", n_features=3)


def test_bad_arguments_and_batches_are_rejected_with_clear_errors():
    with pytest.raises(ValueError, match="softmax: n_classes must be an integer >= 2, got 1"):
        SoftmaxRegression(3, 1)
    with pytest.raises(ValueError, match="mlp: each hidden width must be an integer >= 1, got 0"):
        MLP(3, hidden=(4, 0))
    with pytest.raises(ValueError, match="logistic: alpha must be a finite number >= 0, got -1"):
        LogisticRegression(3, alpha=-1)
    with pytest.raises(ValueError, match="linear: n_features must be an integer >= 1, got 0"):
        get_model("linear", n_features=0)
    model = SoftmaxRegression(3, 3)
    X, y = make_batch(5, 3, 3)
    params = model.init_params(0)
    with pytest.raises(ValueError, match=r"params must be a flat vector of n_params=12 entries, got shape \(11,\)"):
        model.loss_and_grad(params[:-1], X, y)
    with pytest.raises(ValueError, match=r"X must be a 2-D array of n_features=3 columns, got shape \(5, 2\)"):
        model.loss_and_grad(params, X[:, :2], y)
    with pytest.raises(ValueError, match=r"y must hold one target per row of X \(5\), got shape \(4,\)"):
        model.loss_and_grad(params, X, y[:4])
    with pytest.raises(ValueError, match=r"labels must be integers in \[0, 3\), got 3"):
        model.loss_and_grad(params, X, np.array([0, 1, 2, 3, 0]))
    with pytest.raises(ValueError, match=r"labels must be integers in \[0, 3\), got dtype float64"):
        model.loss_and_grad(params, X, y.astype(float))
    with pytest.raises(ValueError, match="predict_proba needs a classifier"):
        MLP(3).predict_proba(MLP(3).init_params(0), X)
