"""``mpiopt lasso`` and ``mpiopt solve``: consensus ADMM, the lasso with its reference and the general solver.
"""
import argparse
import time

from .common import (add_checkpoint_options, add_options_flag, add_settings_flags, chosen_options, exit_status,
                     labels, positive_int, settings_from, shape)


def add_parsers(commands):
    """The ``lasso`` and ``solve`` subcommands."""
    from ..core.registry import lookup, names
    lasso = commands.add_parser(
        "lasso", help="consensus-ADMM lasso: minimize ||Ax - b||^2/2 + lam ||x||_1, rows split over ranks",
        description="Consensus-ADMM lasso with the rows of A and b split over the MPI ranks.")
    _add_data_source(lasso, "npz file holding arrays A and b; each rank reads only its own rows "
                            "(for .h5, svmlight files or shard folders use 'mpiopt solve')")
    weight = lasso.add_mutually_exclusive_group()
    weight.add_argument("--lam", type=float, help="penalty weight lam")
    weight.add_argument("--lam-ratio", type=float, default=0.1,
                        help="lam as a fraction of lambda_max = ||A^T b||_inf (default %(default)s)")
    lasso.add_argument("--no-reference", action="store_true",
                       help="skip the single-process reference solve on rank 0 (it needs all of A there)")
    lasso.add_argument("--output", default="mpiopt_lasso.json", help="JSON result file (default %(default)s)")
    _add_admm_settings(lasso)
    add_checkpoint_options(lasso.add_argument_group("checkpoints"), "solver state", "iterations")
    lasso.set_defaults(run=run_lasso, parser=lasso)

    general = commands.add_parser(
        "solve", help="general consensus ADMM: a loss, a penalty, optional intercept, checkpoints",
        description="Consensus ADMM for sum_i f_i(x) + g(x) with the rows split over the MPI ranks. "
                    "Synthetic data for the logistic loss take the labels b > 0.")
    _add_data_source(general, "rows to read per rank: .npz (A, b), .h5/.hdf5 (A, b), .svm/.svmlight/.libsvm/.txt, "
                              "or a folder of shards made by mpiopt.data.split_file")
    general.add_argument("--loss", default="squared", choices=names("loss"),
                         help="data term: squared (least squares), logistic (labels in {0, 1} or {-1, 1}), "
                              "huber (robust regression, see --delta) (default %(default)s)")
    general.add_argument("--penalty", default="l1", choices=names("penalty"),
                         help="on the coefficients: l1 (lasso), l2 (ridge), elastic_net (see --l1-ratio), "
                              "group_lasso (see --groups, --group-size), nonnegative, box (see --lower, --upper), "
                              "none (default %(default)s)")
    weight = general.add_mutually_exclusive_group()
    weight.add_argument("--lam", type=float, help="penalty weight lam")
    having = [name for name in names("penalty") if lookup("penalty", name).has_lambda_max()]
    weight.add_argument("--lam-ratio", type=float, help=f"lam as a fraction of lambda_max ({', '.join(having)})")
    add_options_flag(general, "penalty")
    add_options_flag(general, "loss")
    _add_option_flag(general, "penalty", "l1_ratio", type=float)
    _add_option_flag(general, "penalty", "lower", type=float)
    _add_option_flag(general, "penalty", "upper", type=float)
    groups = general.add_mutually_exclusive_group()
    groups.add_argument("--groups", type=labels, metavar="G1,G2,...",
                        help="group_lasso: a group label per column of A (integers; -1: not penalized)")
    groups.add_argument("--group-size", type=positive_int, metavar="K",
                        help="group_lasso: consecutive groups of K columns (the last one may be smaller)")
    _add_option_flag(general, "loss", "delta", type=float)
    general.add_argument("--intercept", action="store_true", help="fit an unpenalized intercept (the last entry)")
    _add_option_flag(general, "loss", "x_solver", choices=names("x_solver"))
    general.add_argument("--output", default="mpiopt_result.json", help="JSON result file (default %(default)s)")
    _add_admm_settings(general)
    group = general.add_argument_group("checkpoints")
    add_checkpoint_options(group, "solver state", "iterations")
    general.set_defaults(run=run_solve, parser=general)


