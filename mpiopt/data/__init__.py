"""Data for the solvers: row partitions, synthetic problems, per-rank loading from files."""
from .datasets import Dataset, load_dataset
from .loading import load_rows, split_file
from .minibatch import MinibatchSampler
from .npz import read_npz_range, read_npz_rows
from .partition import row_range
from .svmlight import read_svmlight_rows
from .synthetic import make_lasso

__all__ = ["Dataset", "MinibatchSampler", "load_dataset", "load_rows", "make_lasso", "read_npz_range",
           "read_npz_rows", "read_svmlight_rows", "row_range", "split_file"]
