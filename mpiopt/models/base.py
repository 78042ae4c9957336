"""What a model is: flat parameters and a batch in, a loss and a gradient out.

A model knows nothing of ranks.  Its parameters are one flat float64 vector of
``n_params`` entries, so that any reducer or compressor can move them and an
optimizer can update them (or one shard of them) in place; the model reads its
weight matrices as views into that vector (:meth:`Model.views`), never copies.

A model provides:

* ``n_params``, ``n_features`` and ``n_classes`` (None for a regression);
* ``init_params(seed)``: a new starting vector, seeded through
  :func:`mpiopt.core.random.random_stream`;
* ``loss_and_grad(params, X, y)``: the mean loss over the batch's rows plus
  ``alpha / 2`` times the squared norm of the weights (never the intercepts),
  and its gradient as a new flat vector.  An empty batch has a data term of 0
  (so a rank whose share of a global batch is empty contributes only the
  penalty, and a trainer weighting each rank by its row count stays exact);
* ``predict(params, X)`` and, for classifiers, ``predict_proba(params, X)``.

``X`` is a dense 2-D array of ``n_features`` columns; classification labels
are integers in ``[0, n_classes)``, regression targets floats.

**Backends.**  The models follow their arrays: with numpy parameters and data
they compute with numpy, with CuPy ones on the GPU (``xp =
get_array_module(params)`` on the data path; the heads use scipy.special or
cupyx.scipy.special).  Parameters and data must then be on the same side; the
gradient comes back where they are.  ``init_params`` always draws on the host
(numpy, seeded), so a GPU run starts from the same point: move it with
``cupy.asarray``.
"""
import math
import numbers

import numpy as np

from ..core.backend import get_array_module
from ..core.options import Declared, Option, Options


