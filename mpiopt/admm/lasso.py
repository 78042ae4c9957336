"""Front ends of the general solver for the common problems.

    lasso:               (1/2) ||Ax - b||^2 + lam ||x||_1
    elastic_net:         (1/2) ||Ax - b||^2 + lam (l1_ratio ||x||_1 + (1 - l1_ratio)/2 ||x||^2)
    ridge:               (1/2) ||Ax - b||^2 + (lam/2) ||x||^2
    logistic_regression: sum_j log(1 + exp(-y_j a_j^T x)) + lam ||x||_1 (or another penalty)
    huber_regression:    sum_j huber_delta(a_j^T x - b_j) + lam ||x||_1 (or another penalty)

with the rows of A and b split over the ranks of ``comm``; each rank passes its
own rows.  See :func:`mpiopt.admm.solver.solve` for every option (``penalty_options``
and ``loss_options`` included).  ``l1_ratio`` and ``delta`` left at None take
the defaults their pieces declare.
"""
from .solver import solve


def _given(**options):
    """The options that were given (not None): the others take the piece's declared default."""
    return {name: value for name, value in options.items() if value is not None}


def lasso(A_local, b_local, lam=None, comm=None, *, lam_ratio=None, intercept=False, **settings):
    """Solve the lasso with the rows of A and b split over ``comm``'s ranks.

    Parameters
    ----------
    A_local, b_local : this rank's rows of A (m_i x n, dense or scipy.sparse) and b (m_i); m_i may be 0.
        float32 and non-contiguous arrays are accepted and copied to float64.
    lam : penalty weight (>= 0), or None when ``lam_ratio`` is given.
    comm : mpi4py communicator; None means COMM_WORLD.
    lam_ratio : lam as a fraction of lambda_max = ||A^T b||_inf (computed across
        ranks), the smallest lam for which x = 0 is optimal.
    intercept : fit an unpenalized intercept (the last entry of ``x``).
    **settings : see :class:`mpiopt.admm.ADMMSettings` (rho, alpha, eps_abs,
        eps_rel, max_iter, time_limit, verbose, log_every, reducer, adaptive_rho, ...).

    Returns
    -------
    ADMMResult with ``.x``, ``.objective``, ``.iterations``, ``.status``,
    ``.history``, ``.timings`` and ``.info``; the same on every rank.

    Every rank raises the same :class:`mpiopt.core.CollectiveError` when any
    rank's input is invalid or the ranks disagree on n, lam or the settings.
    """
    return solve(A_local, b_local, "squared", "l1", lam, comm, lam_ratio=lam_ratio, intercept=intercept, **settings)


def elastic_net(A_local, b_local, lam=None, l1_ratio=None, comm=None, *, lam_ratio=None, intercept=False,
                **settings):
    """Elastic net, scikit-learn's parametrisation of the penalty (see the module docstring)."""
    return solve(A_local, b_local, "squared", "elastic_net", lam, comm, lam_ratio=lam_ratio, intercept=intercept,
                 **_given(l1_ratio=l1_ratio), **settings)


def ridge(A_local, b_local, lam, comm=None, *, intercept=False, **settings):
    """Ridge regression."""
    return solve(A_local, b_local, "squared", "l2", lam, comm, intercept=intercept, **settings)


def logistic_regression(A_local, y_local, lam=None, comm=None, *, penalty="l1", lam_ratio=None, intercept=False,
                        **options):
    """Penalized logistic regression; labels in {-1, 1} or {0, 1}."""
    return solve(A_local, y_local, "logistic", penalty, lam, comm, lam_ratio=lam_ratio, intercept=intercept,
                 **options)


def huber_regression(A_local, b_local, lam=None, comm=None, *, delta=None, penalty="l1", lam_ratio=None,
                     intercept=False, **options):
    """Robust regression with the Huber loss (quadratic within ``delta``, linear beyond)."""
    return solve(A_local, b_local, "huber", penalty, lam, comm, lam_ratio=lam_ratio, intercept=intercept,
                 **_given(delta=delta), **options)
