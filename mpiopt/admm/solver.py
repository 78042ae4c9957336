"""The general consensus-ADMM solver: a loss, a penalty, the rows split over ranks.

    result = solve(A_local, b_local, loss="logistic", penalty="l1", lam_ratio=0.05, intercept=True, comm=comm)

Losses (``loss=``) and penalties (``penalty=``) are looked up by name in the
registry (mpiopt.core.registry), where each registers itself: today ``squared``
(lasso, ridge, elastic net), ``logistic`` (labels in {-1, 1} or {0, 1}),
``huber`` (robust regression, ``delta``); ``l1``, ``l2``, ``elastic_net``
(``l1_ratio``), ``group_lasso`` (``groups``), ``nonnegative``, ``box``
(``lower``, ``upper``), ``none``, and whatever a user registers; a
:mod:`mpiopt.admm.penalties` object is accepted too.  Each piece declares its
options, and the keywords go to the piece that declares them (``l1_ratio=0.3``,
``delta=0.5``) or come as dicts, ``penalty_options={"gamma": 3}`` and
``loss_options={"delta": 0.5}`` (see :mod:`mpiopt.admm.pieces`).  ``intercept=True`` appends
an unpenalized column of ones.  A (m_i x n) may be dense numpy, dense CuPy or
scipy.sparse CSR/CSC.  Validation is collective: every rank raises the same
CollectiveError naming the offending ranks.

The backend follows the data: CuPy shards are solved on the GPU that holds
them (set up, iterated and answered there; ``result.x`` is a CuPy array), with
every loss and penalty.  Give each rank its GPU with
:func:`mpiopt.core.backend.select_device` before moving its shard there.
"""
import dataclasses
import hashlib
import time

import numpy
from mpi4py import MPI

from .. import __version__
from ..core import backend
from ..core.comm import check_collectively, first_problem, resolve_comm
from ..core.registry import lookup, names, unknown
from ..core.threads import blas_threads as blas_threads_for
from ..core.threads import plan_blas_threads, threads_problem
from . import losses  # noqa: F401 (registers the losses)
from . import penalties as penalty_classes
from .design import Design, is_sparse
from .engine import ConsensusADMM
from .gap import certificate_of, column_norms, dual_point, kept_dual_sums, screen
from .penalties import _exact
from .pieces import declared_of, merge, split_keywords
from .point import Point
from .printing import admm_log, banner_lines, footer_lines
from .settings import ADMMSettings
from .workingset import working_set_solve

SETTINGS = frozenset(field.name for field in dataclasses.fields(ADMMSettings))


def _values(array):
    """The stored values of a dense or sparse array (for dtype and finiteness checks)."""
    return array.data if is_sparse(array) else array


def data_problem(A, b, xp, b_name="b_local", found=None):
    """This rank's first problem with its shard, or None.  A's finiteness is checked through its column
    squares (one pass: an inf or NaN entry makes its column's sum non-finite; an overflowing square is told
    apart by the exact check), which are kept in ``found["column_squares"]`` (a dict, when given) for the
    column norms of screening and working sets and the default rho, so validation and the norms share a pass."""
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
        (lambda: _finite_columns(A, xp, found), lambda: backend.finite_message("A_local", _values(A))),
        (lambda: backend.all_finite(b), lambda: backend.finite_message(b_name, b)),
    ])


def _finite_columns(A, xp, found):
    """Whether every entry of A is finite, from its column squares (kept in ``found`` when they are those of
    the float64 copy the Problem keeps), else from backend.all_finite (an overflowing square of a finite
    entry, or no float data)."""
    if not numpy.issubdtype(A.dtype, numpy.floating):
        return backend.all_finite(_values(A))
    squares = Design(A, False, xp).column_squares()
    with numpy.errstate(over="ignore", invalid="ignore"):
        finite = bool(xp.isfinite(squares).all())
    if finite and found is not None and A.dtype == numpy.float64:
        found["column_squares"] = squares
    return finite or backend.all_finite(_values(A))


