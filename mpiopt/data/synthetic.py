"""Seeded synthetic lasso problems, generated shard by shard.

A has N(0, 1/m) entries (columns of unit norm in expectation) with pairwise
column correlation ``correlation`` (the equicorrelated design of Friedman,
Hastie and Tibshirani 2010: column j = sqrt(1 - c) Z_j + sqrt(c) W, with Z_j and
W independent standard normals), the true x has a fraction ``density`` of
N(0, 1) nonzeros, and b = A x_true + noise * N(0, 1).
Rows are generated in fixed blocks, each from its own stream
(``random_stream(seed, 1, block)``; x_true from ``random_stream(seed, 0)``), so
a rank generates only its own rows and the problem is the same whatever the
number of ranks.
"""
import numpy as np

from ..core.comm import check_collectively, first_problem, resolve_comm
from ..core.random import random_stream
from .partition import row_range

BLOCK_ROWS = 4096


def true_coefficients(n, density, seed):
    """The sparse x_true of the problem with this seed."""
    rng = random_stream(seed, 0)
    x = np.zeros(n)
    nonzeros = max(1, int(round(density * n)))
    support = rng.choice(n, size=min(nonzeros, n), replace=False)
    x[np.sort(support)] = rng.standard_normal(support.size)
    return x


def lasso_rows(m, n, start, stop, density=0.05, noise=0.01, seed=0, correlation=0.0):
    """Rows [start, stop) of the synthetic lasso problem (A, b)."""
    x_true = true_coefficients(n, density, seed)
    A = np.empty((stop - start, n))
    b = np.empty(stop - start)
    scale = 1.0 / np.sqrt(m)
    for block in range(start // BLOCK_ROWS, (stop - 1) // BLOCK_ROWS + 1 if stop > start else 0):
        block_start = block * BLOCK_ROWS
        block_stop = min(block_start + BLOCK_ROWS, m)
        rng = random_stream(seed, 1, block)
        block_A = rng.standard_normal((block_stop - block_start, n))
        if correlation:
            shared = rng.standard_normal((block_stop - block_start, 1))
            block_A *= np.sqrt(1.0 - correlation)
            block_A += np.sqrt(correlation) * shared
        block_A *= scale
        block_b = block_A @ x_true + noise * rng.standard_normal(block_stop - block_start)
        lo, hi = max(start, block_start), min(stop, block_stop)
        A[lo - start:hi - start] = block_A[lo - block_start:hi - block_start]
        b[lo - start:hi - start] = block_b[lo - block_start:hi - block_start]
    return A, b


def make_lasso(m, n, density=0.05, noise=0.01, seed=0, correlation=0.0, comm=None):
    """This rank's even share of the rows of an m x n synthetic lasso problem.

    Returns ``(A_local, b_local, x_true)``; validated collectively.
    """
    comm = resolve_comm(comm)
    problem = first_problem([
        (isinstance(m, int) and m >= 1, f"m must be an integer >= 1, got {m!r}"),
        (isinstance(n, int) and n >= 1, f"n must be an integer >= 1, got {n!r}"),
        (0 < density <= 1, f"density must be in (0, 1], got {density!r}"),
        (noise >= 0, f"noise must be >= 0, got {noise!r}"),
        (0 <= correlation < 1, f"correlation must be in [0, 1), got {correlation!r}"),
    ])
    check_collectively(comm, problem, {"m": m, "n": n, "density": density, "noise": noise, "seed": seed,
                                       "correlation": correlation})
    start, stop = row_range(m, comm.rank, comm.size)
    A, b = lasso_rows(m, n, start, stop, density, noise, seed, correlation)
    return A, b, true_coefficients(n, density, seed)
