"""The general consensus-ADMM solver: a loss, a penalty, the rows split over ranks.

    result = solve(A_local, b_local, loss="logistic", penalty="l1", lam_ratio=0.05, intercept=True, comm=comm)

Losses (``loss=``): ``squared`` (lasso, ridge, elastic net), ``logistic``
(labels in {-1, 1} or {0, 1}), ``huber`` (robust regression, ``delta``).
Penalties (``penalty=``): ``l1``, ``l2``, ``elastic_net`` (``l1_ratio``),
``group_lasso`` (``groups``), ``nonnegative``, ``box`` (``lower``, ``upper``),
``none``, or a :mod:`mpiopt.admm.penalties` object.  ``intercept=True`` appends
an unpenalized column of ones.  A (m_i x n) may be dense (numpy; CuPy for the
squared loss) or scipy.sparse CSR/CSC.  Validation is collective: every rank
raises the same CollectiveError naming the offending ranks.
"""
import hashlib
import time

import numpy
from mpi4py import MPI

from .. import __version__
from ..core import backend
from ..core.comm import check_collectively, first_problem, resolve_comm
from ..core.threads import blas_threads as blas_threads_for
from ..core.threads import plan_blas_threads, threads_problem
from . import penalties as penalty_classes
from .checkpoint import Checkpointer
from .design import Design, is_sparse
from .engine import ConsensusADMM
from .losses import HuberLossShard, LogisticLossShard, SquaredLossShard
from .settings import ADMMSettings

LOSSES = ("squared", "logistic", "huber")
PENALTIES = ("l1", "l2", "elastic_net", "group_lasso", "nonnegative", "box", "none")
LAMBDA_MAX_PENALTIES = ("l1", "elastic_net")


def _is_number(value):
    return isinstance(value, (int, float, numpy.integer, numpy.floating)) and not isinstance(value, bool)


def _values(array):
    """The stored values of a dense or sparse array (for dtype and finiteness checks)."""
    return array.data if is_sparse(array) else array


