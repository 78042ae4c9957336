"""Consensus ADMM (Boyd et al. 2011): rows split over ranks, z-step by allreduce + prox.

Structure: a loss shard per rank (``losses/``: owns its x-step and cached
factorizations), a penalty on z (``penalties.py``: its proximal operator), the
engine (``engine.py``), settings and result objects, and front ends
(``lasso.py``) over the general :func:`solve`.
"""
from . import penalties
from .engine import ConsensusADMM
from .lasso import elastic_net, huber_regression, lasso, logistic_regression, ridge
from .prox import soft_threshold
from .result import ADMMResult
from .settings import ADMMSettings
from .solver import solve

__all__ = ["ADMMResult", "ADMMSettings", "ConsensusADMM", "elastic_net", "huber_regression", "lasso",
           "logistic_regression", "penalties", "ridge", "soft_threshold", "solve"]
