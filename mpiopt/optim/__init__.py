"""Optimizers on flat float64 vectors (or one shard of one), with PyTorch's update rules.

``get_optimizer(name, **options)`` builds a registered optimizer:

========  =========================================================================
``sgd``   ``SGD(lr, momentum=0, nesterov=False, weight_decay=0, dampening=0)``
``adam``  ``Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False)``
========  =========================================================================

``step(params, grad)`` updates ``params`` in place; ``state_dict()`` and
``load_state_dict(d)`` checkpoint and resume bit for bit.  See
:mod:`mpiopt.optim.base` and docs/training.md.
"""
from ..core.registry import build, piece_problem
from .adam import Adam
from .base import Optimizer
from .sgd import SGD


def get_optimizer(name, **options):
    """The optimizer registered as ``name`` (see the table above), built with ``options`` once they pass its
    declaration (``registry.options("optimizer", name)``): RegistryError for an unknown name, TypeError for an
    undeclared or missing option, ValueError for a bad value."""
    return build("optimizer", name, options)


def optimizer_problem(name, options):
    """The one-line problem of ``get_optimizer(name, **options)``, or None, building nothing."""
    return piece_problem("optimizer", name, options, complete=True)


__all__ = ["Adam", "Optimizer", "SGD", "get_optimizer", "optimizer_problem"]
