"""Data for the solvers: row partitions, synthetic problems, per-rank loading from files."""
from .npz import read_npz_range, read_npz_rows
from .partition import row_range
from .synthetic import make_lasso

__all__ = ["make_lasso", "read_npz_range", "read_npz_rows", "row_range"]