def _add_option_flag(parser, kind, name, **argument):
    """``--NAME``: the option ``name`` for whichever chosen piece of ``kind`` declares it, its help and default
    read from the first declaration (the pieces that take it named)."""
    from ..core.registry import names, options
    takers = [piece for piece in names(kind) if name in options(kind, piece)]
    option = options(kind, takers[0])[name]
    parser.add_argument("--" + name.replace("_", "-"), help=f"{', '.join(takers)}: {option.help} "
                                                            f"(default {option.default})", **argument)


def _add_admm_settings(parser):
    """The ADMM settings' flags, generated from ADMMSettings' fields (its checkpoint fields are
    ``add_checkpoint_options``'s); the names kept for ``_settings``."""
    from ..admm.settings import ADMMSettings
    eps_rel = ADMMSettings().eps_rel
    group = parser.add_argument_group("ADMM settings (generated from mpiopt.admm.ADMMSettings)")
    shown = {
        "working_set": {"type": _auto_on_off, "default": "auto", "metavar": "{auto,on,off}",
                        "help": "working sets (L1 / elastic net with the squared or logistic loss): solve on a "
                                "growing set of columns until the relative duality gap on all of them is below "
                                "--gap-tol (--eps-rel if not given); auto: on for CPU data (default auto)"},
        "gap_tol": {"type": float, "default": None, "metavar": "GAP_TOL",
                    "help": "stop when the relative duality gap is below this (L1 / elastic net with the squared "
                            f"or logistic loss); default: working sets stop at --eps-rel ({eps_rel:g} by "
                            "default), the full solver (--working-set off) by its residuals alone, the gap only "
                            "reported at the end"},
        "blas_threads": {"type": int, "default": None, "metavar": "K",
                         "help": "BLAS threads per rank (default: the node's cores shared among its ranks, unless "
                                 "OMP_NUM_THREADS or OPENBLAS_NUM_THREADS is set)"}}
    names = add_settings_flags(group, ADMMSettings, shown=shown)
    parser.set_defaults(admm_settings=names)


def _auto_on_off(text):
    """--working-set: auto (None, the solver decides), on (True) or off (False)."""
    values = {"auto": None, "on": True, "off": False}
    if text not in values:
        raise argparse.ArgumentTypeError(f"expected auto, on or off, got {text!r}")
    return values[text]


def _add_data_source(parser, data_help):
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--synthetic", type=shape, metavar="MxN", default=(20000, 500),
                        help="seeded synthetic problem of M rows and N columns (default 20000x500)")
    source.add_argument("--data", metavar="PATH", help=data_help)
    parser.add_argument("--density", type=float, default=0.05, help="synthetic: fraction of nonzeros in x_true")
    parser.add_argument("--noise", type=float, default=0.01, help="synthetic: standard deviation of the noise")
    parser.add_argument("--correlation", type=float, default=0.0,
                        help="synthetic: pairwise correlation of the columns of A, in [0, 1)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic: random seed")


def _settings(args):
    from ..admm.settings import ADMMSettings
    return settings_from(args, args.admm_settings, ADMMSettings)