def count_problem(what, value, least):
    """The message unless ``value`` is an integer >= ``least`` (None when it is)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        return f"{what} must be an integer >= {least}, got {value!r}"
    return None


def n_classes_option(default, help_text):
    """The ``n_classes`` option of a classifier: an integer >= 2 (``default`` None: also a regression)."""
    return Option("n_classes", int, default, help_text, low=2,
                  message="n_classes must be an integer >= 2, got {value!r}")


class Model(Declared):
    """Subclasses call ``__init__`` with their parameter shapes and implement the methods below.

    ``options`` declares the constructor's options (:mod:`mpiopt.core.options`): every model takes
    ``n_features`` and ``alpha``; a subclass adds its own (``n_classes``, ``hidden``) and checks them with
    ``check_options`` before calling this ``__init__``, which checks these two."""

    name = "model"
    n_classes = None
    options = Options(
        Option("n_features", int, help="columns of X", low=1,
               message="n_features must be an integer >= 1, got {value!r}"),
        Option("alpha", float, 0.0, "L2 penalty: alpha / 2 times the squared norm of the weights", low=0,
               message="alpha must be a finite number >= 0, got {value!r}"))

    def __init__(self, n_features, shapes, alpha=0.0):
        self.check_options({"n_features": n_features, "alpha": alpha}, Model.options)
        self.n_features, self.alpha = int(n_features), float(alpha)
        self.shapes = list(shapes)
        self.sizes = [math.prod(shape) for shape in self.shapes]
        self.n_params = sum(self.sizes)

    def __repr__(self):
        return f"{type(self).__name__}(n_features={self.n_features}, n_params={self.n_params}, alpha={self.alpha})"

    def views(self, vector):
        """The parameter blocks of ``vector`` (parameters or a gradient), reshaped views in layout order."""
        blocks, start = [], 0
        for shape, size in zip(self.shapes, self.sizes):
            blocks.append(vector[start:start + size].reshape(shape))
            start += size
        return blocks

    def init_params(self, seed):
        raise NotImplementedError

    def loss_and_grad(self, params, X, y):
        raise NotImplementedError

    def predict(self, params, X):
        raise NotImplementedError

    def scores(self, params, X):
        """The model's raw outputs for the rows of ``X`` (what its head turns into a loss)."""
        raise NotImplementedError

    def layer_bounds(self):
        """[(start, stop)]: the entries of each layer in the flat vector, in forward order.

        One layer, the whole vector, unless a model overrides it (the MLP: one
        per ``(W_l, b_l)``).  Trainers that move parameters and gradients layer
        by layer (overlapped bucket reductions, ZeRO stage 3) read the model
        through :meth:`loss_and_grad_by_layer`.
        """
        return [(0, self.n_params)]

    def loss_and_grad_by_layer(self, fetch, X, y, grad_of, ready):
        """(loss, scores) of a batch, the parameters and the gradient moved layer by layer.

        Layer l's parameters are read from ``fetch(l)`` (a flat vector of its
        ``layer_bounds`` entries, asked for just before each use: the forward,
        then the backward); its gradient is written into ``grad_of(l)`` (a flat
        writable array of as many entries) and ``ready(l)`` is called as soon as
        that gradient is complete, layers in backward order.  The gradient is
        the one :meth:`loss_and_grad` gives, bit for bit.  This default serves
        a one-layer model.
        """
        params = fetch(0)
        loss, grad = self.loss_and_grad(params, X, y)
        grad_of(0)[...] = grad
        ready(0)
        return loss, self.scores(params, X)

    def loss(self, params, X, y):
        """The loss alone (evaluation; computes the gradient too)."""
        return self.loss_and_grad(params, X, y)[0]

    def check_params(self, params):
        params = get_array_module(params).asarray(params, dtype=np.float64)
        if params.shape != (self.n_params,):
            raise ValueError(f"{self.name}: params must be a flat vector of n_params={self.n_params} entries, "
                             f"got shape {params.shape}")
        return params

    def check_inputs(self, X):
        X = get_array_module(X).asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"{self.name}: X must be a 2-D array of n_features={self.n_features} columns, "
                             f"got shape {X.shape}")
        return X

    def check_targets(self, y, rows):
        y = get_array_module(y).asarray(y)
        if y.shape != (rows,):
            raise ValueError(f"{self.name}: y must hold one target per row of X ({rows}), got shape {y.shape}")
        if self.n_classes is None:
            return y.astype(np.float64, copy=False)
        if not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"{self.name}: labels must be integers in [0, {self.n_classes}), got dtype {y.dtype}")
        if y.size and (y.min() < 0 or y.max() >= self.n_classes):
            bad = y[(y < 0) | (y >= self.n_classes)][0]
            raise ValueError(f"{self.name}: labels must be integers in [0, {self.n_classes}), got {bad}")
        return y

    def check_batch(self, params, X, y):
        X = self.check_inputs(X)
        return self.check_params(params), X, self.check_targets(y, X.shape[0])

    def add_penalty(self, loss, weights, weight_grads):
        """``loss + alpha/2 sum ||W||^2``; adds ``alpha W`` to each weight's gradient in place."""
        if not self.alpha:
            return loss
        for weight, weight_grad in zip(weights, weight_grads):
            loss += 0.5 * self.alpha * float(get_array_module(weight).vdot(weight, weight))
            weight_grad += self.alpha * weight
        return loss


class LinearModel(Model):
    """Scores ``X W + b`` through one output head; W is (n_features,) for one output, else (n_features, k).

    The layout is ``[W (row-major), b]``.  The starting point is zero (the
    losses are convex; ``seed`` is accepted for the common interface).
    """

    def __init__(self, n_features, n_outputs=None, alpha=0.0):
        outputs = () if n_outputs is None else (n_outputs,)
        super().__init__(n_features, [(n_features, *outputs), outputs], alpha)

    def head(self, scores, y):
        """(mean loss, its gradient in the scores) for a batch's scores and targets."""
        raise NotImplementedError

    def init_params(self, seed):
        return np.zeros(self.n_params)  # on the host, as every model's (see the module docstring)

    def scores(self, params, X):
        coef, intercept = self.views(self.check_params(params))
        return self.check_inputs(X) @ coef + intercept

    def loss_and_grad(self, params, X, y):
        params, X, y = self.check_batch(params, X, y)
        xp = get_array_module(params)
        coef, intercept = self.views(params)
        loss, score_grad = self.head(X @ coef + intercept, y)
        grad = xp.empty(self.n_params)
        coef_grad, intercept_grad = self.views(grad)
        xp.matmul(X.T, score_grad, out=coef_grad)
        xp.sum(score_grad, axis=0, out=intercept_grad)
        return self.add_penalty(loss, [coef], [coef_grad]), grad
