"""The problems in mpiopt's scaling, from benchmarks/sparse_solvers.py (one definition, imported here), and
the data: sparse_solvers.py's ``sparse`` design and benchmarks/text_corpus.py's tf-idf corpus.

P(x) = (1/2) ||Ax - b||^2 + lam ||x||_1 (lasso) or sum_j log(1 + exp(-y_j a_j^T x)) + lam ||x||_1
(L1 logistic, y in {-1, 1}), sums over every row, no intercept; lam = lam_ratio * lambda_max.  Each
solver converts lam to its own scaling as sparse_solvers.py's docstring says.
"""
import sys
from pathlib import Path

import numpy as np

# benchmarks/sparse_solvers.py, text_corpus.py and the modules they import (report, common) sit two folders
# up; appended, not prepended, so that nothing in benchmarks/ shadows an installed package.
_BENCHMARKS = str(Path(__file__).resolve().parents[2])
if _BENCHMARKS not in sys.path:
    sys.path.append(_BENCHMARKS)

import sparse_solvers  # noqa: E402
import text_corpus  # noqa: E402

LOSSES = ("lasso", "logistic")
make_design = sparse_solvers.make_design


def lambda_max(loss, X, y):
    """The smallest lam with x = 0 optimal: ||A^T b||_inf (lasso), ||A^T y||_inf / 2 (logistic)."""
    correlation = float(np.abs(X.T @ y).max())
    return correlation if loss == "lasso" else 0.5 * correlation


def primal(loss, X, y, lam):
    """P as a function of x: sparse_solvers' objective of this loss."""
    objective = sparse_solvers.squared_objective if loss == "lasso" else sparse_solvers.logistic_objective
    return objective(X, y, lam)


def duality_gap(loss, X, y, lam, x, value):
    """P(x) - D(theta) at the rescaled dual point theta of x (Fenchel duality, one product with A^T).

    lasso: theta = r * min(1, lam / ||A^T r||_inf), r = b - Ax, D = (||b||^2 - ||b - theta||^2) / 2;
    logistic: theta = y * s(-y Ax) * min(1, lam / ||A^T (y s(-y Ax))||_inf) with s the sigmoid,
    D = -sum H(y theta), H(p) = p log p + (1 - p) log(1 - p).
    Written here, not taken from mpiopt, so that the gap does not come from the code being measured."""
    margin = X @ x
    if loss == "lasso":
        direction = y - margin
    else:
        direction = y * 0.5 * (1.0 - np.tanh(0.5 * y * margin))  # y * sigmoid(-y * margin), overflow-free
    scale = min(1.0, lam / max(float(np.abs(X.T @ direction).max()), np.finfo(float).tiny))
    theta = scale * direction
    if loss == "lasso":
        dual = 0.5 * (float(y @ y) - float((y - theta) @ (y - theta)))
    else:
        p = np.clip(y * theta, 0.0, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            entropy = np.where(p > 0, p * np.log(p), 0.0) + np.where(p < 1, (1 - p) * np.log1p(-p), 0.0)
        dual = -float(entropy.sum())
    return value - dual


def next_tolerance(stop_val):
    """The tolerances every solver runs: 1, 1e-1, ..., 1e-9 (ProgressCriterion starts at 1).  A decade a
    step, like sparse_solvers.py's ladder, rather than benchopt's default factor 1.5; no rung below 1e-9,
    where liblinear's L1 logistic runs for minutes on the synthetic design."""
    return max(min(1.0, stop_val / 10.0), 1e-9)


def _design_arguments(**overrides):
    """sparse_solvers.py's own argument defaults (sizes, nonzeros, noise, seed 0), with overrides."""
    import argparse
    parser = argparse.ArgumentParser()
    sparse_solvers.add_arguments(parser, "lasso")
    arguments = parser.parse_args([])
    arguments.seed = 0
    for name, value in overrides.items():
        setattr(arguments, name, value)
    return arguments


_DEFAULTS = _design_arguments()
SPARSE_SIZE = (_DEFAULTS.sparse_rows, _DEFAULTS.sparse_cols, _DEFAULTS.sparse_density)


def design(name, **overrides):
    """(A as CSR, b, labels in {-1, 1}) of make_design's design ``name`` ("sparse", "text"), its arguments
    sparse_solvers.py's defaults with ``overrides``; the labels are make_design's logistic variant of the same
    draw (the same A; the text corpus's own labels, in its seeded row order, are both)."""
    arguments = _design_arguments(**overrides)
    A, b = make_design(name, arguments)
    _, labels = make_design(name, arguments, logistic=True)
    return A, b, labels
