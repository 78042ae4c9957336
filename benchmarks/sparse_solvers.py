"""Consensus ADMM beside the sparse-regression solvers (skglm, celer, scikit-learn): shared code of
``admm_lasso.py --designs`` and ``admm_general.py --part logistic-designs / path-designs``.

Problems, all in ONE scaling (mpiopt's, sums over every row):

    lasso:       P(x) = (1/2) ||Ax - b||^2 + lam ||x||_1
    L1 logistic: P(x) = sum_j log(1 + exp(-y_j a_j^T x)) + lam ||x||_1,  y in {-1, 1}

Conversions (m rows): scikit-learn Lasso / lasso_path, celer Lasso and skglm Lasso minimize
(1/(2m)) ||Ax - b||^2 + alpha ||x||_1 = P(x) / m with alpha = lam / m; skglm
SparseLogisticRegression minimizes (1/m) sum log(1 + exp(-y Ax)) + alpha ||x||_1 = P / m with
alpha = lam / m; scikit-learn LogisticRegression (L1) and celer LogisticRegression minimize
C sum log(...) + ||x||_1 = P / lam with C = 1 / lam.  No intercept anywhere.  Every solver's
coefficients are scored by the same P, evaluated here, never by the solver's own report.

lam = lam_ratio * lambda_max, lambda_max = ||A^T b||_inf (lasso), ||A^T y||_inf / 2 (logistic); --lam-ratios runs
several in one run (each its own P* and table row), the design made once.  The path: --n-lams weights
lambda_max * logspace(0, log10(--lam-min-ratio)), every solver warm-starting each weight from the one before.

P* (per design, per lambda on a path) is the smallest P found by any run: reference runs at
tolerance 1e-12 (skglm and celer where installed; scikit-learn with the Gram matrix on the tall
dense designs, or where neither is installed), and every timed run.  Relative objective gap =
(P(x) - P*) / |P*|.

Time to the target (1e-6): each solver runs a ladder of tolerances, each run from scratch
and timed whole (median of --repeat; the first untimed warm-up fit compiles numba and touches
pages); the ladder stops at the first rung within the target of the then-known P*.  A solver's
time to the target is its fastest run whose gap, against the final P*, is <= the target.

mpiopt ADMM runs at 2 (or --np) ranks, rows split by ``mpiopt.core.partition.row_range``; its
timed call is the whole ``lasso`` / ``logistic_regression`` / ``regularization_path`` (validation,
Gram and factorization included), the time the slowest rank's after a barrier; its ladder is
over ``gap_tol`` (the relative duality-gap certificate) with the residual rule off
(eps_abs = eps_rel = 0), the other settings mpiopt's defaults.  When ``ADMMSettings`` has a
``working_set`` field, ADMM runs twice: working_set=False and working_set=True.
The competitors run on rank 0 with every core for BLAS while the other ranks sleep, on a
Fortran-ordered copy (dense) or a CSC copy (sparse) made before the clock starts.

Designs (each seeded with numpy's default_rng(seed + design index)):
  independent:  tall m x n, i.i.d. N(0, 1) entries;
  corr0.5/0.9:  tall, Toeplitz column correlation rho^|i-j| (an AR(1) process across columns);
  wide:         m_w x n_w with n_w > m_w, i.i.d. N(0, 1);
  sparse:       CSR, m_s x n_s, column k present in a row with probability proportional to
                (k+1)^-1, scaled to the density (clipped at 1), N(0, 1) values.
  text:         CSR, the tf-idf corpus of text_corpus.py (about 1e5 x 6.6e4, density 7e-4, built from
                the installed numpy, scipy, scikit-learn and stdlib, cached), its rows in a seeded random
                order (sorted, each rank's block would hold one source alone), the first --text-rows kept
                (with the terms they hold);
                b = its labels y in {-1, 1} (+1: numpy or scipy), the lasso's target too.
x_true has --nonzeros N(0, 1) entries at random columns; b = A x_true + noise with the
noise's standard deviation --noise-ratio * std(A x_true); logistic labels sign(b).
"""
import dataclasses
import importlib
import os
import statistics
import time
import warnings

import numpy as np

from report import COMPETITOR_MODULES as MODULES, sparse_solver_tables as render_tables  # the tables: report's