def _groups(args, n_columns):
    """The group labels of --groups or --group-size (None when neither is given)."""
    if args.group_size is not None:
        return [column // args.group_size for column in range(n_columns)]
    return args.groups


def _load_lasso_problem(args, comm):
    """This rank's rows, and a function that returns the whole problem (for the reference)."""
    if args.data:
        from ..data.npz import npz_shapes, read_npz_range, read_npz_rows
        A, b = read_npz_rows(args.data, ("A", "b"), comm=comm)

        def full():
            return read_npz_range(args.data, ("A", "b"), 0, npz_shapes(args.data, ("A",))["A"][0])
        return A, b, full, {"data": args.data}
    from ..data.synthetic import lasso_rows, make_lasso
    m, n = args.synthetic
    A, b, _ = make_lasso(m, n, args.density, args.noise, args.seed, args.correlation, comm=comm)
    return A, b, lambda: lasso_rows(m, n, 0, m, args.density, args.noise, args.seed, args.correlation), {
        "synthetic": {"rows": m, "n": n, "density": args.density, "noise": args.noise, "seed": args.seed,
                      "correlation": args.correlation}}


def _summary(result):
    """One line on the answer's quality: objective, status, nonzeros and the KKT residual."""
    info = result.info
    return (f"final objective {result.objective:.12e} ({result.status}, {result.iterations} iterations, "
            f"{result.timings['total']:.3f} s); nonzeros {info['nonzeros']} of {info['n']}; "
            f"KKT residual {info['kkt_residual']:.2e}")


def run_lasso(args, comm):
    import numpy as np
    import scipy.linalg  # noqa: F401 (the factorizations' module, imported before the solver's clock starts)

    from ..admm import lasso
    from ..core.io import check_writable, write_json

    check_writable(args.output, comm)
    check_writable(args.checkpoint, comm, what="checkpoint")
    A, b, full_problem, source = _load_lasso_problem(args, comm)
    settings = dict(_settings(args), checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every)
    if args.lam is not None:
        result = lasso(A, b, args.lam, comm=comm, **settings)
    else:
        result = lasso(A, b, comm=comm, lam_ratio=args.lam_ratio, **settings)

    payload = result.to_dict()
    payload["source"] = source
    if comm.rank == 0:
        if not args.no_reference:
            from ..admm.reference import lasso_reference
            start = time.perf_counter()
            x_reference, objective_reference = lasso_reference(*full_problem(), result.info["lam"])
            seconds = time.perf_counter() - start
            distance = float(np.linalg.norm(result.x - x_reference) / max(np.linalg.norm(x_reference), 1e-300))
            gap = (result.objective - objective_reference) / abs(objective_reference)
            payload["reference"] = {"method": "single-process L-BFGS-B on x = p - q, p, q >= 0",
                                    "objective": objective_reference, "relative_objective_difference": gap,
                                    "relative_distance": distance, "seconds": seconds}
            print(f"reference (1 process, L-BFGS-B): objective {objective_reference:.12e}, "
                  f"relative objective difference {gap:.2e}, ||x - x_ref|| / ||x_ref|| = {distance:.2e}")
        print(_summary(result))
        write_json(args.output, payload)
        print(f"result written to {args.output}")
    return exit_status(result)


def run_solve(args, comm):
    import numpy as np
    import scipy.linalg  # noqa: F401 (the factorizations' module, imported before the solver's clock starts)

    from ..admm import solve
    from ..core.comm import check_collectively
    from ..core.io import check_writable, write_json
    from ..core.registry import lookup
    check_writable(args.output, comm)
    check_writable(args.checkpoint, comm, what="checkpoint")
    if args.data:
        from ..data import load_rows
        A, b = load_rows(args.data, comm)
        source = {"data": args.data}
    else:
        A, b, _, source = _load_lasso_problem(args, comm)
        if args.loss == "logistic":
            b = (b > 0).astype(np.float64)
    penalty_options, problem = chosen_options(args, "penalty", args.penalty)
    loss_options, loss_problem = chosen_options(args, "loss", args.loss)
    check_collectively(comm, problem or loss_problem)
    lam, lam_ratio = args.lam, args.lam_ratio
    if lam is None and lam_ratio is None and "lam" not in penalty_options and lookup(
            "penalty", args.penalty).has_lambda_max():  # a weighted penalty with a lambda_max: 0.1 of it
        lam_ratio = 0.1
    shorthands = {"l1_ratio": args.l1_ratio, "groups": _groups(args, A.shape[1]), "lower": args.lower,
                  "upper": args.upper, "delta": args.delta, "x_solver": args.x_solver}  # each to whichever declares it
    result = solve(A, b, args.loss, args.penalty, lam, comm, lam_ratio=lam_ratio, intercept=args.intercept,
                   penalty_options=penalty_options or None, loss_options=loss_options or None,
                   checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
                   **{key: value for key, value in shorthands.items() if value is not None}, **_settings(args))
    if comm.rank == 0:
        payload = dict(result.to_dict(), source=source)
        write_json(args.output, payload)
        print(f"{_summary(result)}; result written to {args.output}")
    return exit_status(result)
