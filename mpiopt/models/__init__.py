"""Models on flat float64 parameter vectors: a loss, its gradient and predictions per batch.

``get_model(name, **options)`` builds a registered model:

============  ===============================================  ==========================
``linear``    least squares, (1/2n) sum (x.w + b - y)^2         ``n_features, alpha``
``logistic``  binary cross-entropy, labels {0, 1}              ``n_features, alpha``
``softmax``   multinomial cross-entropy                         ``n_features, n_classes, alpha``
``mlp``       ReLU hidden layers, softmax or linear output      ``n_features, n_classes, hidden, alpha``
============  ===============================================  ==========================

Every loss is a mean over the batch plus ``alpha / 2`` times the squared norm
of the weights; see :mod:`mpiopt.models.base` for the interface and
docs/training.md for the formulas and how to add a model.
"""
from ..core.registry import build, piece_problem
from .base import LinearModel, Model
from .linear import LinearRegression
from .logistic import LogisticRegression
from .mlp import MLP
from .softmax import SoftmaxRegression


def get_model(name, **options):
    """The model registered as ``name`` (see the table above), built with ``options`` once they pass its
    declaration (``registry.options("model", name)``): RegistryError for an unknown name, TypeError for an
    undeclared or missing option, ValueError for a bad value."""
    return build("model", name, options)


def model_problem(name, options):
    """The one-line problem of ``get_model(name, **options)``, or None, building nothing."""
    return piece_problem("model", name, options, complete=True)


__all__ = ["LinearModel", "LinearRegression", "LogisticRegression", "MLP", "Model", "SoftmaxRegression", "get_model",
           "model_problem"]
