"""Splitting rows over ranks: the rule lives in :mod:`mpiopt.core.partition`."""
from ..core.partition import offsets, row_range

__all__ = ["offsets", "row_range"]
