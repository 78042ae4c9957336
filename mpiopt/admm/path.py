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
at every weight (docs/admm.md has the measurements).  Otherwise (wide or sparse shards) the working sets run, the
dual sums of one weight's certificate starting the next for free.
"""
import contextlib
import dataclasses
import time

import numpy as np
from mpi4py import MPI

from ..collectives import REDUCERS, Reducer, get_reducer
from ..core.backend import to_host
from ..core.result import Result, not_in_json
from ..core.signals import SignalFlags
from .path_checkpoint import PathCheckpoint
from .pieces import split_keywords
from .solver import SETTINGS, Problem


@dataclasses.dataclass
class PathResult(Result):
    # status: "converged" when every weight's solve converged, else the status of the first that did not
    #         (info["stop"] its stop, info["not_converged"] the indices of the weights that did not converge)
    # history: one row per weight: lam, iterations, objective, seconds, nonzeros, relative_gap (None: no gap)
    # timings: seconds setup (validation and factorization, once), solve (the solves), total
    # info: lambda_max, the loss, the penalty, the ranks, stop, not_converged
    lams: np.ndarray          # the weights, decreasing
    coefs: np.ndarray         # one row of coefficients per weight (the intercept last, if fitted): the solution
    objectives: np.ndarray
    iterations: np.ndarray    # the iterations of each weight's solve (total_iterations: their sum)
    statuses: list
    seconds: np.ndarray       # time of each solve
    setup_time: float         # validation and factorization, once
    lambda_max: float
    results: list = not_in_json()  # the ADMMResult of each weight

    SOLUTION = "coefs"

    @property
    def total_iterations(self):
        """The ADMM iterations of the whole path."""
        return int(np.sum(self.iterations))

    @classmethod
    def of(cls, lams, results, seconds, setup_time, lambda_max, problem, penalty):
        """The path of the solves ``results`` (one ADMMResult per weight of ``lams``)."""
        not_converged = [k for k, result in enumerate(results) if result.status != "converged"]
        first = results[not_converged[0]] if not_converged else results[-1]
        history = {"lam": [float(lam) for lam in lams], "iterations": [r.iterations for r in results],
                   "objective": [r.objective for r in results], "seconds": list(seconds),
                   "nonzeros": [r.info.get("nonzeros") for r in results],
                   "relative_gap": [r.relative_gap for r in results]}
        info = {"lambda_max": lambda_max, "loss": problem.loss,
                "penalty": penalty if isinstance(penalty, str) else type(penalty).__name__,
                "ranks": problem.comm.size, "stop": first.info.get("stop"), "not_converged": not_converged}
        return cls(status=first.status, history=history, info=info, lams=lams,
                   timings={"setup": setup_time, "solve": float(sum(seconds)), "total": setup_time + sum(seconds)},
                   coefs=np.array([to_host(r.x) for r in results]), objectives=np.array([r.objective for r in results]),
                   iterations=np.array([r.iterations for r in results]), statuses=[r.status for r in results],
                   seconds=np.array(seconds), setup_time=setup_time, lambda_max=lambda_max, results=results)

    def plot_panels(self):
        """The coefficients and each solve's iterations against log10 of the weight."""
        log_lams = np.log10(self.lams).tolist()
        coefs = np.asarray(self.coefs)
        curves = [(log_lams, coefs[:, j].tolist(), None) for j in range(coefs.shape[1]) if coefs[:, j].any()]
        return [{"title": "coefficients", "xlabel": "log10 lambda", "curves": curves or [(log_lams, [0.0] * len(
                    log_lams), None)]},
                {"title": "iterations", "xlabel": "log10 lambda",
                 "curves": [(log_lams, self.iterations.tolist(), None)]}]


def regularization_path(A_local, b_local, loss="squared", penalty="l1", comm=None, *, n_lams=20,
                        lam_min_ratio=1e-3, lams=None, intercept=False, penalty_options=None, loss_options=None,
                        log_stream=None, **settings):
    """Solve for each weight of a decreasing grid (or of ``lams``), warm-starting each solve; returns a
    PathResult.

    ``settings`` are the ADMM settings and the options the penalty and the loss declare (``l1_ratio``,
    ``delta``, ``x_solver``, ...; or as the dicts ``penalty_options`` and ``loss_options``), as for
    :func:`mpiopt.admm.solve`; ``log_stream``: where rank 0's log (``verbose``) goes.  ``checkpoint``: the
    path's file, written after every weight, each solve checkpointing to its own file meanwhile; a path resumes
    from them (:mod:`.path_checkpoint`).  A SIGTERM ends the path at the interrupted weight (status
    ``interrupted``, the weights so far)."""
    start = time.perf_counter()
    penalty_keywords, loss_keywords, settings = split_keywords(settings, SETTINGS, penalty=penalty, loss=loss)
    problem = Problem(A_local, b_local, loss, comm, intercept=intercept, loss_options=loss_options,
                      blas_threads=settings.get("blas_threads"), **loss_keywords)
    settings = dict(settings, **penalty_keywords, penalty_options=penalty_options, log_stream=log_stream)
    largest = problem.lambda_max(penalty, penalty_options={**penalty_keywords, **(penalty_options or {})})
    if lams is None:
        lams = largest * np.logspace(0, np.log10(lam_min_ratio), n_lams)
    lams = np.sort(np.asarray(lams, dtype=float))[::-1]
    setup_time = time.perf_counter() - start
    if settings.get("working_set") is None and problem.loss == "squared":  # (the same on every rank)
        sparse = problem.comm.allreduce(int(problem.shard.design.sparse), op=MPI.MAX)
        if not sparse and all(kind in ("tall", "empty") for kind in problem.kinds):
            settings = dict(settings, working_set=False)  # the Gram matrix pays for itself along a path
    results, seconds, previous, saved = [], [], None, None
    if settings.get("checkpoint") is not None:  # the path's file; each weight's solve its own (path_checkpoint)
        saved = PathCheckpoint(settings.pop("checkpoint"), problem, lams, penalty, settings.get("penalty_options"))
        results, seconds = saved.resume()
        previous = results[-1] if results else None
    # One reducer for the whole path (a shared-memory window, a private communicator), not one per weight.
    # A name is built here and closed at the end (reducer_for's rule; tests/test_core.py counts this module's
    # get_reducer calls); a caller's Reducer is used as it is, an unknown name left for the first solve to refuse.
    reducer = settings.get("reducer", "auto")
    named = not isinstance(reducer, Reducer) and reducer in REDUCERS
    with contextlib.closing(get_reducer(reducer, problem.comm, check=False)) if named \
            else contextlib.nullcontext(reducer) as reducer, SignalFlags(saved is not None):  # for all weights
        for k in range(len(results), len(lams)):
            tick = time.perf_counter()
            step = dict(settings, reducer=reducer, **({} if saved is None else {"checkpoint": saved.weight_file(k)}))
            previous = problem.solve(penalty, float(lams[k]), warm_start=previous, **step)
            seconds.append(time.perf_counter() - tick)
            results.append(previous)
            if previous.status == "interrupted":  # a SIGTERM: its own checkpoint is written
                break
            if saved is not None:
                saved.record(results, seconds)
    return PathResult.of(lams[:len(results)], results, seconds, setup_time, largest, problem, penalty)