def penalty_problem(penalty, options, lam_ratio, n_features, merging=None):
    """The first problem with the penalty and its options, or None: the weight (``lam`` or ``lam_ratio``),
    then the other options against the penalty's declaration, then the penalty's own checks.

    ``options`` are the options given (:func:`penalty_options_of`: the weight among them); ``merging`` a
    problem found while merging them (an option given twice)."""
    if isinstance(penalty, penalty_classes.Penalty):
        return "penalty_options go with a penalty name, not a Penalty object" if options else None
    if unknown("penalty", penalty):
        return unknown("penalty", penalty) + " (or a Penalty object)"
    if merging:
        return merging
    kind = lookup("penalty", penalty)
    declaration = declared_of("penalty", penalty)
    every = {**declaration.defaults(), **options}  # for the penalty's own check
    owner = f"penalty {penalty!r}"
    message = declaration.unknown(options, owner)
    if message:
        return message
    if kind.weighted():
        lam = options.get("lam")
        if (lam is None) == (lam_ratio is None):
            return "give exactly one of lam and lam_ratio"
        if lam_ratio is not None and not kind.has_lambda_max():
            having = [name for name in names("penalty") if lookup("penalty", name).has_lambda_max()]
            return (f"lam_ratio needs penalty {' or '.join(having)} (they have a lambda_max); "
                    f"give lam for {penalty}")
        weight = declaration["lam"] if lam is not None else dataclasses.replace(declaration["lam"], name="lam_ratio")
        message = weight.problem(lam if lam is not None else lam_ratio)  # lam_ratio meets lam's constraint
        if message:
            return message
        options = {name: value for name, value in options.items() if name != "lam"}
        declaration = declaration.without("lam")
    return declaration.problem(options, owner) or kind.check(every, n_features)


def _agreeable(value):
    """Whether ``value`` is compared across ranks as it is (a number, a word; not an array)."""
    return value is None or isinstance(value, (bool, int, float, str, numpy.integer, numpy.floating))


def penalty_options_of(penalty, lam, keywords, given):
    """(the penalty's options given, the other keywords (settings), a problem or None) of a solve's
    positional ``lam``, keywords and ``penalty_options`` dict ``given``.  From here on the weight is the
    option ``lam``, wherever it came from (a penalty that does not declare it takes no weight)."""
    routed, _, settings = split_keywords(keywords, SETTINGS, penalty=penalty)
    options, problem = merge("penalty", routed, given)
    if lam is not None and "lam" in options:
        problem = problem or "lam given twice: as the argument and in penalty_options; give each option once"
    elif lam is not None and "lam" in declared_of("penalty", penalty):
        options["lam"] = lam
    return options, settings, problem


