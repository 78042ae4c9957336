"""Binary logistic regression, labels y in {0, 1}.

    loss(w, b) = (1/n) sum_i [log(1 + e^{s_i}) - y_i s_i] + (alpha / 2) ||w||^2,   s_i = x_i . w + b

the mean binary cross-entropy (scikit-learn's ``log_loss``) of
P(y = 1 | x) = sigmoid(s).  scikit-learn's LogisticRegression minimizes
``C sum_i [...] + ||w||^2 / 2``, which is Cn times this objective when
``alpha = 1 / (C n)``.  The intercept b is not penalized; log(1 + e^s) is
computed as ``logaddexp(0, s)``, never overflowing.  Parameters
``[w (n_features), b]``; O(n d) per call.
"""
import numpy as np

from ..core.backend import get_array_module
from ..core.registry import register
from .base import LinearModel
from .heads import binary_cross_entropy, special


@register("model", "logistic")
class LogisticRegression(LinearModel):
    name = "logistic"
    n_classes = 2

    def __init__(self, n_features, alpha=0.0):
        super().__init__(n_features, alpha=alpha)

    def head(self, scores, y):
        return binary_cross_entropy(scores, y)

    def predict_proba(self, params, X):
        """Columns P(y = 0 | x), P(y = 1 | x), as scikit-learn orders them."""
        scores = self.scores(params, X)
        xp = get_array_module(scores)
        expit = special(xp).expit
        return xp.column_stack([expit(-scores), expit(scores)])

    def predict(self, params, X):
        return (self.scores(params, X) > 0).astype(np.int64)
