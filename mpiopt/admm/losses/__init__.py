"""Loss shards: each rank's data term with its own x-step (see base.py); each registers itself as a "loss"."""
from .base import LossShard
from .squared import SquaredLossShard  # noqa: I001 (registration order: squared, logistic, huber)
from .glm import HuberLossShard, LogisticLossShard

__all__ = ["HuberLossShard", "LogisticLossShard", "LossShard", "SquaredLossShard"]