def lambda_max(shard, penalty_kind, options, intercept, targets, loss_options, comm):
    """The smallest weight of ``penalty_kind`` for which every coefficient is 0 (None when it has none).

    The gradient of the loss, summed over ranks, at the best model with every
    coefficient 0 (and the best intercept, when there is one) decides it.
    """
    xp = shard.xp
    x0 = xp.zeros(shard.n)
    if intercept:
        x0[-1] = type(shard).null_intercept(targets, comm, loss_options)
    if shard.dual_concavity is not None:  # from the gap's sums, kept for the first certificate at x0
        gradient = -numpy.array(kept_dual_sums(shard, x0, comm, intercept)[0][:shard.n], dtype=float)
    else:
        gradient = backend.to_host(shard.gradient(x0) if shard.active else xp.zeros(shard.n))
        gradient = numpy.array(gradient, dtype=float)
        comm.Allreduce(MPI.IN_PLACE, gradient, op=MPI.SUM)
    return penalty_kind.lambda_max(gradient[:shard.n - int(intercept)], options)


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

    def __init__(self, A_local, b_local, loss="squared", comm=None, *, intercept=False, loss_options=None,
                 blas_threads=None, validate=True, **keywords):
        """``loss_options`` (a dict) and ``keywords`` (``delta=0.5``, ``x_solver="newton"``) are the options
        that ``loss`` declares; a keyword that only another loss declares is left out (see pieces.py).

        ``validate=False``: A_local and b_local are taken as they are (float64, in their layout, not checked
        or copied): columns of a validated Problem's data (:meth:`on_columns`, screening's restricted
        problems); the options are still checked."""
        start = time.perf_counter()
        self.comm = comm = resolve_comm(comm)
        self.xp = xp = backend.get_array_module(A_local, b_local)
        self.n_features = A_local.shape[1] if getattr(A_local, "ndim", None) == 2 else None
        _, routed, rest = split_keywords(keywords, (), loss=loss)
        if rest:
            raise TypeError(f"Problem() got an unexpected keyword argument {next(iter(rest))!r} (the loss "
                            f"{loss!r} takes {', '.join(declared_of('loss', loss)) or 'no options'})")
        given, problem = merge("loss", routed, loss_options)
        problem = unknown("loss", loss) or problem
        kind = None if problem else lookup("loss", loss)
        if kind is not None:
            problem = declared_of("loss", loss).problem(given, f"loss {loss!r}")
        self.loss_options = {**declared_of("loss", loss).defaults(), **given} if kind is not None and not problem \
            else given
        found = {}
        if validate:
            problem = problem or data_problem(A_local, b_local, xp, kind.target_name, found)
            problem = problem or kind.check(b_local, self.loss_options) or threads_problem(blas_threads)
            check_collectively(comm, problem, {"loss": loss, "intercept": bool(intercept),
                                               **{name: value for name, value in self.loss_options.items()
                                                  if _agreeable(value)},
                                               "n": self.n_features if problem is None else None,
                                               "blas_threads": blas_threads})
        elif problem:  # an option of the restricted problem's own (another x_solver): its caller's mistake
            raise ValueError(problem)
        self.blas_threads = blas_threads
        with blas_threads_for(plan_blas_threads(blas_threads, comm) if validate else plan_blas_threads(0)), \
                backend.device_of(A_local):
            self._setup(A_local, b_local, kind, intercept, xp, found.get("column_squares"), copy=validate)
        self.setup_time = time.perf_counter() - start

    def _setup(self, A_local, b_local, kind, intercept, xp, column_squares=None, copy=True):
        """Copy the shard (``copy``), build the loss shard (the Gram matrix or factorization), check that some
        rank has rows."""
        comm = self.comm
        if not copy:
            A, b = A_local, b_local
        elif is_sparse(A_local):
            A = A_local.astype(numpy.float64)
        else:
            A = xp.ascontiguousarray(A_local, dtype=xp.float64)
        if copy:
            b = kind.prepare_targets(xp.ascontiguousarray(b_local, dtype=xp.float64), xp)
        self.loss, self.intercept, self.b = kind.name, bool(intercept), b
        self.shard = kind(Design(A, intercept, xp, column_squares), b, xp, **self.loss_options)
        shards = comm.allgather((self.shard.rows, self.shard.kind))
        self.total_rows = sum(rows for rows, _ in shards)
        self.kinds = [shard_kind for _, shard_kind in shards]
        if copy:  # a restricted problem's rows are its validated parent's
            check_collectively(comm, "no rank holds any rows of A" if self.total_rows == 0 and comm.rank == 0
                               else None)
        self._data = (A_local, b_local)  # for the checksum of a checkpoint, computed only when asked
        self._lambda_max = {}
        self._column_norms = None
        self._column_cache = None  # the working sets' gathered columns and Gram matrix (workingset.py)

    @property
    def delta(self):
        """The loss's ``delta`` (Huber), None for a loss without one."""
        return self.loss_options.get("delta")

    @property
    def x_solver(self):
        """The iterative losses' x-step solver, None for a loss without one."""
        return self.loss_options.get("x_solver")

    def lambda_max(self, penalty="l1", l1_ratio=None, *, penalty_options=None, **keywords):
        """The smallest weight of ``penalty`` for which every coefficient is 0 (None when it has none); its
        options as keywords (``l1_ratio``, also the second argument) or ``penalty_options``, defaults
        otherwise."""
        if l1_ratio is not None:
            keywords["l1_ratio"] = l1_ratio
        kind = lookup("penalty", penalty)
        routed, _, _ = split_keywords(keywords, (), penalty=penalty)
        options = {**declared_of("penalty", penalty).defaults(), **routed, **(penalty_options or {})}
        options.pop("lam", None)
        key = (penalty, repr([(name, None if value is None else _exact(value)) for name, value in options.items()]))
        if key not in self._lambda_max:
            self._lambda_max[key] = lambda_max(self.shard, kind, options, self.intercept, self.b, self.loss_options,
                                               self.comm)
        return self._lambda_max[key]

    def solve(self, penalty="l1", lam=None, *, lam_ratio=None, penalty_options=None, warm_start=None,
              log_stream=None, **keywords):
        """One solve; ``warm_start`` is a previous ADMMResult of this problem (x, u and rho reused).

        The keywords are the ADMM settings and the penalty's options (``l1_ratio``, ``groups``, ``lower``,
        ``upper``, or whatever it declares; see pieces.py); ``penalty_options`` is a dict of the latter.
        Without a ``blas_threads`` setting the problem's (given when it was built) applies.  ``log_stream``:
        where rank 0's log (``verbose``) goes, standard output by default.
        """
        start = time.perf_counter()
        comm = self.comm
        given, settings, merging = penalty_options_of(penalty, lam, keywords, penalty_options)
        settings.setdefault("blas_threads", self.blas_threads)
        settings_object = ADMMSettings.collective(
            comm, penalty_problem(penalty, given, lam_ratio, self.n_features, merging),
            {"penalty": penalty if isinstance(penalty, str) else type(penalty).__name__,
             "lam": given.get("lam", lam), "lam_ratio": lam_ratio}, **settings)
        options = {**declared_of("penalty", penalty).defaults(), **given}
        threads = plan_blas_threads(settings_object.blas_threads, comm)
        warm = None if warm_start is None else Point.of(warm_start, self.xp, self.shard.n)
        with blas_threads_for(threads), backend.device_of(self._data[0]):  # the GPU holding the data, if any
            return self._solve(settings_object, threads, start, penalty, options, lam_ratio, warm, log_stream)

    def solve_with(self, settings, penalty, warm, threads):
        """One solve of ``penalty`` (a Penalty on this problem's columns) with ``settings`` (an ADMMSettings
        made by ``dataclasses.replace`` from one already checked on every rank) from the Point ``warm`` (or
        None), under the BLAS threads ``threads`` already in force: the restricted solves of screening and
        working sets, without :meth:`solve`'s argument checks (collectives) and set-up."""
        return self._solve(settings, threads, time.perf_counter(), penalty, {}, None, warm)

    def _solve(self, settings, threads, start, penalty, options, lam_ratio, warm, log_stream=None):
        """The solve of :meth:`solve` from its checked arguments; ``warm``: the warm start's Point or None."""
        comm, xp, shard = self.comm, self.xp, self.shard
        if isinstance(penalty, penalty_classes.Penalty):
            penalty_object, largest = penalty, None
        else:
            kind = lookup("penalty", penalty)
            largest = self.lambda_max(penalty, penalty_options=options) if kind.has_lambda_max() else None
            if lam_ratio is not None:
                options = dict(options, lam=lam_ratio * largest)
            penalty_object = kind.from_options(options)
        penalty_object.xp = xp
        engine_penalty = penalty_object.leaving_free(1) if self.intercept else penalty_object
        if self.uses_working_set(settings, engine_penalty):
            return working_set_solve(self, settings, threads, start, penalty_object, engine_penalty, options, largest,
                                     warm, log_stream)
        certificate = certificate_of(shard, engine_penalty)
        if settings.screening and not settings.checkpoint and certificate is not None and certificate.screens:
            return self._screened_solve(settings, threads, start, penalty_object, engine_penalty, options, largest,
                                        warm)
        log = admm_log(settings.verbose and comm.rank == 0, stream=log_stream,
                       gap=certificate is not None)
        with ConsensusADMM(shard, engine_penalty, settings, comm, xp, log=log) as engine:  # closed on any error
            return self._run(engine, settings, threads, start, penalty_object, engine_penalty, options, largest,
                             lam_ratio, warm, log)

    def _run(self, engine, settings, threads, start, penalty_object, engine_penalty, options, largest, lam_ratio,
             warm, log):
        """The full solver: the engine warm-started (``warm``, a Point) or resumed, the banner, the iterations,
        the footer."""
        comm, xp, shard = self.comm, self.xp, self.shard
        if warm is not None:
            engine.warm_start(warm.x, warm.u, warm.rho)
        resumed = engine.use_checkpoint(settings.checkpoint, self.fingerprint(engine_penalty)) \
            if settings.checkpoint else False
        setup_time = time.perf_counter() - start + (self.setup_time if warm is None else 0.0)

        kinds, lam_value = self.kinds, options.get("lam")
        info = {
            "problem": f"{self.loss} + {engine_penalty.describe()}", "loss": self.loss, "penalty": penalty_object.name,
            "rows": self.total_rows, "n": shard.n, "features": self.n_features, "intercept": self.intercept,
            "ranks": comm.size, "active_ranks": engine.active_ranks,
            "shards": {k: kinds.count(k) for k in ("tall", "wide", "empty")},
            "lam": lam_value, "lambda_max": largest,
            "lam_ratio": lam_value / largest if largest and lam_value is not None else None,
            "rho_initial": engine.rho, "resumed_at": engine.iteration, "reducer": engine.reducer.name,
            "blas_threads": threads.threads, "blas_threads_reason": threads.reason,
            "settings": settings.as_dict(), "backend": xp.__name__, "version": __version__,
        }
        rho_source = "from the checkpoint" if resumed else "given" if settings.rho else "from the data scale"
        log.banner(f"mpiopt {__version__}: consensus ADMM", banner_lines(
            info, settings, engine_penalty, lam_ratio, kinds, getattr(shard, "method", None) or self.x_solver,
            threads, rho_source, setup_time, settings.checkpoint if resumed else None))
        result = engine.solve()
        result.info = dict(info, **result.info)
        result.timings = dict(setup=setup_time, **result.timings, total=setup_time + result.timings["solve"])
        log.footer(footer_lines(result))
        return result

    def uses_working_set(self, settings, engine_penalty):
        """Whether this solve runs the working-set solver: it needs a duality gap and the penalty's dual levels
        (gap.certificate_of: a loss with a dual, a penalty declaring ``DUAL`` and ``SCREENING``); by default
        (``working_set=None``) only on numpy / scipy data, as it is not measured on the GPU yet, and only for
        a loss whose class says so (``working_sets_by_default``)."""
        certificate = certificate_of(self.shard, engine_penalty)
        if certificate is None or not certificate.screens or settings.working_set is False:
            return False
        return settings.working_set or (backend.is_numpy(self.xp) and self.shard.working_sets_by_default)

    def on_columns(self, A_columns, gram=None, x_solver=None):
        """This problem restricted to the columns ``A_columns`` (this rank's block, already gathered; the
        intercept kept), built without validating or copying again; ``gram``: their Gram matrix (with the
        intercept's row), when the caller has it (a working set grows it incrementally); ``x_solver``: the
        iterative losses' x-step solver there (None: this problem's)."""
        loss_options = dict(self.loss_options)
        if x_solver and x_solver != self.x_solver:  # another x-solver: with its own defaults
            loss_options.update(x_solver=x_solver, x_solver_options=None)
        sub = Problem(A_columns, self.b, self.loss, self.comm, intercept=self.intercept, loss_options=loss_options,
                      blas_threads=self.blas_threads, validate=False)
        if gram is not None and getattr(sub.shard, "method", None) == "cholesky-tall":
            sub.shard._gram = gram
        return sub

    def _restricted(self, kept):
        """This problem on the kept columns (a host boolean mask over the penalized columns), or itself."""
        if kept.all():
            return self
        return self.on_columns(self.shard.design.columns(numpy.flatnonzero(kept)))

    def _screened_solve(self, settings, threads, start, penalty_object, engine_penalty, options, largest, warm):
        """Dynamic gap-safe screening (gap.screen): screen at the starting point (the warm start, else 0),
        then solve in rounds of 10, 20, 40, ... iterations, screening at the end of each round; whenever
        the columns proven zero reach 10% of those still in the problem, the problem is rebuilt on the
        others, warm-started from the current point restricted to them.  The answer is embedded in the full
        vector (screened coefficients exactly 0) and the gap is that of the full problem (collective: every
        rank screens the same columns, decided from all-reduced quantities)."""
        comm, xp, shard = self.comm, self.xp, self.shard
        if self._column_norms is None:
            self._column_norms = column_norms(shard, comm)
        point = Point.of(warm, xp, shard.n)
        tick = time.perf_counter()
        kept, _ = screen(shard, engine_penalty, point.x, comm, self._column_norms)
        screen_time = time.perf_counter() - tick
        result, kept, counts = self._screening_rounds(settings, threads, penalty_object, engine_penalty, point,
                                                      kept)
        iterations, solve_time, rounds, rebuild_time = counts
        tick = time.perf_counter()
        gap, _ = dual_point(shard, engine_penalty, point.x, comm, theta_wanted=False)  # certificate: full problem
        screen_time += rebuild_time + time.perf_counter() - tick
        features, lam_value = shard.design.features, options.get("lam")
        result.x, result.u, result.gap, result.relative_gap = point.x, point.u, gap.gap, gap.relative
        result.iterations = iterations
        result.objective = self._full_objective(engine_penalty, point.x)
        result.info.update(
            problem=f"{self.loss} + {engine_penalty.describe()}", n=shard.n, features=self.n_features,
            lambda_max=largest, lam=lam_value,
            lam_ratio=lam_value / largest if largest and lam_value is not None else None,
            gap=gap.gap, relative_gap=gap.relative, dual_objective=gap.dual, screened=int(features - kept.sum()),
            screening_rounds=rounds, settings=settings.as_dict(), penalty=penalty_object.name,
            nonzeros=int(xp.count_nonzero(point.x)))
        setup = time.perf_counter() - start - solve_time - screen_time
        result.timings.update(setup=setup, solve=solve_time, screening=screen_time,
                              per_iteration=solve_time / max(iterations, 1),
                              total=setup + solve_time + screen_time)
        return result

    def _screening_rounds(self, settings, threads, penalty_object, engine_penalty, point, kept):
        """The rounds of :meth:`_screened_solve` from ``point`` (updated in place) with the columns ``kept``;
        returns (the last round's ADMMResult, the columns kept, (iterations, seconds solving, rounds,
        seconds rebuilding and screening))."""
        comm, shard = self.comm, self.shard
        problem, problem_kept = self, numpy.ones(shard.design.features, dtype=bool)
        iterations, solve_time, rounds, budget, screen_time = 0, 0.0, 0, 10, 0.0
        while True:
            target = kept.copy()
            if not target.any():  # every column screened: keep one (its group: zero at the optimum) to solve on
                target[penalty_object.whole(numpy.array([0]))] = True
            if problem_kept.sum() - target.sum() >= max(1, 0.1 * problem_kept.sum()):
                tick = time.perf_counter()
                problem, problem_kept = self._restricted(target), target
                screen_time += time.perf_counter() - tick
            round_settings = dataclasses.replace(settings, screening=False, checkpoint=None,
                                                 max_iter=min(budget, settings.max_iter - iterations))
            if settings.time_limit:  # the same on every rank (the settings are checked collectively)
                round_settings = dataclasses.replace(round_settings, time_limit=max(
                    settings.time_limit - comm.allreduce(solve_time, op=MPI.MAX), 1e-9))
            result = point.solve_on(problem, numpy.flatnonzero(problem_kept), self.intercept, penalty_object,
                                    round_settings, threads)
            iterations += result.iterations
            solve_time += result.timings["solve"]
            rounds += 1
            if result.status != "max_iterations" or iterations >= settings.max_iter:
                return result, kept, (iterations, solve_time, rounds, screen_time)
            tick = time.perf_counter()
            kept = kept & screen(shard, engine_penalty, point.x, comm, self._column_norms)[0]
            screen_time += time.perf_counter() - tick
            budget *= 2

    def _full_objective(self, penalty, x):
        """The objective of the full problem at x, summed over the ranks (collective)."""
        return self.comm.allreduce(self.shard.value(x), op=MPI.SUM) + penalty.value(x)

    def data_checksum(self):
        """SHA-256 of this rank's shard (for checkpoints: a path's, a solve's)."""
        return _checksum(*self._data)

    def fingerprint(self, penalty):
        """What pins this rank's problem down exactly, for checkpoints (see checkpoint.py)."""
        kind = lookup("loss", self.loss)
        return {"rows": self.shard.rows, "n": self.shard.n, "loss": self.loss,
                "loss_parameters": {name: self.loss_options[name] for name in kind.options
                                    if name not in ("x_solver", "x_solver_options")},
                "intercept": self.intercept, "penalty": penalty.fingerprint(), "checksum": _checksum(*self._data)}


