"""Linear regression: least squares with an optional ridge penalty.

    loss(w, b) = (1 / 2n) sum_i (x_i . w + b - y_i)^2 + (alpha / 2) ||w||^2

the mean squared error halved (scikit-learn's SGDRegressor objective with
``loss="squared_error", penalty="l2"``, and ``MLPRegressor``'s squared loss).
scikit-learn's Ridge minimizes ``||y - X w - b||^2 + alpha_ridge ||w||^2``,
which is 2n times this objective when ``alpha_ridge = n alpha``, so
``Ridge(alpha=n * alpha)`` has the same minimizer.  The intercept b is not
penalized.  Parameters ``[w (n_features), b]``; one pass over X per call,
O(n d).
"""
from ..core.registry import register
from .base import LinearModel
from .heads import squared_error


@register("model", "linear")
class LinearRegression(LinearModel):
    name = "linear"

    def __init__(self, n_features, alpha=0.0):
        super().__init__(n_features, alpha=alpha)

    def head(self, scores, y):
        return squared_error(scores, y)

    def predict(self, params, X):
        """The fitted values x_i . w + b."""
        return self.scores(params, X)
