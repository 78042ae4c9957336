"""Softmax (multinomial logistic) regression over ``n_classes`` classes, labels in [0, n_classes).

    loss(W, b) = (1/n) sum_i [logsumexp(s_i) - s_{i, y_i}] + (alpha / 2) ||W||_F^2,   s_i = x_i W + b

the mean multinomial cross-entropy of P(y = k | x) = softmax(s)_k, with W of
shape (n_features, n_classes) and one intercept per class (not penalized).
As scikit-learn's multinomial LogisticRegression, every class has its own
column (the parameters are then defined up to a shift of all columns, which
the penalty removes); it minimizes Cn times this objective when
``alpha = 1 / (C n)``.  log-sum-exp subtracts each row's maximum, so large
scores never overflow.  Parameters ``[W (row-major), b]``; O(n d k) per call.
"""
from ..core.backend import get_array_module
from ..core.options import REQUIRED, Options
from ..core.registry import register
from .base import LinearModel, Model, n_classes_option
from .heads import softmax_cross_entropy, special


@register("model", "softmax")
class SoftmaxRegression(LinearModel):
    name = "softmax"
    options = Model.options + Options(n_classes_option(REQUIRED, "the number of classes, labels in [0, n_classes)"))

    def __init__(self, n_features, n_classes, alpha=0.0):
        self.check_options({"n_classes": n_classes}, self.options.without("n_features", "alpha"))
        self.n_classes = int(n_classes)
        super().__init__(n_features, n_outputs=self.n_classes, alpha=alpha)

    def head(self, scores, y):
        return softmax_cross_entropy(scores, y)

    def predict_proba(self, params, X):
        scores = self.scores(params, X)
        return special(get_array_module(scores)).softmax(scores, axis=1)

    def predict(self, params, X):
        scores = self.scores(params, X)
        return get_array_module(scores).argmax(scores, axis=1)
