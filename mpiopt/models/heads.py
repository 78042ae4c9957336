"""Output heads: a batch's mean loss on the scores, and its gradient in the scores.

Each takes the scores of n rows and their targets and returns
``(loss, score_grad)`` with ``loss`` the mean over the rows (0 for no rows) and
``score_grad`` the gradient of that mean, shaped like the scores.  Both are
computed stably: log(1 + e^s) by ``logaddexp``, the sigmoid by ``expit``, the
softmax by ``log_softmax`` (log-sum-exp with the maximum subtracted).

Every function follows its arrays: numpy and scipy.special for numpy arrays,
CuPy and cupyx.scipy.special for CuPy arrays (:func:`special`), the same lines
either way.
"""
from ..core.backend import get_array_module, is_numpy


def special(xp):
    """scipy.special for numpy, cupyx.scipy.special for CuPy (``expit``, ``log_softmax``, ``softmax``)."""
    if is_numpy(xp):
        import scipy.special
        return scipy.special
    import cupyx.scipy.special
    return cupyx.scipy.special


def squared_error(scores, targets):
    """(1 / 2n) sum_i (s_i - t_i)^2; gradient (s - t) / n.  Scores and targets of shape (n,)."""
    rows = max(targets.shape[0], 1)
    residual = scores - targets
    return 0.5 * float(residual @ residual) / rows, residual / rows


def binary_cross_entropy(scores, labels):
    """(1/n) sum_i log(1 + e^{s_i}) - y_i s_i for labels y_i in {0, 1}; gradient (sigmoid(s) - y) / n."""
    xp = get_array_module(scores)
    rows = max(labels.shape[0], 1)
    loss = float(xp.sum(xp.logaddexp(0.0, scores) - labels * scores)) / rows
    return loss, (special(xp).expit(scores) - labels) / rows


def softmax_cross_entropy(scores, labels):
    """(1/n) sum_i logsumexp(s_i) - s_{i, y_i}; gradient (softmax(s) - onehot(y)) / n.  Scores (n, k)."""
    xp = get_array_module(scores)
    rows = max(labels.shape[0], 1)
    log_probabilities = special(xp).log_softmax(scores, axis=1)
    picked = xp.arange(labels.shape[0]), labels
    loss = -float(xp.sum(log_probabilities[picked])) / rows
    score_grad = xp.exp(log_probabilities)
    score_grad[picked] -= 1.0
    score_grad /= rows
    return loss, score_grad