def data_problem(A, b, xp, b_name="b_local"):
    """This rank's first problem with its shard, or None."""
    def dtype_ok(array):
        return numpy.issubdtype(array.dtype, numpy.floating)

    def dtype_message(name, array):
        kind = "complex" if numpy.issubdtype(array.dtype, numpy.complexfloating) else "a non-float"
        return f"{name} has {kind} dtype {array.dtype}; pass real floating-point data (float32 or float64)"

    return first_problem([
        (getattr(A, "ndim", None) == 2, lambda: f"A_local must be a 2-D array, got shape {getattr(A, 'shape', None)}"),
        (getattr(b, "ndim", None) == 1, lambda: f"{b_name} must be a 1-D array, got shape {getattr(b, 'shape', None)}"),
        (lambda: A.shape[0] == b.shape[0],
         lambda: f"A_local has {A.shape[0]} rows but {b_name} has {b.shape[0]} entries"),
        (lambda: A.shape[1] >= 1, "A_local has no columns"),
        (lambda: dtype_ok(A), lambda: dtype_message("A_local", A)),
        (lambda: dtype_ok(b), lambda: dtype_message(b_name, b)),
        (lambda: _all_finite(_values(A), xp), lambda: _finite_message("A_local", _values(A), xp)),
        (lambda: _all_finite(b, xp), lambda: _finite_message(b_name, b, xp)),
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


def _label_problem(y, xp):
    values = set(numpy.unique(backend.to_host(y)).tolist())
    if not values <= {-1.0, 1.0} and not values <= {0.0, 1.0}:
        shown = sorted(values)[:5]
        return f"labels must be in {{-1, 1}} or {{0, 1}}, got values {shown}"
    return None


def make_penalty(penalty, lam, l1_ratio, groups, lower, upper, n_features):
    """A Penalty object from a name and its parameters (objects pass through)."""
    if isinstance(penalty, penalty_classes.Penalty):
        return penalty
    if penalty == "l1":
        return penalty_classes.L1(lam)
    if penalty == "l2":
        return penalty_classes.L2(lam)
    if penalty == "elastic_net":
        return penalty_classes.ElasticNet(lam, l1_ratio)
    if penalty == "group_lasso":
        return penalty_classes.GroupLasso(lam, groups)
    if penalty == "nonnegative":
        return penalty_classes.NonNegative()
    if penalty == "box":
        return penalty_classes.Box(lower, upper)
    return penalty_classes.Penalty()


def _penalty_problem(penalty, lam, lam_ratio, l1_ratio, groups, n_features):
    if isinstance(penalty, penalty_classes.Penalty):
        return None
    if penalty not in PENALTIES:
        return f"penalty must be one of {', '.join(PENALTIES)} or a Penalty object, got {penalty!r}"
    if penalty in ("l1", "l2", "elastic_net", "group_lasso"):
        if (lam is None) == (lam_ratio is None):
            return "give exactly one of lam and lam_ratio"
        if lam_ratio is not None and penalty not in LAMBDA_MAX_PENALTIES:
            return f"lam_ratio needs penalty l1 or elastic_net (they have a lambda_max); give lam for {penalty}"
        name, value = ("lam", lam) if lam is not None else ("lam_ratio", lam_ratio)
        if not _is_number(value) or not value >= 0 or value == float("inf"):
            return f"{name} must be a finite number >= 0, got {value!r}"
    if penalty == "elastic_net" and not (_is_number(l1_ratio) and 0 < l1_ratio <= 1):
        return f"l1_ratio must be in (0, 1], got {l1_ratio!r}"
    if penalty == "group_lasso" and (groups is None or numpy.shape(groups) != (n_features,)):
        return f"groups must give a group label for each of the {n_features} columns"
    return None


def _null_intercept(loss_name, b, comm, delta):
    """The intercept that minimises the loss when every coefficient is 0 (global)."""
    count = comm.allreduce(int(b.shape[0]))
    if loss_name == "squared":
        return comm.allreduce(float(b.sum())) / count
    if loss_name == "logistic":
        positive = comm.allreduce(int((b > 0).sum())) / count
        positive = min(max(positive, 1e-12), 1 - 1e-12)
        return float(numpy.log(positive / (1 - positive)))
    low = comm.allreduce(float(b.min()) if b.size else numpy.inf, op=MPI.MIN)
    high = comm.allreduce(float(b.max()) if b.size else -numpy.inf, op=MPI.MAX)
    for _ in range(100):  # bisection on the (monotone) derivative sum_j psi(c - b_j)
        middle = 0.5 * (low + high)
        slope = comm.allreduce(float(numpy.clip(middle - b, -delta, delta).sum()))
        low, high = (middle, high) if slope < 0 else (low, middle)
    return 0.5 * (low + high)


def lambda_max(loss, penalty, intercept, b, comm, delta=1.0):
    """The smallest weight of an L1 or elastic-net penalty for which every coefficient is 0."""
    xp = loss.xp
    x0 = xp.zeros(loss.n)
    if intercept:
        x0[-1] = _null_intercept(loss.name, b, comm, delta)
    gradient = backend.to_host(loss.gradient(x0) if loss.active else xp.zeros(loss.n))
    gradient = numpy.array(gradient, dtype=float)
    comm.Allreduce(MPI.IN_PLACE, gradient, op=MPI.SUM)
    features = gradient[:loss.n - int(intercept)]
    largest = float(numpy.abs(features).max())
    return largest / penalty.l1_ratio if isinstance(penalty, penalty_classes.ElasticNet) else largest


def _checksum(A, b):
    """SHA-256 of a shard: its shape, values and, for a sparse matrix, where the values are."""
    digest = hashlib.sha256(repr((type(A).__name__, A.shape, b.shape)).encode())
    arrays = [A.data, A.indices, A.indptr] if is_sparse(A) else [A]
    for array in arrays + [b]:
        digest.update(numpy.ascontiguousarray(backend.to_host(array)).tobytes())
    return digest.hexdigest()


class Problem:
    """Validated shards of one problem with their loss shard, reused across solves.

    Forming the Gram matrix is the expensive part of the setup, so a
    regularization path builds one Problem and solves it for every weight.
    """

    def __init__(self, A_local, b_local, loss="squared", comm=None, *, intercept=False, delta=1.0,
                 x_solver="lbfgs", blas_threads=None):
        start = time.perf_counter()
        self.comm = comm = resolve_comm(comm)
        self.xp = xp = backend.get_array_module(A_local, b_local)
        self.n_features = A_local.shape[1] if getattr(A_local, "ndim", None) == 2 else None
        problem = None if loss in LOSSES else f"loss must be one of {', '.join(LOSSES)}, got {loss!r}"
        problem = problem or data_problem(A_local, b_local, xp, "y_local" if loss == "logistic" else "b_local")
        if problem is None and loss == "logistic":
            problem = _label_problem(b_local, xp)
        if problem is None and loss == "huber" and not (_is_number(delta) and delta > 0):
            problem = f"delta must be > 0, got {delta!r}"
        if problem is None and x_solver not in ("lbfgs", "newton"):
            problem = f"x_solver must be lbfgs or newton, got {x_solver!r}"
        problem = problem or threads_problem(blas_threads)
        check_collectively(comm, problem, {"loss": loss, "intercept": bool(intercept), "delta": delta,
                                           "n": self.n_features if problem is None else None,
                                           "blas_threads": blas_threads})
        self.blas_threads = blas_threads
        with blas_threads_for(plan_blas_threads(blas_threads, comm)):
            self._setup(A_local, b_local, loss, intercept, delta, x_solver, xp)
        self.setup_time = time.perf_counter() - start

    def _setup(self, A_local, b_local, loss, intercept, delta, x_solver, xp):
        """Copy the shard, build the loss shard (the Gram matrix or factorization), check that some rank has rows."""
        comm = self.comm
        if is_sparse(A_local):
            A = A_local.astype(numpy.float64)
        else:
            A = xp.ascontiguousarray(A_local, dtype=xp.float64)
        b = xp.ascontiguousarray(b_local, dtype=xp.float64)
        if loss == "logistic":
            b = xp.where(b > 0, 1.0, -1.0)
        self.loss, self.intercept, self.delta, self.x_solver, self.b = loss, bool(intercept), delta, x_solver, b
        design = Design(A, intercept, xp)
        if loss == "squared":
            self.shard = SquaredLossShard(design, b, xp)
        elif loss == "logistic":
            self.shard = LogisticLossShard(design, b, xp, x_solver=x_solver)
        else:
            self.shard = HuberLossShard(design, b, xp, delta=delta, x_solver=x_solver)
        shards = comm.allgather((self.shard.rows, self.shard.kind))
        self.total_rows = sum(rows for rows, _ in shards)
        self.kinds = [kind for _, kind in shards]
        check_collectively(comm, "no rank holds any rows of A" if self.total_rows == 0 and comm.rank == 0 else None)
        self._data = (A_local, b_local)  # for the checksum of a checkpoint, computed only when asked
        self._lambda_max = {}

    def lambda_max(self, penalty="l1", l1_ratio=0.5):
        """The smallest weight of ``penalty`` (l1 or elastic_net) for which every coefficient is 0."""
        key = (penalty, l1_ratio)
        if key not in self._lambda_max:
            probe = make_penalty(penalty, 1.0, l1_ratio, None, None, None, self.n_features)
            self._lambda_max[key] = lambda_max(self.shard, probe, self.intercept, self.b, self.comm, self.delta)
        return self._lambda_max[key]

    def solve(self, penalty="l1", lam=None, *, lam_ratio=None, l1_ratio=0.5, groups=None, lower=-numpy.inf,
              upper=numpy.inf, warm_start=None, **settings):
        """One solve; ``warm_start`` is a previous ADMMResult of this problem (x, u and rho reused).

        Without a ``blas_threads`` setting the problem's (given when it was built) applies.
        """
        start = time.perf_counter()
        comm = self.comm
        settings.setdefault("blas_threads", self.blas_threads)
        try:
            options = ADMMSettings.from_kwargs(**settings)
            problem = options.problem()
        except TypeError as error:
            options, problem = None, str(error)
        problem = problem or _penalty_problem(penalty, lam, lam_ratio, l1_ratio, groups, self.n_features)
        agree = {"penalty": penalty if isinstance(penalty, str) else type(penalty).__name__, "lam": lam,
                 "lam_ratio": lam_ratio, "settings": options.as_dict() if options else None}
        check_collectively(comm, problem, agree)
        threads = plan_blas_threads(options.blas_threads, comm)
        with blas_threads_for(threads):
            return self._solve(options, threads, start, penalty, lam, lam_ratio, l1_ratio, groups, lower, upper,
                               warm_start)

    def _solve(self, options, threads, start, penalty, lam, lam_ratio, l1_ratio, groups, lower, upper, warm_start):
        comm, xp, shard = self.comm, self.xp, self.shard
        lam_value, largest = lam, None
        if penalty in LAMBDA_MAX_PENALTIES:
            largest = self.lambda_max(penalty, l1_ratio)
            if lam_ratio is not None:
                lam_value = lam_ratio * largest
        penalty_object = make_penalty(penalty, lam_value, l1_ratio, groups, lower, upper, self.n_features)
        penalty_object.xp = xp
        engine_penalty = penalty_classes.Unpenalized(penalty_object) if self.intercept else penalty_object
        engine = ConsensusADMM(shard, engine_penalty, options, comm, xp)
        if warm_start is not None:
            engine.warm_start(warm_start.x, warm_start.u, warm_start.info.get("rho_final"))
        resumed = False
        if options.checkpoint:
            engine.checkpointer = Checkpointer(options.checkpoint, comm, self.fingerprint(engine_penalty))
            resumed = engine.checkpointer.restore(engine)
        setup_time = time.perf_counter() - start + (self.setup_time if warm_start is None else 0.0)

        kinds, loss = self.kinds, self.loss
        info = {
            "problem": f"{loss} + {engine_penalty.describe()}", "loss": loss, "penalty": penalty_object.name,
            "rows": self.total_rows, "n": shard.n, "features": self.n_features, "intercept": self.intercept,
            "ranks": comm.size, "active_ranks": engine.active_ranks,
            "shards": {k: kinds.count(k) for k in ("tall", "wide", "empty")},
            "lam": lam_value, "lambda_max": largest,
            "lam_ratio": lam_value / largest if largest and lam_value is not None else None,
            "rho_initial": engine.rho, "resumed_at": engine.iteration,
            "blas_threads": threads.threads, "blas_threads_reason": threads.reason,
            "settings": options.as_dict(), "backend": xp.__name__, "version": __version__,
        }
        lam_text = "" if lam_value is None else f", lam = {lam_value:.4e}" + (
            f" ({lam_ratio:g} x lambda_max = {largest:.4e})" if lam_ratio is not None else "")
        rho_source = "from the checkpoint" if resumed else "given" if options.rho else "from the data scale"
        banner = [
            f"problem:  {loss} loss + {engine_penalty.describe()}",
            f"          rows m = {self.total_rows}, variables n = {shard.n}"
            + (" (with intercept)" if self.intercept else "") + f", ranks = {comm.size} "
            f"({engine.active_ranks} with rows){lam_text}",
            f"shards:   tall {kinds.count('tall')}, wide {kinds.count('wide')}, empty {kinds.count('empty')}; "
            f"x-step: {getattr(shard, 'method', None) or self.x_solver}",
            f"threads:  {threads.describe()}",
            f"settings: rho = {engine.rho:.3e} ({rho_source}), "
            f"adaptive rho {options.adaptive_rho}, alpha = {options.alpha:.2f}, eps_abs = {options.eps_abs:.1e}, "
            f"eps_rel = {options.eps_rel:.1e},",
            f"          max_iter = {options.max_iter}, reducer = {options.reducer}",
            f"setup:    {setup_time:.3f} s" + (f"; resumed from {options.checkpoint} at iteration {engine.iteration}"
                                               if resumed else ""),
        ]
        result = engine.solve(setup_time, info, banner, f"mpiopt {__version__}: consensus ADMM")
        result.u = engine.u
        return result

    def fingerprint(self, penalty):
        """What pins this rank's problem down exactly, for checkpoints (see checkpoint.py)."""
        return {"rows": self.shard.rows, "n": self.shard.n, "loss": self.loss,
                "loss_parameters": {"delta": float(self.delta)} if self.loss == "huber" else {},
                "intercept": self.intercept, "penalty": penalty.fingerprint(), "checksum": _checksum(*self._data)}


def solve(A_local, b_local, loss="squared", penalty="l1", lam=None, comm=None, *, intercept=False, delta=1.0,
          x_solver="lbfgs", **options):
    """Minimize sum_i f_i(x) + g(x) by consensus ADMM; see the module docstring.

    ``options`` are the penalty's (lam_ratio, l1_ratio, groups, lower, upper),
    ``warm_start`` (a previous result) and the ADMM settings; with the
    ``checkpoint`` setting an existing checkpoint file is resumed from.
    Returns an ADMMResult, the same on every rank.
    """
    problem = Problem(A_local, b_local, loss, comm, intercept=intercept, delta=delta, x_solver=x_solver,
                      blas_threads=options.get("blas_threads"))
    return problem.solve(penalty, lam, **options)