def solve(A_local, b_local, loss="squared", penalty="l1", lam=None, comm=None, *, intercept=False,
          penalty_options=None, loss_options=None, log_stream=None, **options):
    """Minimize sum_i f_i(x) + g(x) by consensus ADMM; see the module docstring.

    ``options`` are ``lam_ratio``, ``warm_start`` (a previous result), the ADMM
    settings and the options the penalty and the loss declare (``l1_ratio``,
    ``groups``, ``lower``, ``upper``, ``delta``, ``x_solver``, a user's own),
    which may also come as the dicts ``penalty_options`` and ``loss_options``;
    with the ``checkpoint`` setting an existing checkpoint file is resumed from.
    ``log_stream``: where rank 0's log (``verbose``) goes, standard output by default.
    Returns an ADMMResult, the same on every rank.
    """
    penalty_keywords, loss_keywords, rest = split_keywords(options, SETTINGS | {"lam_ratio", "warm_start"},
                                                           penalty=penalty, loss=loss)
    problem = Problem(A_local, b_local, loss, comm, intercept=intercept, loss_options=loss_options,
                      blas_threads=options.get("blas_threads"), **loss_keywords)
    return problem.solve(penalty, lam, penalty_options=penalty_options, log_stream=log_stream, **penalty_keywords,
                         **rest)
