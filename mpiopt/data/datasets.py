"""Small classification data sets that installed packages ship: nothing is downloaded.

``load_dataset(name)`` reads scikit-learn's bundled files (scikit-learn is an
optional extra, ``pip install mpiopt[sklearn]``):

=================  =======  ========  =======  =====================================
name               samples  features  classes  source
=================  =======  ========  =======  =====================================
``digits``         1797     64        10       ``sklearn.datasets.load_digits``
``breast_cancer``  569      30        2        ``sklearn.datasets.load_breast_cancer``
=================  =======  ========  =======  =====================================

The split is a seeded permutation, ``random_stream(seed, "dataset-split",
name).permutation(n)``: its first ``round(test_fraction n)`` rows are the test
set, the rest the training set, both in that permuted order.  With
``standardize``, every feature is centred and scaled by the training set's
mean and standard deviation (a constant feature is only centred), test rows
with the same statistics.

These sets are small, so every rank reads the whole file and computes the
same split, whatever the number of ranks: by default every rank gets the
whole split (what :class:`~mpiopt.data.MinibatchSampler` reads from).  With
``shard=True`` rank r keeps only its ``row_range`` of the training rows and of
the test rows (statistics still from the whole training set), for methods in
which each rank owns its data.  Registered as ``register("dataset", name,
options=Options(...))``: a new set is a function returning ``(X, y)``, and the
options it declares (none for the two above) come from ``load_dataset``'s
``dataset_options``, checked against the declaration on every rank.
"""
import dataclasses

import numpy as np

from ..core.backend import finite_problem
from ..core.comm import check_collectively, first_problem, resolve_comm
from ..core.options import NO_OPTIONS
from ..core.partition import row_range
from ..core.random import random_stream, seed_problem
from ..core.registry import lookup, options_problem, register


@dataclasses.dataclass
class Dataset:
    """One rank's part of a split: float64 features, int64 labels in [0, n_classes).

    ``train_rows`` and ``test_rows`` are this rank's [start, stop) within the
    whole training and test sets of ``n_train`` and ``n_test`` rows (everything
    unless sharded).
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    n_features: int
    n_train: int
    n_test: int
    train_rows: tuple
    test_rows: tuple


def _scikit_learn_datasets():
    try:
        import sklearn.datasets
    except ImportError as error:
        raise ImportError("this data set ships with scikit-learn, which is not installed "
                          f"(pip install 'mpiopt[sklearn]'): {error}") from None
    return sklearn.datasets


@register("dataset", "digits", options=NO_OPTIONS)
def digits():
    """8x8 images of handwritten digits, pixel intensities 0-16 (1797 x 64, 10 classes).

    Read from scikit-learn's own file as ``load_digits`` reads it (the same arrays, bit for bit), without
    importing scikit-learn: that import costs every rank of a run about a second, several times the read.
    Through ``load_digits`` where the file is not where scikit-learn keeps it."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec and spec.origin else None
    if path is None or not path.is_file():
        return _scikit_learn_datasets().load_digits(return_X_y=True)
    data = np.loadtxt(path, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int, copy=False)


@register("dataset", "breast_cancer", options=NO_OPTIONS)
def breast_cancer():
    """Wisconsin diagnostic breast cancer (569 x 30; 0 malignant, 1 benign)."""
    return _scikit_learn_datasets().load_breast_cancer(return_X_y=True)


def _standardize(X_train, X_test):
    mean = X_train.mean(axis=0)
    scale = X_train.std(axis=0)
    scale[scale == 0] = 1.0
    return (X_train - mean) / scale, (X_test - mean) / scale


def load_dataset(name, comm=None, *, test_fraction=0.25, seed=0, standardize=True, shard=False,
                 dataset_options=None):
    """A seeded train/test split of a registered data set, as a :class:`Dataset`; collective.

    ``dataset_options`` are the options the data set declares (a dict; the
    built-in sets take none).  Every rank must call it with the same
    arguments; any problem (an unknown name or option, a bad fraction,
    scikit-learn missing) raises the same CollectiveError on every rank.  See
    the module docstring.
    """
    comm = resolve_comm(comm)
    options = dict(dataset_options or {})
    problem = first_problem([
        (options_problem("dataset", name, options, complete=True) is None,
         lambda: options_problem("dataset", name, options, complete=True)),
        (isinstance(test_fraction, (int, float)) and 0 < test_fraction < 1,
         f"test_fraction must be in (0, 1), got {test_fraction!r}"),
        (seed_problem(seed) is None, lambda: seed_problem(seed)),
    ])
    if problem is None:
        try:
            X, y = lookup("dataset", name)(**options)
        except (ImportError, OSError) as error:
            problem = f"cannot load data set {name!r}: {error}"
        else:  # before the labels' cast to integers, which would turn a NaN into a garbage class
            X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
            problem = finite_problem(f"data set {name!r}: features", X) or (
                finite_problem(f"data set {name!r}: labels", y) if y.dtype.kind == "f" else None)
    check_collectively(comm, problem, {"name": name, "test_fraction": test_fraction, "seed": seed,
                                       "standardize": standardize, "shard": shard,
                                       **({"dataset_options": options} if options else {})})
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y).astype(np.int64)
    order = random_stream(seed, "dataset-split", name).permutation(y.size)
    n_test = min(max(int(round(test_fraction * y.size)), 1), y.size - 1)
    test, train = order[:n_test], order[n_test:]
    X_train, X_test = X[train], X[test]
    if standardize:
        X_train, X_test = _standardize(X_train, X_test)
    y_train, y_test = y[train], y[test]
    train_rows, test_rows = (0, train.size), (0, test.size)
    if shard:
        train_rows = row_range(train.size, comm.rank, comm.size)
        test_rows = row_range(test.size, comm.rank, comm.size)
        X_train, y_train = X_train[slice(*train_rows)], y_train[slice(*train_rows)]
        X_test, y_test = X_test[slice(*test_rows)], y_test[slice(*test_rows)]
    return Dataset(name=name, X_train=X_train, y_train=y_train, X_test=X_test, y_test=y_test,
                   n_classes=int(y.max()) + 1, n_features=X.shape[1], n_train=train.size, n_test=test.size,
                   train_rows=train_rows, test_rows=test_rows)