DESIGNS = ("independent", "corr0.5", "corr0.9", "wide", "sparse", "text")
DENSE = ("independent", "corr0.5", "corr0.9", "wide")
SYNTHETIC = DENSE + ("sparse",)
TOLERANCES = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-10)  # loose first: the time is the loosest rung's
LIBLINEAR_TOLERANCES = TOLERANCES
COMPETITORS = ("scikit-learn", "celer", "skglm")
# The target's yardstick, (family, dense design?): the packages whose fastest run ADMM must match.  Sparse designs:
# the fastest of all three, and skglm's warm-started path; dense: all three, and lasso_path (Fortran order).
YARDSTICKS = {("lasso", True): COMPETITORS, ("lasso", False): COMPETITORS, ("logistic", True): COMPETITORS,
              ("logistic", False): COMPETITORS, ("path", True): ("scikit-learn",), ("path", False): ("skglm",)}


def add_arguments(parser, family):
    """The options of the designs suite (the tall size is the script's --rows / --cols)."""
    group = parser.add_argument_group("designs suite")
    group.add_argument("--designs", default=None,
                       help=f"comma-separated subset of {','.join(DESIGNS)}, or 'all' (the synthetic ones, "
                            f"without text); runs the suite")
    group.add_argument("--wide-rows", type=int, default=2000)
    group.add_argument("--wide-cols", type=int, default=20000)
    group.add_argument("--sparse-rows", type=int, default=100000)
    group.add_argument("--sparse-cols", type=int, default=10000)
    group.add_argument("--sparse-density", type=float, default=1e-3)
    group.add_argument("--text-rows", type=int, default=0, help="text: the corpus's first rows kept (0: all)")
    group.add_argument("--nonzeros", type=int, default=20, help="nonzeros of x_true")
    group.add_argument("--noise-ratio", type=float, default=0.3)
    group.add_argument("--competitors", default=",".join(COMPETITORS))
    group.add_argument("--pretend-missing", default="", help="competitors to treat as not installed (tests)")
    group.add_argument("--max-seconds", type=float, default=60.0,
                       help="a run longer than this is not repeated and ends its ladder (ADMM: its time_limit)")
    group.add_argument("--lam-ratios", type=ratio_list, default=None,
                       help="comma-separated lam / lambda_max, each its own run on the same design "
                            "(default: --lam-ratio alone; not the path)")
    group.add_argument("--lam-min-ratio", type=float, default=1e-3, help="path: the smallest lam / lambda_max")
    group.add_argument("--n-lams", type=int, default=20, help="path: number of weights")
    group.add_argument("--variants", default=None,
                       help=f"mpiopt's configurations, comma-separated: {', '.join(VARIANTS)} (default: default and "
                            f"full; logistic adds ws-admm, the working sets' ADMM restricted solves)")
    group.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (seconds; for the tests)")
    return group


def apply_quick(args):
    if args.quick:
        args.rows, args.cols = 600, 20
        args.wide_rows, args.wide_cols = 60, 200
        args.sparse_rows, args.sparse_cols, args.sparse_density = 2000, 300, 0.02
        args.nonzeros, args.repeat, args.n_lams, args.text_rows = 5, 1, 5, 2000
    return args


def ratio_list(text):
    ratios = [float(value) for value in text.split(",") if value.strip()]
    if not ratios or any(not 0 < value <= 1 for value in ratios):
        raise ValueError(f"--lam-ratios wants fractions of lambda_max in (0, 1], got {text!r}")
    return ratios


def lam_ratios(args, family):
    """The weights of one design's runs, as fractions of lambda_max (the path: one run over its grid)."""
    if family == "path":
        return [None]
    return args.lam_ratios or [args.lam_ratio]


def chosen_designs(text):
    """--designs: a comma-separated list; 'all' or None: the synthetic ones (text, which builds a corpus and
    takes minutes, only when named)."""
    if text in (None, "", "all"):
        return SYNTHETIC
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in DESIGNS]
    if unknown:
        raise SystemExit(f"unknown design(s) {unknown}; known: {', '.join(DESIGNS)}")
    return names


# ---------------------------------------------------------------- data


