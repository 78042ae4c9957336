"""Multilayer perceptron: ReLU hidden layers, a softmax (classification) or linear (regression) output.

With h_0 = x, layers l = 1..L-1 hidden and L the output,

    h_l = relu(h_{l-1} W_l + b_l),     s = h_{L-1} W_L + b_L

    classification (n_classes = k):  loss = (1/n) sum_i [logsumexp(s_i) - s_{i, y_i}] + (alpha / 2) sum_l ||W_l||_F^2
    regression (n_classes = None):   loss = (1 / 2n) sum_i (s_i - y_i)^2              + (alpha / 2) sum_l ||W_l||_F^2

the objective of scikit-learn's MLPClassifier (multiclass; softmax output) and
MLPRegressor with ``activation="relu"``, whose ``alpha`` is n times ours (it
adds ``alpha_sk / (2n) sum ||W||^2``).  For two classes we keep two softmax
outputs where scikit-learn has one logistic unit: ours holds its model with a
zero first column.  The gradient is backpropagation; ReLU's derivative at 0 is
taken as 0.

Parameters ``[W_1, b_1, ..., W_L, b_L]``, each W_l of shape (fan_in, fan_out)
row-major, exactly scikit-learn's ``coefs_`` and ``intercepts_`` in order.
Initialization: He for the hidden layers, W_l ~ N(0, 2 / fan_in) (right for
ReLU), Glorot for the output, W_L ~ N(0, 2 / (fan_in + fan_out)), biases 0,
drawn from ``random_stream(seed, "init_params")``.  Cost per call: O(n sum_l
fan_in fan_out), twice over (forward and backward); memory: every layer's
activations for the batch.
"""
import numpy as np

from ..core.backend import get_array_module
from ..core.options import Option, Options
from ..core.random import random_stream
from ..core.registry import register
from .base import Model, count_problem, n_classes_option
from .heads import softmax_cross_entropy, special, squared_error


def widths_of(hidden):
    """The hidden widths as a tuple (one integer is one layer)."""
    return (hidden,) if isinstance(hidden, int) else tuple(hidden)


