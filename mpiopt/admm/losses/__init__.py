"""Loss shards: each rank's data term with its own x-step (see base.py)."""
from .base import LossShard
from .glm import HuberLossShard, LogisticLossShard
from .squared import SquaredLossShard

__all__ = ["HuberLossShard", "LogisticLossShard", "LossShard", "SquaredLossShard"]
