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
from ..core.registry import lookup
from .adam import Adam
from .base import Optimizer
from .sgd import SGD


def get_optimizer(name, **options):
    """The optimizer registered as ``name`` (see the table above), built with ``options``."""
    return lookup("optimizer", name)(**options)


__all__ = ["Adam", "Optimizer", "SGD", "get_optimizer"]