def make_design(name, args, logistic=False, comm=None):
    """The full design (every rank makes the same one): (A, b) with A dense C-ordered or CSR.

    ``comm``: the text corpus is built (or read from its cache) on rank 0 first, then on the others."""
    import scipy.sparse as sp
    seed = args.seed + 1000 * DESIGNS.index(name)
    rng = np.random.default_rng(seed)
    if name == "text":
        return text_design(args, rng, comm)
    if name == "sparse":
        m, n = args.sparse_rows, args.sparse_cols
        p = (np.arange(n) + 1.0) ** -1.0
        p = np.minimum(1.0, p * args.sparse_density * n / p.sum())
        counts = rng.binomial(m, p)
        rows = rng.integers(0, m, counts.sum())
        cols = np.repeat(np.arange(n), counts)
        A = sp.coo_matrix((rng.standard_normal(rows.size), (rows, cols)), shape=(m, n)).tocsr()
        A.sum_duplicates()
    else:
        m, n = (args.wide_rows, args.wide_cols) if name == "wide" else (args.rows, args.cols)
        A = rng.standard_normal((n, m)).T  # Fortran order: the column recursion below walks contiguous columns
        if name.startswith("corr"):
            rho = float(name[4:])
            scale = np.sqrt(1.0 - rho * rho)
            for j in range(1, n):
                A[:, j] *= scale
                A[:, j] += rho * A[:, j - 1]
        A = np.ascontiguousarray(A)
    x_true = np.zeros(n)
    support = rng.choice(n, size=min(args.nonzeros, n), replace=False)
    x_true[support] = rng.standard_normal(support.size)
    signal = A @ x_true
    b = signal + args.noise_ratio * (float(np.std(signal)) or 1.0) * rng.standard_normal(m)
    if logistic:
        b = np.where(b >= 0, 1.0, -1.0)
    return A, b


def text_design(args, rng, comm):
    from text_corpus import load_text_corpus
    if comm is not None and comm.rank != 0:
        comm.barrier()  # rank 0 has built the cache
    A, y, _ = load_text_corpus()
    if comm is not None and comm.rank == 0:
        comm.barrier()
    order = rng.permutation(A.shape[0])
    if args.text_rows:
        order = order[:args.text_rows]
    A = A[order]
    if args.text_rows:  # the terms of the rows kept
        A = A[:, np.flatnonzero(np.diff(A.tocsc().indptr))]
    A.sort_indices()
    return A, y[order]


def describe(name, A):
    m, n = A.shape
    if name == "text":
        return f"text tf-idf CSR {m} x {n}, density {A.nnz / (m * n):.2g}, nnz {A.nnz}"
    if name == "sparse":
        return f"sparse CSR {m} x {n}, density {A.nnz / (m * n):.2g}, power-law column frequencies"
    return {"independent": "independent columns", "corr0.5": "Toeplitz correlation 0.5",
            "corr0.9": "Toeplitz correlation 0.9", "wide": "wide, independent columns"}[name] + f", {m} x {n}"


def preferred_layout(A):
    """The competitors' layout, made before any clock starts: Fortran order, or CSC."""
    import scipy.sparse as sp
    return A.tocsc() if sp.issparse(A) else np.asfortranarray(A)


def squared_objective(A, b, lam):
    def value(x):
        residual = A @ x - b
        return 0.5 * float(residual @ residual) + lam * float(np.abs(x).sum())
    return value


def logistic_objective(A, y, lam):
    def value(x):
        return float(np.logaddexp(0.0, -y * (A @ x)).sum()) + lam * float(np.abs(x).sum())
    return value


def relative_gap(value, best):
    return (value - best) / abs(best)


# ---------------------------------------------------------------- competitors


def installed(names, pretend_missing=()):
    status = {}
    for name in names:
        if name in pretend_missing:
            status[name] = False
            continue
        try:
            importlib.import_module(MODULES[name])
            status[name] = True
        except ImportError:
            status[name] = False
    return status


