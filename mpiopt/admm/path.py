"""Regularization paths: a decreasing grid of penalty weights, each solve warm-started.

As in glmnet and scikit-learn's lasso_path, the grid runs from lambda_max
(where every coefficient is 0) down to ``lam_min_ratio`` lambda_max, evenly on a
log scale.  The data are validated and the Gram matrix or factorization
prepared once; each solve starts from the previous solution, its dual
variable and its final rho, so later solves take few iterations.

Solver: the working sets' default (``working_set=None``) is decided for the
whole path.  When every shard is dense and tall (rows >= columns), the full
solver runs: its Gram matrix, formed once, serves every weight, and each solve
then costs O(n^2) per iteration, where working sets pay passes over the rows
at every weight (measured at 2 ranks on 100000 x 1000, 20 weights: 1.20 s
against 2.65 s).  Otherwise (wide or sparse shards) the working sets run, the
dual sums of one weight's certificate starting the next for free.
"""
import dataclasses
import time

import numpy as np
from mpi4py import MPI

from ..collectives import REDUCERS, Reducer, get_reducer
from ..core.backend import to_host
from ..core.io import write_json
from .pieces import split_keywords
from .solver import SETTINGS, Problem


@dataclasses.dataclass
class PathResult:
    lams: np.ndarray          # the weights, decreasing
    coefs: np.ndarray         # one row of coefficients per weight (the intercept last, if fitted)
    objectives: np.ndarray
    iterations: np.ndarray
    statuses: list
    seconds: np.ndarray       # time of each solve
    setup_time: float         # validation and factorization, once
    lambda_max: float
    results: list             # the ADMMResult of each weight

    def to_dict(self):
        return {"lams": self.lams, "coefs": self.coefs, "objectives": self.objectives,
                "iterations": self.iterations, "statuses": self.statuses, "seconds": self.seconds,
                "setup_time": self.setup_time, "lambda_max": self.lambda_max}

    def save_json(self, path):
        write_json(path, self.to_dict())


def regularization_path(A_local, b_local, loss="squared", penalty="l1", comm=None, *, n_lams=20,
                        lam_min_ratio=1e-3, lams=None, intercept=False, penalty_options=None, loss_options=None,
                        **settings):
    """Solve for each weight of a decreasing grid (or of ``lams``), warm-starting each solve.

    ``settings`` are the ADMM settings and the options the penalty and the loss declare (``l1_ratio``,
    ``delta``, ``x_solver``, ...; or as the dicts ``penalty_options`` and ``loss_options``), as for
    :func:`mpiopt.admm.solve`."""
    start = time.perf_counter()
    penalty_keywords, loss_keywords, settings = split_keywords(settings, SETTINGS, penalty=penalty, loss=loss)
    problem = Problem(A_local, b_local, loss, comm, intercept=intercept, loss_options=loss_options,
                      blas_threads=settings.get("blas_threads"), **loss_keywords)
    settings = dict(settings, **penalty_keywords, penalty_options=penalty_options)
    largest = problem.lambda_max(penalty, penalty_options={**penalty_keywords, **(penalty_options or {})})
    if lams is None:
        lams = largest * np.logspace(0, np.log10(lam_min_ratio), n_lams)
    lams = np.sort(np.asarray(lams, dtype=float))[::-1]
    setup_time = time.perf_counter() - start
    if settings.get("working_set") is None and problem.loss == "squared":  # (the same on every rank)
        sparse = problem.comm.allreduce(int(problem.shard.design.sparse), op=MPI.MAX)
        if not sparse and all(kind in ("tall", "empty") for kind in problem.kinds):
            settings = dict(settings, working_set=False)  # the Gram matrix pays for itself along a path
    results, seconds, previous = [], [], None
    # One reducer for the whole path (a shared-memory window, a private communicator), not one per weight.
    reducer = settings.get("reducer", "auto")
    own = not isinstance(reducer, Reducer) and reducer in REDUCERS  # an unknown name: the solve refuses it
    if own:
        reducer = get_reducer(reducer, problem.comm, check=False)
    try:
        for lam in lams:
            tick = time.perf_counter()
            previous = problem.solve(penalty, float(lam), warm_start=previous, **dict(settings, reducer=reducer))
            seconds.append(time.perf_counter() - tick)
            results.append(previous)
    finally:
        if own:
            reducer.close()
    return PathResult(
        lams=lams, coefs=np.array([to_host(r.x) for r in results]),
        objectives=np.array([r.objective for r in results]), iterations=np.array([r.iterations for r in results]),
        statuses=[r.status for r in results], seconds=np.array(seconds), setup_time=setup_time,
        lambda_max=largest, results=results)