@register("model", "mlp")
class MLP(Model):
    name = "mlp"
    options = Model.options + Options(
        n_classes_option(None, "the number of classes (softmax output); None: a regression (one linear output)"),
        Option("hidden", object, (64,), "the hidden layers' widths, a sequence of integers >= 1 (or one integer)"))

    @classmethod
    def options_problem(cls, values, options=None):
        """The declared checks, then each hidden width (a sequence, which a declaration does not look into)."""
        problem = super().options_problem(values, options)
        if problem or "hidden" not in values:
            return problem
        try:
            widths = widths_of(values["hidden"])
        except TypeError:
            return f"{cls.name}: hidden must be a sequence of integers >= 1, got {values['hidden']!r}"
        return next((f"{cls.name}: {count_problem('each hidden width', width, 1)}" for width in widths
                     if count_problem("each hidden width", width, 1)), None)

    def __init__(self, n_features, n_classes=None, hidden=(64,), alpha=0.0):
        self.check_options({"n_classes": n_classes, "hidden": hidden}, self.options.without("n_features", "alpha"))
        n_classes = None if n_classes is None else int(n_classes)
        self.n_classes, self.hidden = n_classes, widths_of(hidden)
        widths = [n_features, *hidden, n_classes or 1]
        shapes = []
        for fan_in, fan_out in zip(widths[:-1], widths[1:]):
            shapes += [(fan_in, fan_out), (fan_out,)]
        super().__init__(n_features, shapes, alpha)

    def __repr__(self):
        return (f"MLP(n_features={self.n_features}, n_classes={self.n_classes}, hidden={self.hidden}, "
                f"alpha={self.alpha}, n_params={self.n_params})")

    def layers(self, vector):
        """[(W_1, b_1), ..., (W_L, b_L)]: views into ``vector`` (parameters or a gradient)."""
        blocks = self.views(vector)
        return list(zip(blocks[0::2], blocks[1::2]))

    def init_params(self, seed):
        params = np.zeros(self.n_params)  # on the host, seeded; a GPU run moves it (cupy.asarray)
        stream = random_stream(seed, "init_params")
        layers = self.layers(params)
        for number, (weight, _) in enumerate(layers):
            fan_in, fan_out = weight.shape
            variance = 2.0 / fan_in if number < len(layers) - 1 else 2.0 / (fan_in + fan_out)
            weight[...] = stream.standard_normal(weight.shape) * np.sqrt(variance)
        return params

    def layer_bounds(self):
        """[(start, stop)] of each layer's (W_l, b_l) in the flat vector, in forward order."""
        ends = np.cumsum(self.sizes).tolist()
        return [(ends[index] - self.sizes[index], ends[index + 1]) for index in range(0, len(self.sizes), 2)]

    def layer_views(self, number, entries):
        """(W_l, b_l) as views into ``entries``, the flat entries of layer ``number`` (parameters or a gradient)."""
        weight_size = self.sizes[2 * number]
        return entries[:weight_size].reshape(self.shapes[2 * number]), entries[weight_size:]

    def forward_by_layer(self, fetch, X):
        """The inputs of every layer, [X, h_1, ..., h_{L-1}], and the output scores s; layer l read from ``fetch(l)``."""
        xp = get_array_module(X)
        activations = [X]
        for number in range(len(self.hidden)):
            weight, bias = self.layer_views(number, fetch(number))
            hidden = activations[-1] @ weight
            hidden += bias
            xp.maximum(hidden, 0.0, out=hidden)
            activations.append(hidden)
        weight, bias = self.layer_views(len(self.hidden), fetch(len(self.hidden)))
        return activations, activations[-1] @ weight + bias

    def forward(self, params, X):
        """The inputs of every layer, [X, h_1, ..., h_{L-1}], and the output scores s."""
        bounds = self.layer_bounds()
        return self.forward_by_layer(lambda number: params[slice(*bounds[number])], X)

    def loss_and_grad_by_layer(self, fetch, X, y, grad_of, ready):
        """Backpropagation layer by layer (see :meth:`Model.loss_and_grad_by_layer`): layer l's gradient is
        complete, and ``ready(l)`` called, before the backward pass moves on to layer l - 1."""
        X = self.check_inputs(X)
        y = self.check_targets(y, X.shape[0])
        xp = get_array_module(X)
        activations, scores = self.forward_by_layer(fetch, X)
        if self.n_classes is None:
            loss, score_grad = squared_error(scores[:, 0], y)
            delta = score_grad[:, None]
        else:
            loss, delta = softmax_cross_entropy(scores, y)
        penalties = []
        for number in reversed(range(len(activations))):
            weight, _ = self.layer_views(number, fetch(number))
            weight_grad, bias_grad = self.layer_views(number, grad_of(number))
            xp.matmul(activations[number].T, delta, out=weight_grad)
            xp.sum(delta, axis=0, out=bias_grad)
            if self.alpha:
                penalties.append(0.5 * self.alpha * float(xp.vdot(weight, weight)))
                weight_grad += self.alpha * weight
            ready(number)
            if number:
                delta = delta @ weight.T
                delta *= activations[number] > 0
        for penalty in reversed(penalties):  # summed in layer order, as Model.add_penalty does
            loss += penalty
        return loss, scores

    def loss_and_grad(self, params, X, y):
        params, X, y = self.check_batch(params, X, y)
        grad = get_array_module(params).empty(self.n_params)
        bounds = self.layer_bounds()
        loss, _ = self.loss_and_grad_by_layer(lambda number: params[slice(*bounds[number])], X, y,
                                              lambda number: grad[slice(*bounds[number])], lambda number: None)
        return loss, grad

    def scores(self, params, X):
        return self.forward(self.check_params(params), self.check_inputs(X))[1]

    def predict_proba(self, params, X):
        if self.n_classes is None:
            raise ValueError("predict_proba needs a classifier: this MLP is a regression (n_classes=None)")
        scores = self.scores(params, X)
        return special(get_array_module(scores)).softmax(scores, axis=1)

    def predict(self, params, X):
        """Class labels (classification) or fitted values (regression)."""
        scores = self.scores(params, X)
        return scores[:, 0] if self.n_classes is None else get_array_module(scores).argmax(scores, axis=1)