def lasso_fitters(m, lam, wide_or_sparse):
    """{solver label: (package, fit(X, b, tol) -> (coef, iterations))}, scikit-learn's strongest variants."""
    alpha = lam / m

    def sklearn(precompute):
        def fit(X, b, tol):
            from sklearn.linear_model import Lasso
            model = Lasso(alpha=alpha, fit_intercept=False, tol=tol, max_iter=100000, precompute=precompute)
            model.fit(X, b)
            return model.coef_, int(model.n_iter_)
        return fit

    def celer(X, b, tol):
        from celer import Lasso
        model = Lasso(alpha=alpha, fit_intercept=False, tol=tol)
        model.fit(X, b)
        return model.coef_, int(np.max(model.n_iter_))

    def skglm(X, b, tol):
        from skglm import Lasso
        model = Lasso(alpha=alpha, fit_intercept=False, tol=tol)
        model.fit(X, b)
        return model.coef_, int(np.max(model.n_iter_))

    fitters = {"scikit-learn Lasso (precompute=False)": ("scikit-learn", sklearn(False))}
    if not wide_or_sparse:  # a Gram matrix of n > m columns (or of a sparse design) costs more than it saves
        fitters["scikit-learn Lasso (precompute=True)"] = ("scikit-learn", sklearn(True))
    fitters["celer Lasso"] = ("celer", celer)
    fitters["skglm Lasso"] = ("skglm", skglm)
    return fitters


def logistic_fitters(m, lam, sparse):
    """As lasso_fitters; scikit-learn's saga only on dense designs (on sparse ones liblinear is two orders of magnitude faster)."""
    def sklearn(solver):
        def fit(X, y, tol):
            from sklearn.linear_model import LogisticRegression
            model = LogisticRegression(C=1.0 / lam, l1_ratio=1.0, solver=solver, fit_intercept=False, tol=tol,
                                       max_iter=1000 if solver == "saga" else 100000)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(X, y)
            return model.coef_.ravel(), int(np.max(model.n_iter_))
        return fit

    def celer(X, y, tol):
        from celer import LogisticRegression
        model = LogisticRegression(C=1.0 / lam, tol=tol)
        model.fit(X, y)
        n_iter = getattr(model, "n_iter_", None)  # celer's LogisticRegression has none
        return model.coef_.ravel(), None if n_iter is None else int(np.max(n_iter))

    def skglm(X, y, tol):
        from skglm import SparseLogisticRegression
        model = SparseLogisticRegression(alpha=lam / m, fit_intercept=False, tol=tol)
        model.fit(X, y)
        return model.coef_.ravel(), int(np.max(model.n_iter_))

    fitters = {"scikit-learn LogisticRegression (liblinear)": ("scikit-learn", sklearn("liblinear"))}
    if not sparse:
        fitters["scikit-learn LogisticRegression (saga)"] = ("scikit-learn", sklearn("saga"))
    return fitters | {"celer LogisticRegression": ("celer", celer), "skglm SparseLogisticRegression": ("skglm", skglm)}


def path_fitters(m, lams, tall_dense):
    alphas = np.asarray(lams) / m

    def sklearn(X, b, tol):
        from sklearn.linear_model import lasso_path
        _, coefs, _, n_iters = lasso_path(X, b, alphas=alphas, tol=tol, max_iter=100000, return_n_iter=True,
                                          precompute=tall_dense)
        return coefs.T, int(np.sum(n_iters))

    def skglm(X, b, tol):
        from skglm import Lasso
        _, coefs, _, n_iters = Lasso(fit_intercept=False, tol=tol).path(X, b, alphas)
        return np.asarray(coefs).T, int(np.sum(n_iters))

    def celer(X, b, tol):  # the estimator's own path: its defaults (pruning, working sets), warm-started
        from celer import Lasso
        _, coefs, _, n_iters = Lasso(fit_intercept=False, tol=tol).path(X, b, alphas)
        return np.asarray(coefs).T, int(np.sum(n_iters))

    return {"scikit-learn lasso_path": ("scikit-learn", sklearn), "celer Lasso.path": ("celer", celer),
            "skglm Lasso.path": ("skglm", skglm)}


def timed_fit(fit, X, b, tol, repeat, cap):
    """(coef, iterations, median seconds): from scratch each time; a run over ``cap`` is not repeated."""
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        coef, iterations = fit(X, b, tol)
        seconds.append(time.perf_counter() - start)
        if seconds[-1] > cap:
            break
    return np.array(coef, dtype=float), iterations, statistics.median(seconds)


def warm_up(fit, X, b, tol):
    """An untimed small fit: numba compiles (skglm) and libraries load before any clock starts."""
    import scipy.sparse as sp
    rows = min(X.shape[0], 200)
    small = X[:rows].tocsc() if sp.issparse(X) else np.asfortranarray(X[:rows])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fit(small, b[:rows], tol)
        except Exception:  # noqa: BLE001 - the real run reports the error
            pass


