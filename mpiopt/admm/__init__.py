"""Consensus ADMM (Boyd et al. 2011): rows split over ranks, z-step by allreduce + prox."""
from .engine import ConsensusADMM
from .lasso import lasso
from .prox import L1Penalty, soft_threshold
from .result import ADMMResult
from .settings import ADMMSettings

__all__ = ["ADMMResult", "ADMMSettings", "ConsensusADMM", "L1Penalty", "lasso", "soft_threshold"]
