"""Distributed lasso by consensus ADMM.

    minimize (1/2) ||A x - b||^2 + lam ||x||_1

with the rows of A and b split over the ranks of ``comm``; each rank passes its
own rows.  See :mod:`mpiopt.admm.engine` for the iteration and
:mod:`mpiopt.admm.squared` for the cached x-step.
"""
import time

import numpy
from mpi4py import MPI

from .. import __version__
from ..core import backend
from ..core.comm import check_collectively, first_problem, resolve_comm
from .engine import ConsensusADMM
from .prox import L1Penalty
from .settings import ADMMSettings
from .squared import SquaredLossShard


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _data_problem(A, b, xp):
    """This rank's first problem with its shard, or None."""
    def dtype_ok(array):
        return numpy.issubdtype(array.dtype, numpy.floating)

    def dtype_message(name, array):
        kind = "complex" if numpy.issubdtype(array.dtype, numpy.complexfloating) else "a non-float"
        return f"{name} has {kind} dtype {array.dtype}; pass real floating-point data (float32 or float64)"

    return first_problem([
        (getattr(A, "ndim", None) == 2, lambda: f"A_local must be a 2-D array, got shape {getattr(A, 'shape', None)}"),
        (getattr(b, "ndim", None) == 1, lambda: f"b_local must be a 1-D array, got shape {getattr(b, 'shape', None)}"),
        (lambda: A.shape[0] == b.shape[0],
         lambda: f"A_local has {A.shape[0]} rows but b_local has {b.shape[0]} entries"),
        (lambda: A.shape[1] >= 1, "A_local has no columns"),
        (lambda: dtype_ok(A), lambda: dtype_message("A_local", A)),
        (lambda: dtype_ok(b), lambda: dtype_message("b_local", b)),
        (lambda: _all_finite(A, xp), lambda: _finite_message("A_local", A, xp)),
        (lambda: _all_finite(b, xp), lambda: _finite_message("b_local", b, xp)),
    ])


def _all_finite(array, xp):
    """True when every entry is finite, in one BLAS pass without an array-sized temporary.

    A NaN or inf entry makes its column sum (a product with a vector of ones)
    non-finite; so does an overflowing sum of huge finite values, which
    _finite_message tells apart on the error path.
    """
    if array.size == 0:
        return True
    ones = xp.ones(array.shape[0], dtype=array.dtype)
    with numpy.errstate(over="ignore", invalid="ignore"):
        return bool(xp.isfinite(ones @ array).all())


def _finite_message(name, array, xp):
    if not bool(xp.isfinite(array).all()):
        return f"{name} contains NaN or inf"
    return f"{name} has values so large that their sums overflow; rescale the data"


def _penalty_problem(lam, lam_ratio):
    if (lam is None) == (lam_ratio is None):
        return "give exactly one of lam and lam_ratio"
    name, value = ("lam", lam) if lam is not None else ("lam_ratio", lam_ratio)
    if not _is_number(value) or not value >= 0 or value == float("inf"):
        return f"{name} must be a finite number >= 0, got {value!r}"
    return None


def lasso(A_local, b_local, lam=None, comm=None, *, lam_ratio=None, **settings):
    """Solve the lasso with the rows of A and b split over ``comm``'s ranks.

    Parameters
    ----------
    A_local, b_local : this rank's rows of A (m_i x n) and b (m_i); m_i may be 0.
        float32 and non-contiguous arrays are accepted and copied to float64.
    lam : penalty weight (>= 0), or None when ``lam_ratio`` is given.
    comm : mpi4py communicator; None means COMM_WORLD.
    lam_ratio : lam as a fraction of lambda_max = ||A^T b||_inf (computed across
        ranks), the smallest lam for which x = 0 is optimal.
    **settings : see :class:`mpiopt.admm.ADMMSettings` (rho, alpha, eps_abs,
        eps_rel, max_iter, time_limit, verbose, log_every, reducer).

    Returns
    -------
    ADMMResult with ``.x``, ``.objective``, ``.iterations``, ``.status``,
    ``.history``, ``.timings`` and ``.info``; the same on every rank.

    Every rank raises the same :class:`mpiopt.core.CollectiveError` when any
    rank's input is invalid or the ranks disagree on n, lam or the settings.
    """
    start = time.perf_counter()
    comm = resolve_comm(comm)
    xp = backend.get_array_module(A_local, b_local)
    try:
        options = ADMMSettings.from_kwargs(**settings)
        problem = options.problem()
    except TypeError as error:
        options, problem = None, str(error)
    problem = problem or _penalty_problem(lam, lam_ratio) or _data_problem(A_local, b_local, xp)
    agree = {"lam": lam, "lam_ratio": lam_ratio,
             "settings": options.as_dict() if options else None,
             "n": A_local.shape[1] if problem is None else None}
    check_collectively(comm, problem, agree)

    A = xp.ascontiguousarray(A_local, dtype=xp.float64)
    b = xp.ascontiguousarray(b_local, dtype=xp.float64)
    loss = SquaredLossShard(A, b, xp)
    shards = comm.allgather((loss.rows, loss.kind))
    total_rows = sum(rows for rows, _ in shards)
    kinds = [kind for _, kind in shards]
    check_collectively(comm, "no rank holds any rows of A" if total_rows == 0 and comm.rank == 0 else None)
    gradient = loss.gradient_at_zero().copy()
    comm.Allreduce(MPI.IN_PLACE, gradient, op=MPI.SUM)
    lambda_max = float(xp.abs(gradient).max())
    lam_value = lam if lam is not None else lam_ratio * lambda_max
    engine = ConsensusADMM(loss, L1Penalty(lam_value, xp), options, comm, xp)
    loss.factorize(options.rho)
    setup_time = time.perf_counter() - start

    info = {
        "problem": "lasso", "rows": total_rows, "n": loss.n, "ranks": comm.size,
        "active_ranks": engine.active_ranks, "shards": {k: kinds.count(k) for k in ("tall", "wide", "empty")},
        "lam": lam_value, "lambda_max": lambda_max, "lam_ratio": lam_value / lambda_max if lambda_max else None,
        "settings": options.as_dict(), "backend": xp.__name__, "version": __version__,
    }
    lam_text = f"lam = {lam_value:.4e}" + (f" ({lam_ratio:g} x lambda_max)" if lam_ratio is not None else "")
    banner = [
        f"problem:  rows m = {total_rows}, variables n = {loss.n}, ranks = {comm.size} "
        f"({engine.active_ranks} with rows)",
        f"          {lam_text}, lambda_max = {lambda_max:.4e}",
        f"shards:   tall {kinds.count('tall')}, wide {kinds.count('wide')}, empty {kinds.count('empty')}; "
        f"x-step by cached Cholesky factors",
        f"settings: rho = {options.rho:.3e}, alpha = {options.alpha:.2f}, eps_abs = {options.eps_abs:.1e}, "
        f"eps_rel = {options.eps_rel:.1e}, max_iter = {options.max_iter}, reducer = {options.reducer}",
        f"setup:    {setup_time:.3f} s (validation, Gram matrices, factorization, lambda_max)",
    ]
    return engine.solve(setup_time, info, banner, f"mpiopt {__version__}: consensus ADMM lasso")