def run_competitors(fitters, available, X, b, score, best, args, say, tolerances=TOLERANCES):
    """Every fitter's ladder on rank 0 with all cores; ``score(coef) -> list of objectives`` (one per weight).

    ``best``: the reference objective(s) known so far, updated as runs find lower ones.
    """
    from threadpoolctl import threadpool_limits

    from mpiopt.core.threads import available_cores
    runs, best = [], np.array(best, dtype=float)
    with threadpool_limits(limits=available_cores()):
        for label, (package, fit) in fitters.items():
            if not available[package]:
                runs.append({"solver": label, "package": package, "not_installed": True})
                continue
            warm_up(fit, X, b, tolerances[0])
            for tol in tolerances:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        coef, iterations, seconds = timed_fit(fit, X, b, tol, args.repeat, args.max_seconds)
                except Exception as error:  # noqa: BLE001 - reported in the table, the others go on
                    runs.append({"solver": label, "package": package, "tolerance": tol, "error": repr(error)})
                    say(f"    {label} tol {tol:.0e}: failed: {error!r}")
                    break
                values = np.atleast_1d(score(coef))
                best = np.minimum(best, values)
                gap = float(np.max((values - best) / np.abs(best)))
                runs.append({"solver": label, "package": package, "tolerance": tol, "iterations": iterations,
                             "seconds": seconds, "objectives": values.tolist()})
                say(f"    {label} tol {tol:.0e}: {iterations} iterations, {seconds:.3f} s, gap {gap:.1e}")
                if gap <= args.target or seconds > args.max_seconds:
                    break
    return runs, best


def reference_objectives(fitters, available, X, b, score, labels, tol=1e-12):
    """Objective(s) of tight-tolerance fits by the given solvers (not timed)."""
    from threadpoolctl import threadpool_limits

    from mpiopt.core.threads import available_cores
    best, used = None, []
    with threadpool_limits(limits=available_cores()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label in labels:
            package, fit = fitters[label]
            if not available[package]:
                continue
            try:
                coef, _ = fit(X, b, tol)
            except Exception:  # noqa: BLE001
                continue
            values = np.atleast_1d(score(np.asarray(coef, dtype=float)))
            best = values if best is None else np.minimum(best, values)
            used.append(label)
    return best, used


# ---------------------------------------------------------------- mpiopt ADMM


VARIANTS = {  # mpiopt's configurations: the defaults, and the others for comparison
    "default": {},
    "ws-admm": {"working_set": True, "inner_solver": "admm"},  # working sets with ADMM restricted solves
    "full": {"working_set": False},                              # the full solver
}


def working_set_variants(text, family):
    """The chosen VARIANTS' names (--variants; None: the family's)."""
    if text is None:
        text = "default,ws-admm,full" if family == "logistic" else "default,full"
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    return names


def admm_label(base, variant):
    return f"{base} ({variant})"


def run_admm_ladder(label, call, comm, score, best, args, say, tolerances=TOLERANCES):
    """``call(tol)`` on every rank, timed whole (slowest rank, after a barrier); ``score`` collective."""
    from common import timed
    runs, best = [], np.array(best, dtype=float)
    try:
        call(tolerances[0], warm=True)  # first touch of the shards, imports: not timed
    except TypeError:
        pass
    for tol in tolerances:
        samples = []
        for _ in range(args.repeat):
            result, seconds = timed(comm, lambda: call(tol))
            samples.append(seconds)
            if seconds > args.max_seconds:
                break
        values = np.atleast_1d(score(result))
        best = np.minimum(best, values)
        gap = float(np.max((values - best) / np.abs(best)))
        results = getattr(result, "results", [result])
        iterations = int(sum(r.iterations for r in results))
        outer = [r.info.get("outer_iterations") for r in results]
        certificates = [r.relative_gap for r in results]
        runs.append({"solver": label, "package": "mpiopt", "tolerance": tol, "iterations": iterations,
                     "outer_iterations": None if all(o is None for o in outer) else int(sum(o or 0 for o in outer)),
                     "mpiopt_relative_gap": None if any(c is None for c in certificates) else float(max(certificates)),
                     "status": sorted({r.status for r in results}), "seconds": statistics.median(samples),
                     "objectives": values.tolist()})
        say(f"    {label} gap_tol {tol:.0e}: {iterations} iterations, {runs[-1]['seconds']:.3f} s, gap {gap:.1e}, "
            f"certificate {runs[-1]['mpiopt_relative_gap']}, status {runs[-1]['status']}")
        if gap <= args.target or samples[-1] > args.max_seconds:
            break
    return runs, best


def admm_options(variant, tol, args):
    options = dict(gap_tol=tol, max_iter=100000, **VARIANTS[variant])
    if variant == "full":
        options.update(eps_abs=0.0, eps_rel=0.0)  # the duality-gap certificate alone stops the solve
    options["time_limit"] = args.max_seconds
    return options


# ---------------------------------------------------------------- the families


def run_family(family, args, comm, say):
    """family: "lasso", "logistic" or "path".  Returns the JSON payload (the same on every rank): one entry per
    design and weight (--lam-ratios), or per design (the path)."""
    payload, available, variants, designs = family_payload(family, args, comm)
    for name in designs:
        made = time.perf_counter()
        A, b = make_design(name, args, logistic=(family == "logistic"), comm=comm)
        made = time.perf_counter() - made
        ratios = lam_ratios(args, family)
        for index, lam_ratio in enumerate(ratios):
            entry = run_entry(family, name, lam_ratio, A, b, args, comm, available, variants, say)
            entry["seconds_spent"] += made if index == 0 else 0.0
            payload["designs"].append(entry)
            say(f"  ({entry['seconds_spent']:.1f} s for this design" + ("" if lam_ratio is None else
                f" at {lam_ratio:g} lambda_max") + ")")
        del A
    payload["markdown"] = render_tables(payload)
    return payload


def run_entry(family, name, lam_ratio, A, b, args, comm, available, variants, say):
    """One design at one weight (or the path): the competitors on rank 0, then mpiopt on every rank's rows."""
    import scipy.sparse as sp

    from common import wait_without_spinning
    from mpiopt.core.partition import row_range

    started = time.perf_counter()
    m, n = A.shape
    start, stop = row_range(m, comm.rank, comm.size)
    A_local, b_local = A[start:stop], b[start:stop].copy()
    if not sp.issparse(A_local):
        A_local = np.ascontiguousarray(A_local)
    if family == "logistic":
        lambda_max = 0.5 * float(np.abs(A.T @ b).max())
    else:
        lambda_max = float(np.abs(A.T @ b).max())
    lam = None if family == "path" else lam_ratio * lambda_max
    lams = lambda_max * np.logspace(0, np.log10(args.lam_min_ratio), args.n_lams) if family == "path" else None
    entry = {"design": name, "description": describe(name, A), "rows": m, "cols": n, "nnz": int(A.nnz) if
             sp.issparse(A) else m * n, "lambda_max": lambda_max, "lam_ratio": lam_ratio, "lam": lam,
             "lams": None if lams is None else lams.tolist()}
    say(f"  {entry['description']}: lam = {lam:.6g} ({lam_ratio:g} lambda_max)" if family != "path" else
        f"  {entry['description']}: {args.n_lams} weights {lams[0]:.4g} .. {lams[-1]:.4g}")
    tall_dense = name in ("independent", "corr0.5", "corr0.9")

    # Competitors on rank 0, the full design in its preferred layout; the other ranks sleep.
    competitor_runs, best, reference_by = [], None, []
    if comm.rank == 0:
        competitor_runs, best, reference_by = competitors_part(family, args, A, b, lam, lams, tall_dense,
                                                               available, say)
    wait_without_spinning(comm)
    competitor_runs, best, reference_by = comm.bcast((competitor_runs, best, reference_by), root=0)

    # mpiopt ADMM on every rank.
    admm_runs, best = admm_part(family, args, comm, A_local, b_local, lam, lams, variants, best, say)
    entry.update(reference_objectives=np.asarray(best).tolist(), reference_by=reference_by,
                 runs=competitor_runs + admm_runs, seconds_spent=time.perf_counter() - started)
    score_runs(entry, args.target)
    entry["rows_of_table"] = table_rows(entry, family, available)
    return entry


def family_payload(family, args, comm):
    """(the payload without its designs, the solvers available, the working-set variants, the designs)."""
    from mpiopt.core.threads import available_cores

    wanted = [name.strip() for name in args.competitors.split(",") if name.strip()]
    pretend = {name.strip() for name in args.pretend_missing.split(",") if name.strip()}
    available = installed(COMPETITORS, pretend) if comm.rank == 0 else None
    available = comm.bcast(available, root=0)
    available = {name: available[name] and name in wanted for name in COMPETITORS} | {"mpiopt": True}
    versions = comm.bcast(package_versions(available) if comm.rank == 0 else None, root=0)
    variants = working_set_variants(args.variants, family)
    designs = chosen_designs(args.designs)
    if family == "path" and args.designs is None:
        designs = ("independent",)
    payload = {"benchmark": {"lasso": "admm_lasso-designs", "logistic": "admm_general-logistic-designs",
                             "path": "admm_general-path-designs"}[family],
               "family": family, "ranks": comm.size, "cores": available_cores(), "lam_ratios": lam_ratios(args, family),
               "target": args.target, "repeat": args.repeat, "tolerances": list(TOLERANCES),
               "installed": {name: available[name] for name in COMPETITORS}, "versions": versions,
               "variants": {name: VARIANTS[name] for name in variants}, "designs": []}
    if family == "path":
        payload.update(n_lams=args.n_lams, lam_min_ratio=args.lam_min_ratio)
    return payload, available, variants, designs


def competitors_part(family, args, A, b, lam, lams, tall_dense, available, say):
    """(the competitors' runs, the best objectives, the solvers they came from), on rank 0 with the full
    design in each competitor's preferred layout."""
    import scipy.sparse as sp
    m = A.shape[0]
    X = preferred_layout(A)
    if family == "lasso":
        fitters = lasso_fitters(m, lam, not tall_dense)
        full_score = squared_objective(A, b, lam)
        # (celer at 1e-12 takes half a minute at 100000 x 1000; it still runs its ladder)
        references = ["skglm Lasso"] + (["scikit-learn Lasso (precompute=True)"] if tall_dense else [])
    elif family == "logistic":
        fitters = logistic_fitters(m, lam, sp.issparse(A))
        full_score = logistic_objective(A, b, lam)
        references = ["skglm SparseLogisticRegression"]
    else:
        fitters = path_fitters(m, lams, tall_dense)
        objectives = [squared_objective(A, b, value) for value in lams]

        def full_score(coefs):
            return [objective(coef) for objective, coef in zip(objectives, coefs)]
        references = ["skglm Lasso.path", "scikit-learn lasso_path"]
    best, reference_by = reference_objectives(fitters, available, X, b, full_score, references)
    if best is None:  # neither reference solver installed: scikit-learn's first fitter, tightly
        label = next(iter(fitters))
        best, reference_by = reference_objectives(fitters, available, X, b, full_score, [label])
    if best is None:
        best = np.full(len(lams) if lams is not None else 1, np.inf)
    competitor_runs, best = run_competitors(
        {k: v for k, v in fitters.items()}, available, X, b, full_score, best, args, say,
        LIBLINEAR_TOLERANCES if family == "logistic" else TOLERANCES)
    return competitor_runs, best, reference_by


def admm_part(family, args, comm, A_local, b_local, lam, lams, variants, best, say):
    """(mpiopt's runs, the best objectives so far) for each working-set variant, on every rank's rows."""
    from mpiopt.admm import lasso, logistic_regression
    from mpiopt.admm.path import regularization_path

    def local_score(result):
        if family == "path":
            coefs = result.coefs
            values = []
            for value, coef in zip(lams, coefs):
                values.append(_distributed(comm, A_local, b_local, coef, value, "squared"))
            return values
        return [_distributed(comm, A_local, b_local, result.x, lam, "logistic" if family == "logistic"
                             else "squared")]
    admm_runs = []
    for variant in variants:
        if family == "lasso":
            def call(tol, warm=False, variant=variant):
                options = admm_options(variant, tol, args)
                if warm:
                    options.update(max_iter=3)
                return lasso(A_local, b_local, lam=lam, comm=comm, **options)
            label = admm_label("mpiopt ADMM lasso", variant)
        elif family == "logistic":
            def call(tol, warm=False, variant=variant):
                options = admm_options(variant, tol, args)
                if warm:
                    options.update(max_iter=3)
                return logistic_regression(A_local, b_local, lam, comm, **options)
            label = admm_label("mpiopt ADMM logistic", variant)
        else:
            def call(tol, warm=False, variant=variant):
                options = admm_options(variant, tol, args)
                if warm:
                    options.update(max_iter=3)
                return regularization_path(A_local, b_local, "squared", "l1", comm, lams=lams, **options)
            label = admm_label("mpiopt regularization_path", variant)
        runs, best = run_admm_ladder(label, call, comm, local_score, best, args, say)
        admm_runs += runs
    return admm_runs, best


def _distributed(comm, A_local, b_local, x, lam, loss):
    x = np.asarray(x, dtype=float)
    margin = A_local @ x
    if loss == "logistic":
        local = float(np.logaddexp(0.0, -b_local * margin).sum())
    else:
        residual = margin - b_local
        local = float(residual @ residual) * 0.5
    return comm.allreduce(local) + lam * float(np.abs(x).sum())


def package_versions(available):
    versions = {}
    for name in ("numpy", "scipy", "sklearn", "celer", "skglm", "mpi4py"):
        try:
            versions[name] = importlib.import_module(name).__version__
        except Exception:  # noqa: BLE001
            versions[name] = None
    return versions


def score_runs(entry, target):
    """Gaps against the final P* (per weight; a path's gap is its worst weight's)."""
    best = np.asarray(entry["reference_objectives"], dtype=float)
    for run in entry["runs"]:
        if "objectives" in run:
            values = np.asarray(run["objectives"])
            run["relative_gap"] = float(np.max((values - best) / np.abs(best)))
            run["reached"] = run["relative_gap"] <= target


def best_run(runs, solvers):
    """The fastest run of these solvers that reached the target, else the closest one (reached False)."""
    candidates = [run for run in runs if run["solver"] in solvers and "objectives" in run]
    reached = [run for run in candidates if run["reached"]]
    if reached:
        return min(reached, key=lambda run: run["seconds"])
    return min(candidates, key=lambda run: run["relative_gap"]) if candidates else None


def table_rows(entry, family, available):
    """One row per solver (scikit-learn: its best variant), the ratio of ADMM to the fastest competitor."""
    runs = entry["runs"]
    groups = {}
    for run in runs:
        key = run["solver"].split(" (")[0] if run["package"] == "scikit-learn" else run["solver"]
        groups.setdefault(key, []).append(run)
    rows = []
    for key, group in groups.items():
        package = group[0]["package"]
        if any(run.get("not_installed") for run in group):
            rows.append({"solver": key, "package": package, "status": "not installed"})
            continue
        run = best_run(group, {r["solver"] for r in group})
        if run is None:
            errors = [r["error"] for r in group if "error" in r]
            rows.append({"solver": key, "package": package, "status": "failed: " + (errors[0] if errors else "?")})
            continue
        rows.append({"solver": run["solver"], "package": package, "status": "reached" if run["reached"] else
                     "not reached", "seconds": run["seconds"], "relative_gap": run["relative_gap"],
                     "tolerance": run["tolerance"], "iterations": run["iterations"],
                     "outer_iterations": run.get("outer_iterations"),
                     "mpiopt_relative_gap": run.get("mpiopt_relative_gap")})
    yardstick = YARDSTICKS[family, entry["design"] in DENSE]
    competitor_times = [row["seconds"] for row in rows if row["package"] in COMPETITORS and row["status"] == "reached"]
    target_times = [row["seconds"] for row in rows if row["package"] in yardstick and row["status"] == "reached"]
    fastest = min(competitor_times) if competitor_times else None
    target_time = min(target_times) if target_times else None
    has_target = True
    for row in rows:
        if "seconds" in row and fastest:
            row["ratio_to_fastest_competitor"] = row["seconds"] / fastest
        if row["package"] == "mpiopt":
            row["target_time"] = target_time
            if not has_target:
                row["target_met"] = None
            elif row["status"] != "reached":
                row["target_met"] = False
            elif target_time is None:
                row["target_met"] = None
            else:
                row["target_met"] = row["seconds"] <= target_time
    return rows


def write_markdown_beside(path, payload):
    """The tables beside the JSON (``x.json`` -> ``x.md``), on the caller's rank."""
    if path:
        with open(os.path.splitext(path)[0] + ".md", "w") as stream:
            stream.write(payload["markdown"] + "\n")
