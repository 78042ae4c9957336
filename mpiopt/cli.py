"""Command line: ``mpiexec -n N python -m mpiopt <command> ...``.

Runs with ``python -m mpi4py`` semantics: an error that every rank agrees on
(a CollectiveError from validation) is printed once and every rank exits with
status 2; any other uncaught exception on any rank prints its traceback and
aborts the whole MPI job at once, so no rank is left waiting.
"""
import argparse
import math
import re
import sys
import time

from . import __version__


class Parser(argparse.ArgumentParser):
    """An argument parser that prints usage, help and errors once, on rank 0.

    Under mpiexec every rank parses the same arguments and reaches the same
    verdict; the other ranks exit with the same status without printing.  An
    error in a subcommand's arguments is reported with that subcommand's usage.
    """

    rank = 0

    def _print_message(self, message, file=None):
        if Parser.rank == 0:
            super()._print_message(message, file)


class CommandError(Exception):
    """A one-line error of a one-process command (exit status 2), e.g. a refused Slurm option."""


class CheckingParser(Parser):
    """A parser that prints nothing and raises CommandError where it would exit: checks a Slurm workload's
    arguments at rendering time, so that a job is never submitted to fail on them."""

    def _print_message(self, message, file=None):
        pass

    def error(self, message):
        raise CommandError(f"{self.prog}: {message}")

    def exit(self, status=0, message=None):
        raise CommandError(f"{self.prog}: the arguments ask for help or the version, the job would run nothing")


def _shape(text):
    match = re.fullmatch(r"\s*(\d+)\s*[xX,]\s*(\d+)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLUMNS such as 20000x500, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def _labels(text):
    try:
        return [int(label) for label in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integer labels such as 0,0,1,1, got {text!r}")


def _positive_int(text):
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return int(text)


def _add_checkpoint_options(group, state, unit):
    """--checkpoint and --checkpoint-every, the same for every command that resumes from its checkpoint."""
    group.add_argument("--checkpoint", metavar="FILE.npz",
                       help=f"write the {state} here (on SIGUSR1, SIGTERM and every --checkpoint-every {unit}) "
                            "and resume from it when it exists")
    group.add_argument("--checkpoint-every", type=int, default=0,
                       help=f"{unit} between checkpoints (0: only on signals and at the end)")


def _add_admm_settings(parser):
    from .admm.settings import ADAPTIVE_RHO, ADMMSettings
    from .collectives import REDUCERS
    defaults = ADMMSettings()
    group = parser.add_argument_group("ADMM settings")
    group.add_argument("--rho", type=float, default=defaults.rho,
                       help="initial penalty parameter (default: from the data scale)")
    group.add_argument("--adaptive-rho", default=defaults.adaptive_rho, choices=ADAPTIVE_RHO,
                       help="rho adaptation (default %(default)s)")
    group.add_argument("--alpha", type=float, default=defaults.alpha, help="over-relaxation in (0, 2) (default %(default)s)")
    group.add_argument("--eps-abs", type=float, default=defaults.eps_abs, help="absolute tolerance (default %(default)s)")
    group.add_argument("--eps-rel", type=float, default=defaults.eps_rel, help="relative tolerance (default %(default)s)")
    group.add_argument("--max-iter", type=int, default=defaults.max_iter, help="iteration limit (default %(default)s)")
    group.add_argument("--gap-tol", type=float, default=defaults.gap_tol,
                       help="stop when the relative duality gap is below this (L1 / elastic net with the squared "
                            f"or logistic loss); default: working sets stop at --eps-rel ({defaults.eps_rel:g} by "
                            "default), the full solver (--working-set off) by its residuals alone, the gap only "
                            "reported at the end")
    group.add_argument("--gap-every", type=int, default=defaults.gap_every,
                       help="with --gap-tol, iterations between gap evaluations (default %(default)s)")
    group.add_argument("--working-set", choices=("auto", "on", "off"), default="auto",
                       help="working sets (L1 / elastic net with the squared or logistic loss): solve on a growing "
                            "set of columns until the relative duality gap on all of them is below --gap-tol "
                            "(--eps-rel if not given); auto: on for CPU data (default %(default)s)")
    group.add_argument("--working-set-size", type=int, default=defaults.working_set_size,
                       help="the first working set's size (default %(default)s)")
    group.add_argument("--screening", action="store_true",
                       help="gap-safe screening in the full solver (--working-set off; working sets always screen)")
    group.add_argument("--time-limit", type=float, default=defaults.time_limit, help="seconds, 0 for none (default %(default)s)")
    group.add_argument("--log-every", type=int, default=defaults.log_every, help="log every K iterations (default %(default)s)")
    group.add_argument("--reducer", default=defaults.reducer,
                       help=f"all-reduce of the z-step: {', '.join(REDUCERS)} (default %(default)s)")
    group.add_argument("--blas-threads", type=int, default=None, metavar="K",
                       help="BLAS threads per rank (default: the node's cores shared among its ranks, unless "
                            "OMP_NUM_THREADS or OPENBLAS_NUM_THREADS is set)")
    group.add_argument("--quiet", action="store_true", help="no iteration log")


def _add_data_source(parser, data_help):
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--synthetic", type=_shape, metavar="MxN", default=(20000, 500),
                        help="seeded synthetic problem of M rows and N columns (default 20000x500)")
    source.add_argument("--data", metavar="PATH", help=data_help)
    parser.add_argument("--density", type=float, default=0.05, help="synthetic: fraction of nonzeros in x_true")
    parser.add_argument("--noise", type=float, default=0.01, help="synthetic: standard deviation of the noise")
    parser.add_argument("--correlation", type=float, default=0.0,
                        help="synthetic: pairwise correlation of the columns of A, in [0, 1)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic: random seed")


def build_parser(parser_class=Parser):
    from . import slurm as _slurm  # noqa: F401 (registers the workloads)
    from .admm import solver as _solver  # noqa: F401 (registers the losses, penalties and x-solvers)
    from .core.registry import names
    parser = parser_class(
        prog="mpiopt", description="Distributed optimization on MPI ranks. Run under mpiexec -n N.")
    parser.add_argument("--version", action="version", version=f"mpiopt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

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
    weight.add_argument("--lam-ratio", type=float, help="lam as a fraction of lambda_max (l1, elastic_net)")
    general.add_argument("--l1-ratio", type=float, default=0.5, help="elastic_net: share of the L1 part")
    general.add_argument("--lower", type=float, default=float("-inf"), help="box: lower bound")
    general.add_argument("--upper", type=float, default=float("inf"), help="box: upper bound")
    groups = general.add_mutually_exclusive_group()
    groups.add_argument("--groups", type=_labels, metavar="G1,G2,...",
                        help="group_lasso: a group label per column of A (integers; -1: not penalized)")
    groups.add_argument("--group-size", type=_positive_int, metavar="K",
                        help="group_lasso: consecutive groups of K columns (the last one may be smaller)")
    general.add_argument("--delta", type=float, default=1.0, help="huber: width of the quadratic zone")
    general.add_argument("--intercept", action="store_true", help="fit an unpenalized intercept (the last entry)")
    general.add_argument("--x-solver", default="lbfgs", choices=names("x_solver"),
                         help="logistic and huber: x-step solver (default %(default)s)")
    general.add_argument("--output", default="mpiopt_result.json", help="JSON result file (default %(default)s)")
    _add_admm_settings(general)
    group = general.add_argument_group("checkpoints")
    _add_checkpoint_options(group, "solver state", "iterations")
    general.set_defaults(run=run_solve, parser=general)

    _add_train(commands)
    _add_federated(commands)
    _add_async_sgd(commands)

    slurm = commands.add_parser(
        "slurm", help="render a batch script for a workload, submit it with sbatch, optionally wait",
        description="Render a Slurm batch script (names and paths quoted safely), submit it with sbatch and, "
                    "with --wait, follow it with squeue/scontrol and return the job's exit code. "
                    "Arguments after -- go to the workload, e.g. mpiopt slurm solve -n 4 -- --loss logistic.")
    slurm.add_argument("workload", choices=names("workload"))
    slurm.add_argument("-n", "--ntasks", type=int, default=2)
    slurm.add_argument("-c", "--cpus-per-task", type=int, default=1)
    slurm.add_argument("-t", "--time", default="00:10:00", help="time limit (default %(default)s)")
    slurm.add_argument("-J", "--job-name")
    slurm.add_argument("-p", "--partition")
    slurm.add_argument("--signal-seconds", type=int, default=60,
                       help="SIGUSR1 this many seconds before the limit: checkpoint and requeue (0: none)")
    slurm.add_argument("--launcher", choices=["srun", "mpiexec"], default="srun")
    slurm.add_argument("--script", default=None, help="where to write the batch script (default JOBNAME.sbatch)")
    slurm.add_argument("--render-only", action="store_true", help="print the script and do not submit it")
    slurm.add_argument("--wait", action="store_true", help="wait for the job and exit with its exit code")
    slurm.set_defaults(run=run_slurm, workload_args=[], parser=slurm)
    return parser


def _widths(text):
    try:
        widths = tuple(int(width) for width in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer widths such as 64,32, got {text!r}")
    return widths


def _add_train(commands):
    from . import data as _data  # noqa: F401 (registers the data sets)
    from . import models as _models  # noqa: F401 (registers the models)
    from . import optim as _optim  # noqa: F401 (registers the optimizers)
    from .collectives import REDUCERS
    from .core.registry import names
    from .train import TrainSettings
    defaults = TrainSettings()
    train = commands.add_parser(
        "train", help="data-parallel training of a model on a data set: DDP buckets and overlap, ZeRO stages 1-3",
        description="Data-parallel training: every rank holds the data set and takes its share of each global "
                    "batch; gradients are reduced in buckets while the backward pass goes on; --zero-stage shards "
                    "the optimizer state (1), the gradients (2) and the parameters (3) over the ranks.")
    train.add_argument("--model", default="mlp", choices=names("model"), help="(default %(default)s)")
    train.add_argument("--hidden", type=_widths, default=(64,), metavar="W1,W2,...",
                       help="mlp: hidden layer widths (default 64)")
    train.add_argument("--alpha", type=float, default=1e-4, help="L2 penalty on the weights (default %(default)s)")
    train.add_argument("--data", default="digits", choices=names("dataset"), help="data set (default %(default)s)")
    train.add_argument("--test-fraction", type=float, default=0.25, help="held out for testing (default %(default)s)")
    train.add_argument("--optimizer", default="adam", choices=names("optimizer"), help="(default %(default)s)")
    train.add_argument("--lr", type=float, default=1e-3, help="learning rate (default %(default)s)")
    train.add_argument("--momentum", type=float, help="sgd: momentum")
    train.add_argument("--weight-decay", type=float, help="L2 weight decay in the optimizer")
    train.add_argument("--epochs", type=int, default=defaults.epochs, help="(default %(default)s)")
    train.add_argument("--batch-size", type=int, default=defaults.batch_size,
                       help="global batch, over all ranks (default %(default)s)")
    train.add_argument("--seed", type=int, default=defaults.seed, help="order of the batches, starting point, split")
    train.add_argument("--max-steps", type=int, help="stop after this many steps in all")
    train.add_argument("--time-limit", type=float, default=defaults.time_limit, help="seconds, 0 for none")
    group = train.add_argument_group("communication")
    group.add_argument("--reducer", default=defaults.reducer, choices=list(REDUCERS),
                       help="collective algorithm (default %(default)s)")
    group.add_argument("--compressor", choices=names("compressor"),
                       help="compress the gradient buckets (default: none); its options below")
    feedback = group.add_mutually_exclusive_group()
    feedback.add_argument("--error-feedback", dest="error_feedback", action="store_const", const=True,
                          help="compressor: carry what compression drops into the next step (default: as the "
                               "compressor says: on for the biased ones, off for the unbiased ones)")
    feedback.add_argument("--no-error-feedback", dest="error_feedback", action="store_const", const=False,
                          help="compressor: drop what compression loses")
    flags = _add_compressor_options(train, group)
    group.add_argument("--zero-stage", type=int, default=defaults.zero_stage, choices=(0, 1, 2, 3),
                       help="0: replicated (DDP); 1: shard optimizer state; 2: and gradients; 3: and parameters "
                            "(default %(default)s)")
    group.add_argument("--bucket-bytes", type=_positive_int, default=defaults.bucket_bytes,
                       help="gradient bucket size (default %(default)s)")
    group.add_argument("--no-overlap", action="store_true", help="reduce the buckets after the backward pass")
    group = train.add_argument_group("output")
    group.add_argument("--output", default="mpiopt_train.json", help="JSON result file (default %(default)s)")
    _add_checkpoint_options(group, "training state", "steps")
    group.add_argument("--log-every", type=int, default=defaults.log_every, help="log every K steps")
    group.add_argument("--blas-threads", type=int, default=None, metavar="K", help="BLAS threads per rank")
    group.add_argument("--quiet", action="store_true", help="no training log")
    train.set_defaults(run=run_train, parser=train, compressor_flags=flags,
                       check=lambda args: _compressor_choice(args)[1])


# a compressor option the command line does not offer: the compressed reducer gives each rank its own worker
RANK_OWN_COMPRESSOR_OPTIONS = ("worker",)


def _boolean(text):
    value = text.strip().lower()
    if value in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value in ("true", "yes", "on", "1")
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _literal(text):
    """An option value of no declared type: an integer, a number, true/false, or the text itself."""
    for convert in (int, float, _boolean):
        try:
            return convert(text)
        except (ValueError, argparse.ArgumentTypeError):
            pass
    return text


def _add_compressor_options(parser, group):
    """A flag for every option the registered compressors declare (their ``options``), typed by the
    constructors' defaults: ``--ratio``, ``--rank``, ``--bits``, ...; ``--compressor-NAME`` where NAME is already a
    flag of the command.  Returns {option: flag}."""
    import inspect

    from .core.registry import lookup, names
    owners, defaults = {}, {}
    for compressor in names("compressor"):
        factory = lookup("compressor", compressor)
        parameters = inspect.signature(factory).parameters
        for option in factory.options:
            if option in RANK_OWN_COMPRESSOR_OPTIONS:
                continue
            owners.setdefault(option, []).append(compressor)
            default = parameters[option].default if option in parameters else None
            defaults.setdefault(option, {})[compressor] = None if default is inspect.Parameter.empty else default
    flags = {}
    for option, takers in owners.items():
        flag = "--" + option.replace("_", "-")
        if flag in parser._option_string_actions:
            flag = "--compressor-" + option.replace("_", "-")
        kinds = {type(value) for value in defaults[option].values() if value is not None}
        kind = kinds.pop() if len(kinds) == 1 else None
        convert = {bool: _boolean, int: int, float: float, str: str}.get(kind, _literal)
        values = {name: defaults[option][name] for name in takers if defaults[option][name] is not None}
        shown = (str(next(iter(values.values()))).lower() if len(set(map(repr, values.values()))) == 1 else
                 ", ".join(f"{name} {value}" for name, value in values.items()))
        group.add_argument(flag, dest=f"compressor_option_{option}", type=convert, metavar=option.upper(),
                           help=f"{', '.join(takers)}: {option}" + (f" (default {shown})" if shown else ""))
        flags[option] = flag
    return flags


def _compressor_choice(args):
    """(the compressor options given, a problem or None): every option must be one the chosen compressor
    declares, and its constructor (which checks the values) must accept them."""
    from .compression import get_compressor
    from .core.registry import lookup
    given = {option: getattr(args, f"compressor_option_{option}") for option in args.compressor_flags
             if getattr(args, f"compressor_option_{option}") is not None}
    flags = args.compressor_flags
    if args.compressor is None:
        feedback = {None: [], True: ["--error-feedback"], False: ["--no-error-feedback"]}[args.error_feedback]
        named = [flags[option] for option in given] + feedback
        return given, (f"{', '.join(named)} set{'s' if len(named) == 1 else ''} a compressor's option; choose the "
                       "compressor with --compressor" if named else None)
    accepted = [option for option in lookup("compressor", args.compressor).options if option in flags]
    refused = [flags[option] for option in given if option not in accepted]
    if refused:
        takes = ", ".join(flags[option] for option in accepted) or "no options"
        return given, f"compressor {args.compressor} takes {takes}; got {', '.join(refused)}"
    try:
        get_compressor(args.compressor, **given)  # its constructor checks the values
    except (TypeError, ValueError) as error:
        return given, str(error)
    return given, None


def _add_federated(commands):
    from . import data as _data  # noqa: F401 (registers the data sets)
    from . import federated as _federated  # noqa: F401 (registers the strategies and partitioners)
    from . import models as _models  # noqa: F401 (registers the models)
    from .collectives import REDUCERS
    from .core.registry import names
    from .federated import FederatedSettings
    from .federated.settings import CLIENT_SAMPLINGS
    defaults = FederatedSettings()
    federated = commands.add_parser(
        "federated", help="federated learning: K virtual clients over the ranks, FedAvg, FedSGD, FedProx, FedNova",
        description="Federated learning with K virtual clients spread over the MPI ranks (client k on rank k % p): "
                    "each round a fraction of the clients trains locally from the global model and the strategy "
                    "combines their updates; the same model at any rank count.")
    federated.add_argument("--strategy", default="fedavg", choices=names("strategy"), help="(default %(default)s)")
    federated.add_argument("--mu", type=float, help="fedprox: proximal weight (default 0.01)")
    federated.add_argument("--server-lr", type=float, default=1.0, help="server learning rate (default %(default)s)")
    federated.add_argument("--server-momentum", type=float, default=0.0,
                           help="server momentum, FedAvgM (default %(default)s)")
    group = federated.add_argument_group("data")
    group.add_argument("--data", default="digits", choices=names("dataset") + ["synthetic"],
                       help="a registered data set, split by --partition, or FedProx's Synthetic(alpha, beta) "
                            "(default %(default)s)")
    group.add_argument("--partition", default="iid", choices=names("partition"), help="(default %(default)s)")
    group.add_argument("--alpha", type=float, default=0.5,
                       help="dirichlet, quantity: concentration; synthetic: alpha (default %(default)s)")
    group.add_argument("--beta", type=float, default=0.5, help="synthetic: beta (default %(default)s)")
    group.add_argument("--clients", type=_positive_int, default=100, help="K (default %(default)s)")
    group.add_argument("--test-fraction", type=float, default=0.25, help="held out for testing (default %(default)s)")
    group = federated.add_argument_group("model")
    group.add_argument("--model", default="softmax", choices=names("model"), help="(default %(default)s)")
    group.add_argument("--hidden", type=_widths, default=(32,), metavar="W1,W2,...", help="mlp: hidden widths")
    group.add_argument("--weight-penalty", type=float, default=0.0, help="the model's L2 penalty alpha")
    group = federated.add_argument_group("rounds")
    group.add_argument("--rounds", type=int, default=defaults.rounds, help="(default %(default)s)")
    group.add_argument("--fraction", type=float, default=defaults.fraction, help="C (default %(default)s)")
    group.add_argument("--client-sampling", choices=CLIENT_SAMPLINGS, default=defaults.client_sampling,
                       help="fixed: max(1, round(C K)) clients a round, without replacement; poisson: each client "
                            "with probability C (DP-FedAvg's accounting: Poisson, add or remove one client; "
                            "recommended with --dp-clip) (default %(default)s)")
    group.add_argument("--local-epochs", type=int, default=defaults.local_epochs, help="E (default %(default)s)")
    group.add_argument("--batch-size", type=int, default=defaults.batch_size, help="B, 0 for all rows (default %(default)s)")
    group.add_argument("--lr", type=float, default=defaults.lr, help="client learning rate (default %(default)s)")
    group.add_argument("--momentum", type=float, default=defaults.momentum, help="client SGD momentum")
    group.add_argument("--seed", type=int, default=defaults.seed, help="split, partition, sampling, faults")
    group.add_argument("--dropout", type=float, default=defaults.dropout, help="dropout probability per client")
    group.add_argument("--stragglers", type=float, default=defaults.stragglers, help="share of stragglers")
    group.add_argument("--tolerate-failures", action="store_true", help="leave failing clients out of their round")
    group.add_argument("--reducer", default=defaults.reducer, choices=list(REDUCERS), help="(default %(default)s)")
    group.add_argument("--eval-every", type=int, default=defaults.eval_every, help="rounds between test evaluations")
    group = federated.add_argument_group("privacy and secure aggregation (docs/federated.md)")
    group.add_argument("--dp-clip", type=float, metavar="S",
                       help="client-level DP-FedAvg: clip each client's update to L2 norm S (turns DP on)")
    group.add_argument("--dp-noise", type=float, metavar="z",
                       help="DP noise multiplier: N(0, (z S)^2) on the sum of clipped updates (default 1.0)")
    group.add_argument("--dp-delta", type=float, metavar="d",
                       help="the delta at which epsilon is reported each round (default 1e-5)")
    group.add_argument("--secure", action="store_true", help="secure aggregation by pairwise additive masks")
    group.add_argument("--drop-after-masking", type=float, default=0.0, metavar="p",
                       help="with --secure: probability that a client drops after masking (default %(default)s)")
    group = federated.add_argument_group("output")
    group.add_argument("--output", default="mpiopt_federated.json", help="JSON result file (default %(default)s)")
    group.add_argument("--csv", help="per-round CSV file")
    group.add_argument("--plot", help="per-round plot (needs matplotlib)")
    _add_checkpoint_options(group, "state at round boundaries", "rounds")
    group.add_argument("--log-every", type=int, default=defaults.log_every, help="log every K rounds")
    group.add_argument("--quiet", action="store_true", help="no round log")
    federated.set_defaults(run=run_federated, parser=federated)


def _threshold(text):
    """Ringmaster's R: an integer (checked by the settings) or inf."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or inf, got {text!r}") from None


def _times(text):
    try:
        values = [float(value) for value in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(value) and value > 0 for value in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated compute times > 0 such as 1,2.5,4, got {text!r}")
    return values


# the problem options of the command line: option (the argparse dest) -> the problem's keyword
ASYNC_SGD_PROBLEM_OPTIONS = {"dim": "dim", "noise": "noise", "batch_size": "batch_size", "dataset": "dataset",
                             "hidden": "hidden"}


def _add_async_sgd(commands):
    from . import asyncsgd as _asyncsgd  # noqa: F401 (registers the methods, problems and compute-time models)
    from . import data as _data  # noqa: F401 (registers the data sets)
    from .asyncsgd import RUNTIMES, AsyncSGDSettings
    from .core.registry import names
    defaults = AsyncSGDSettings()
    sgd = commands.add_parser(
        "async-sgd", help="SGD with heterogeneous workers: Minibatch, Asynchronous, Rennala and Ringmaster SGD",
        description="SGD with workers of different speeds, on a simulator (a virtual clock, thousands of "
                    "workers on one core) or on the MPI ranks (rank 0 serves, ranks 1.. compute). Prints the "
                    "measured time to epsilon beside the theory's prediction (constants dropped); --method all "
                    "compares every method on the same problem and workers. See docs/async_sgd.md.")
    sgd.add_argument("--method", default=defaults.method, choices=names("asyncsgd-method") + ["all"],
                     help="the method, or all of them one after another (default %(default)s)")
    sgd.add_argument("--runtime", default=defaults.runtime, choices=list(RUNTIMES),
                     help="simulator (virtual time) or mpi (rank 0 serves, ranks 1.. work) (default %(default)s)")
    sgd.add_argument("--workers", type=_positive_int, metavar="N",
                     help="simulator: virtual workers (default 8, or one per --taus); mpi: ranks - 1 (the default)")
    times = sgd.add_mutually_exclusive_group()
    times.add_argument("--tau", choices=names("tau-model"), help=f"compute-time model (default {defaults.tau})")
    times.add_argument("--taus", type=_times, metavar="T1,T2,...", help="fixed compute times, one per worker")
    group = sgd.add_argument_group("problem")
    group.add_argument("--problem", default="quadratic", choices=names("asyncsgd-problem"),
                       help="(default %(default)s)")
    group.add_argument("--dim", type=_positive_int, help="quadratic, worst-case: dimension (default 100)")
    group.add_argument("--noise", type=float, metavar="SIGMA2",
                       help="quadratic, worst-case: variance sigma^2 of a stochastic gradient (default 1e-3)")
    group.add_argument("--batch-size", type=_positive_int, help="logistic, mlp: rows per stochastic gradient")
    group.add_argument("--dataset", choices=names("dataset"), help="logistic, mlp: the data set")
    group.add_argument("--hidden", type=_widths, metavar="W1,W2,...", help="mlp: hidden layer widths")
    group = sgd.add_argument_group("method")
    group.add_argument("--epsilon", type=float, help="target for ||grad f||^2 (default 1e-2 ||grad f(x0)||^2)")
    group.add_argument("--step-size", type=float, help="gamma (default: the theory's)")
    group.add_argument("--batch", type=int, metavar="B", help="rennala: gradients per step (default: the theory's)")
    group.add_argument("--threshold", type=_threshold, metavar="R",
                       help="ringmaster: delay threshold, an integer or inf (default: the theory's)")
    group.add_argument("--stop-computations", action="store_true",
                       help="ringmaster: stop a worker's gradient once its delay reaches R")
    group.add_argument("--no-delay-adaptive", action="store_true", help="asgd: a constant step size")
    group.add_argument("--no-restart", action="store_true", help="rennala: workers keep computing after a step")
    group = sgd.add_argument_group("stopping and time")
    group.add_argument("--max-steps", type=int, default=defaults.max_steps, help="(default: no cap)")
    group.add_argument("--max-gradients", type=int, default=defaults.max_gradients,
                       help="gradients that reached the server (default %(default)s)")
    group.add_argument("--max-time", type=float, help="in compute-time units (default: no cap)")
    group.add_argument("--no-stop-at-epsilon", action="store_true", help="go on after reaching epsilon")
    group.add_argument("--eval-every", type=int, default=defaults.eval_every,
                       help="steps between evaluations of f and ||grad f||^2 (default %(default)s)")
    group.add_argument("--seed", type=int, default=defaults.seed, help="gradient noise and random compute times")
    group.add_argument("--time-unit", type=float, default=defaults.time_unit,
                       help="mpi: seconds per compute-time unit (default %(default)s)")
    group.add_argument("--idle-timeout", type=float, default=defaults.idle_timeout,
                       help="mpi: seconds the server waits for a message before giving up (default %(default)s)")
    group = sgd.add_argument_group("output")
    group.add_argument("--output", default="mpiopt_async_sgd.json",
                       help="JSON result file; with --method all, every method's result (default %(default)s)")
    group.add_argument("--plot", metavar="FILE.png",
                       help="loss and ||grad f||^2 against time, every method in one figure (needs matplotlib)")
    group.add_argument("--trace", action="store_true", help="keep every arrival in the result (info.trace)")
    group.add_argument("--log-every", type=int, default=defaults.log_every, help="log every K evaluations")
    group.add_argument("--quiet", action="store_true", help="no iteration log")
    sgd.set_defaults(run=run_async_sgd, parser=sgd)


def _problem_parameters(name):
    """The keywords problem ``name`` takes (None: any), from its factory or, behind ``**options``, its class."""
    import inspect

    from .asyncsgd import Problem
    from .core.registry import lookup
    parameters = inspect.signature(lookup("asyncsgd-problem", name)).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return set(parameters)
    classes, pending = [], [Problem]
    while pending:
        cls = pending.pop()
        classes.append(cls)
        pending.extend(cls.__subclasses__())
    for cls in classes:
        if cls.__dict__.get("name") == name:
            return set(inspect.signature(cls).parameters)
    return None


def _async_sgd_checks(args, comm):
    """(problem options, n_workers, a problem with the options or None), the same on every rank."""
    given = {keyword: getattr(args, option) for option, keyword in ASYNC_SGD_PROBLEM_OPTIONS.items()
             if getattr(args, option) is not None}
    n_workers = args.workers
    if args.runtime == "mpi":
        if comm.size < 2:
            return given, n_workers, "the mpi runtime needs at least 2 ranks (a server and a worker): run it " \
                                     "under mpiexec -n N with N >= 2, or use --runtime simulator"
        if n_workers is not None and n_workers != comm.size - 1:
            return given, n_workers, (f"--workers {n_workers}, but the mpi runtime at {comm.size} ranks has "
                                      f"{comm.size - 1} workers (ranks - 1); omit --workers")
    if args.taus is not None:
        workers = n_workers or (comm.size - 1 if args.runtime == "mpi" else len(args.taus))
        if len(args.taus) != workers:
            return given, n_workers, f"--taus gives {len(args.taus)} compute times for {workers} workers"
        if args.runtime == "simulator":
            n_workers = workers
    accepted = _problem_parameters(args.problem)
    refused = [option for option, keyword in ASYNC_SGD_PROBLEM_OPTIONS.items()
               if keyword in given and accepted is not None and keyword not in accepted]
    if refused:
        return given, n_workers, (f"problem {args.problem} takes no "
                                  f"{', '.join('--' + option.replace('_', '-') for option in refused)}")
    return given, n_workers, None


def run_async_sgd(args, comm):
    from .asyncsgd import AsyncSGDSettings, async_sgd, get_problem, methods
    from .core.comm import check_collectively
    from .core.io import check_writable, write_json
    check_writable(args.output, comm)
    check_writable(args.plot, comm, what="plot")
    options, n_workers, problem = _async_sgd_checks(args, comm)
    check_collectively(comm, problem or _plot_problem(args.plot, comm))
    names = _method_order(methods()) if args.method == "all" else [args.method]
    tau = args.taus if args.taus is not None else args.tau
    common = dict(runtime=args.runtime, n_workers=n_workers, epsilon=args.epsilon, step_size=args.step_size,
                  batch=args.batch, threshold=args.threshold, stop_computations=args.stop_computations,
                  delay_adaptive=not args.no_delay_adaptive, restart=not args.no_restart,
                  max_steps=args.max_steps, max_gradients=args.max_gradients, max_time=args.max_time,
                  stop_at_epsilon=not args.no_stop_at_epsilon, eval_every=args.eval_every, seed=args.seed,
                  time_unit=args.time_unit, idle_timeout=args.idle_timeout, trace=args.trace,
                  verbose=not args.quiet, log_every=args.log_every)
    if tau is not None:
        common["tau"] = tau
    for name in names:  # every method's settings are checked before any work
        AsyncSGDSettings.collective(comm, method=name, **common)
    error = built = None
    try:  # built once: every method runs on the same problem
        built = get_problem(args.problem, seed=args.seed, comm=comm, **options)
    except (ValueError, TypeError, KeyError, ImportError) as failure:
        error = f"cannot set up the problem: {failure}"
    check_collectively(comm, error)
    results = {name: async_sgd(built, comm=comm, method=name, **common) for name in names}
    if comm.rank == 0:
        source = {"problem": args.problem, "problem_options": options, "ranks": comm.size}
        if args.method == "all":
            payload = {"methods": names, "comparison": _async_sgd_comparison(results),
                       "results": {name: result.to_dict() for name, result in results.items()}, "source": source}
        else:
            payload = dict(results[args.method].to_dict(), source=source)
        write_json(args.output, payload)
        if args.plot:
            _async_sgd_plot(results, args.plot)
        print("\n".join(_async_sgd_table(results, compare=args.method == "all")))
        print(f"result written to {args.output}" + (f"; plot written to {args.plot}" if args.plot else ""),
              flush=True)
    return 0


def _plot_problem(path, comm):
    """Why a plot to ``path`` (None: no plot) cannot be drawn, on rank 0 (which draws it), or None: checked with
    the other options, before any work, so that a missing matplotlib does not fail the run at its end."""
    from .federated.result import require_plotting
    if not path or comm.rank != 0:
        return None
    try:
        require_plotting()
    except ImportError as error:
        return f"--plot: {error}"
    return None


def _method_order(registered):
    """The registered methods, slowest theory first (Minibatch, Asynchronous, Rennala, Ringmaster), then others."""
    known = [name for name in ("minibatch", "asgd", "rennala", "ringmaster") if name in registered]
    return known + [name for name in registered if name not in known]


def _async_sgd_comparison(results):
    """Per method: the measured and predicted times to epsilon and, beside Rennala's, their ratios."""
    rennala = results.get("rennala")
    comparison = {}
    for name, result in results.items():
        measured, predicted = result.time_to_epsilon, result.predicted.get(name)
        row = {"status": result.status, "measured": measured, "predicted": predicted}
        if rennala is not None:
            base, base_predicted = rennala.time_to_epsilon, rennala.predicted.get("rennala")
            row["measured/rennala"] = measured / base if measured is not None and base else None
            row["predicted/rennala"] = predicted / base_predicted if predicted is not None and base_predicted \
                else None
        comparison[name] = row
    return comparison


def _async_sgd_table(results, compare=False):
    """The lines of the summary: what was run, then one row per method."""
    first = next(iter(results.values()))
    info, problem = first.info, first.info["problem"]
    predicted = first.predicted
    lines = [f"async-sgd: {problem['name']}, d = {problem['dim']}, L = {problem['L']:.4g}, "
             f"sigma^2 = {problem['sigma2']:.4g}, epsilon = {info['epsilon']:.4g}",
             f"workers: {info['n_workers']} ({info['runtime']} runtime), compute times {info['tau']}, "
             f"m* = {predicted.get('m_star')}; times in compute-time units, predicted with constants dropped"]
    header = ["method", "status", "steps", "gradients", "discarded", "cancelled", "time to eps", "predicted"]
    if compare:
        header += ["measured/rennala", "predicted/rennala"]
    comparison = _async_sgd_comparison(results)
    rows = []
    for name, result in results.items():
        workers = result.info["workers"]
        row = [name, result.status, str(result.steps), str(result.gradients), str(sum(workers["discarded"])),
               str(sum(workers["cancelled"])), _number(result.time_to_epsilon, ".6g", "not reached"),
               _number(result.predicted.get(name), ".4g")]
        if compare:
            row += [_number(comparison[name].get("measured/rennala"), ".3f"),
                    _number(comparison[name].get("predicted/rennala"), ".3f")]
        rows.append(row)
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]

    def line(cells):
        return "  ".join(cell.ljust(width) if i < 2 else cell.rjust(width)
                         for i, (cell, width) in enumerate(zip(cells, widths))).rstrip()
    rule = "-" * len(line(header))
    return lines + [rule, line(header), rule] + [line(row) for row in rows] + [rule]


def _number(value, spec, missing="-"):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, spec)


def _async_sgd_plot(results, path):
    """||grad f||^2 and f - f_low against time, one curve per method (one method: the result's own plot)."""
    if len(results) == 1:
        next(iter(results.values())).plot(path)
        return
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .core.io import write_atomic
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    first = next(iter(results.values()))
    for name, result in results.items():
        h, f_low = result.history, result.info["problem"]["f_low"]
        axes[0].semilogy(h["time"], h["grad_norm2"], label=name)
        axes[1].semilogy(h["time"], [max(v - f_low, 1e-300) for v in h["loss"]], label=name)
    axes[0].axhline(first.info["epsilon"], color="gray", linestyle="--", label="epsilon")
    axes[0].set_title("||grad f(x)||^2")
    axes[1].set_title("f(x) - f_low")
    for axis in axes:
        axis.set_xlabel("time (compute-time units)")
        axis.legend()
    figure.suptitle(f"{first.info['problem']['name']}, {first.info['n_workers']} workers, "
                    f"compute times {first.info['tau']} ({first.info['runtime']})")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    write_atomic(path, buffer.getvalue(), mode="wb")


def _federated_clients(args, comm):
    """(clients, test data, n_features, n_classes, source, problem) of the CLI's data options."""
    import numpy as np

    from .data import load_dataset
    from .federated import partition, split_clients, synthetic_clients
    source = {"data": args.data, "seed": args.seed, "clients": args.clients}
    if args.data == "synthetic":
        source.update(alpha=args.alpha, beta=args.beta)
        try:
            clients = synthetic_clients(args.clients, args.alpha, args.beta, seed=args.seed, max_samples=1000)
        except ValueError as error:
            return None, None, 0, 0, source, str(error)
        train, test = [], []
        for X, y in clients:  # FedProx holds out a share of every client's rows
            cut = max(1, int(round(args.test_fraction * y.size)))
            train.append((X[cut:], y[cut:]))
            test.append((X[:cut], y[:cut]))
        test = (np.concatenate([X for X, _ in test]), np.concatenate([y for _, y in test]))
        return train, test, 60, 10, source, None
    data = load_dataset(args.data, comm, test_fraction=args.test_fraction, seed=args.seed)
    source.update(partition=args.partition, test_fraction=args.test_fraction)
    options = {"alpha": args.alpha} if args.partition in ("dirichlet", "quantity") else {}
    source.update(options)
    try:
        parts = partition(args.partition, data.y_train, args.clients, args.seed, **options)
    except ValueError as error:
        return None, None, 0, 0, source, str(error)
    return (split_clients(data.X_train, data.y_train, parts), (data.X_test, data.y_test), data.n_features,
            data.n_classes, source, None)


def run_federated(args, comm):
    from .core.comm import check_collectively
    from .core.io import check_writable, write_json
    from .federated import run_federated as federate
    check_writable(args.output, comm)
    check_writable(args.csv, comm, what="CSV file")
    check_writable(args.plot, comm, what="plot")
    check_writable(args.checkpoint, comm, what="checkpoint")
    clients, test, n_features, n_classes, source, problem = _federated_clients(args, comm)
    model, model_problem = (None, None) if problem else _built(
        "model", args.model, {"hidden": args.hidden if args.model == "mlp" else None},
        {"n_features": n_features, "n_classes": n_classes, "alpha": args.weight_penalty})
    strategy_options = {"server_lr": args.server_lr, "server_momentum": args.server_momentum}
    if args.mu is not None:
        if args.strategy != "fedprox":
            model_problem = model_problem or f"--mu is FedProx's; strategy {args.strategy} takes no mu"
        strategy_options["mu"] = args.mu
    hooks, hooks_problem = _federated_hooks(args)
    check_collectively(comm, problem or model_problem or hooks_problem or _plot_problem(args.plot, comm))
    result = federate(model, clients, args.strategy, comm, strategy_options=strategy_options, test_data=test,
                      hooks=hooks,
                      rounds=args.rounds, fraction=args.fraction, client_sampling=args.client_sampling,
                      local_epochs=args.local_epochs, batch_size=args.batch_size or None, lr=args.lr, momentum=args.momentum, seed=args.seed,
                      dropout=args.dropout, stragglers=args.stragglers, tolerate_failures=args.tolerate_failures,
                      reducer=args.reducer, eval_every=args.eval_every, checkpoint=args.checkpoint,
                      checkpoint_every=args.checkpoint_every, verbose=not args.quiet, log_every=args.log_every)
    if comm.rank == 0:
        write_json(args.output, dict(result.to_dict(), source=source))
        if args.csv:
            result.to_csv(args.csv)
        if args.plot:
            result.plot(args.plot)
        accuracy = "" if result.test_accuracy is None else f"; test accuracy {result.test_accuracy:.4f}"
        print(f"federated {result.rounds} rounds ({result.status}); client loss {result.loss:.6e}{accuracy}; "
              f"result written to {args.output}")
    return 3 if result.status == "interrupted" else 0


def _federated_hooks(args):
    """(the hooks of --dp-* and --secure, DP first so that the clipped update is masked; a problem or None)."""
    from .federated import DPHook, SecureAggregationHook
    hooks = []
    try:
        if args.dp_clip is not None and args.dp_noise is not None and not args.dp_noise > 0:
            return [], f"--dp-noise must be > 0 (z = {args.dp_noise} gives no privacy: epsilon is infinite)"
        if args.dp_clip is not None:
            hooks.append(DPHook(args.dp_clip, 1.0 if args.dp_noise is None else args.dp_noise,
                                1e-5 if args.dp_delta is None else args.dp_delta, seed=args.seed))
        elif args.dp_noise is not None or args.dp_delta is not None:
            return [], "--dp-noise and --dp-delta go with --dp-clip"
        if args.secure:
            hooks.append(SecureAggregationHook(args.seed, drop_after_masking=args.drop_after_masking))
        elif args.drop_after_masking:
            return [], "--drop-after-masking goes with --secure"
    except ValueError as error:
        return [], str(error)
    return hooks, None


def _built(kind, name, given, always):
    """(the registered ``kind`` ``name`` built from ``always`` and the ``given`` options it takes, problem).

    ``always`` holds the options every piece of the kind may take (passed when its constructor names
    them); an option the user gave that it does not take is a problem, as is a constructor's error."""
    import inspect

    from .core.registry import lookup
    factory = lookup(kind, name)
    accepted = inspect.signature(factory).parameters
    refused = [option for option, value in given.items() if value is not None and option not in accepted]
    if refused:
        return None, f"{kind} {name} takes no {', '.join(refused)}"
    options = {key: value for key, value in {**always, **given}.items() if value is not None and key in accepted}
    try:
        return factory(**options), None
    except (TypeError, ValueError) as error:
        return None, str(error)


def run_train(args, comm):
    from .core.comm import check_collectively
    from .core.io import check_writable, write_json
    from .data import load_dataset
    from .train import train
    check_writable(args.output, comm)
    check_writable(args.checkpoint, comm, what="checkpoint")
    compressor_options, problem = _compressor_choice(args)
    check_collectively(comm, problem)  # before the data and the reducer (and when a Slurm job is rendered)
    data = load_dataset(args.data, comm, test_fraction=args.test_fraction, seed=args.seed)
    model, problem = _built("model", args.model, {"hidden": args.hidden if args.model == "mlp" else None},
                            {"n_features": data.n_features, "n_classes": data.n_classes, "alpha": args.alpha})
    optimizer, optimizer_problem = _built("optimizer", args.optimizer,
                                          {"momentum": args.momentum, "weight_decay": args.weight_decay},
                                          {"lr": args.lr})
    check_collectively(comm, problem or optimizer_problem)
    result = train(model, data.X_train, data.y_train, optimizer, comm, epochs=args.epochs,
                   batch_size=args.batch_size, seed=args.seed, max_steps=args.max_steps, time_limit=args.time_limit,
                   reducer=args.reducer, compressor=args.compressor, compressor_options=compressor_options or None,
                   **({} if args.error_feedback is None else {"error_feedback": args.error_feedback}),
                   zero_stage=args.zero_stage,
                   bucket_bytes=args.bucket_bytes, overlap=not args.no_overlap, checkpoint=args.checkpoint,
                   checkpoint_every=args.checkpoint_every, log_every=args.log_every, verbose=not args.quiet,
                   blas_threads=args.blas_threads)
    if comm.rank == 0:
        test = {"rows": data.n_test, "loss": model.loss(result.params, data.X_test, data.y_test)}
        if data.n_classes and model.n_classes:
            test["accuracy"] = float((model.predict(result.params, data.X_test) == data.y_test).mean())
        payload = dict(result.to_dict(), test=test, source={"data": args.data, "test_fraction": args.test_fraction,
                                                            "seed": args.seed})
        write_json(args.output, payload)
        accuracy = f", accuracy {test['accuracy']:.4f}" if "accuracy" in test else ""
        print(f"trained {result.steps} steps ({result.status}); training loss {result.loss:.6e}; test loss "
              f"{test['loss']:.6e}{accuracy}; result written to {args.output}")
    return 3 if result.status == "interrupted" else 0


def _settings(args):
    return dict(rho=args.rho, alpha=args.alpha, eps_abs=args.eps_abs, eps_rel=args.eps_rel,
                max_iter=args.max_iter, time_limit=args.time_limit, log_every=args.log_every,
                reducer=args.reducer, adaptive_rho=args.adaptive_rho, verbose=not args.quiet,
                blas_threads=args.blas_threads, gap_tol=args.gap_tol, gap_every=args.gap_every,
                working_set={"auto": None, "on": True, "off": False}[args.working_set],
                working_set_size=args.working_set_size, screening=args.screening)


def _groups(args, n_columns):
    """The group labels of --groups or --group-size (None when neither is given)."""
    if args.group_size is not None:
        return [column // args.group_size for column in range(n_columns)]
    return args.groups


def run_solve(args, comm):
    import numpy as np

    from .admm import solve
    from .core.io import check_writable, write_json
    check_writable(args.output, comm)
    check_writable(args.checkpoint, comm, what="checkpoint")
    if args.data:
        from .data import load_rows
        A, b = load_rows(args.data, comm)
        source = {"data": args.data}
    else:
        A, b, _, source = _load_lasso_problem(args, comm)
        if args.loss == "logistic":
            b = (b > 0).astype(np.float64)
    lam, lam_ratio = args.lam, args.lam_ratio
    if lam is None and lam_ratio is None and args.penalty in ("l1", "elastic_net"):
        lam_ratio = 0.1
    result = solve(A, b, args.loss, args.penalty, lam, comm, lam_ratio=lam_ratio, l1_ratio=args.l1_ratio,
                   groups=_groups(args, A.shape[1]), lower=args.lower, upper=args.upper, intercept=args.intercept,
                   delta=args.delta, x_solver=args.x_solver, checkpoint=args.checkpoint,
                   checkpoint_every=args.checkpoint_every, **_settings(args))
    if comm.rank == 0:
        payload = dict(result.to_dict(), source=source)
        write_json(args.output, payload)
        print(f"{_summary(result)}; result written to {args.output}")
    return 3 if result.status == "interrupted" else 0


def _summary(result):
    """One line on the answer's quality: objective, status, nonzeros and the KKT residual."""
    info = result.info
    return (f"final objective {result.objective:.12e} ({result.status}, {result.iterations} iterations, "
            f"{result.timings['total']:.3f} s); nonzeros {info['nonzeros']} of {info['n']}; "
            f"KKT residual {info['kkt_residual']:.2e}")


def parse_arguments(argv, parser_class=Parser):
    """The command line's namespace; an unknown argument is an error of its subcommand (with its usage)."""
    args, unknown = build_parser(parser_class).parse_known_args(argv)
    if unknown:  # reported with the subcommand's usage, not the top level's
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def workload_argument_problem(workload, arguments):
    """Why ``arguments`` would fail the Slurm ``workload``'s own parser (one line), or None.

    mpiopt's subcommands are parsed by the command line's parser, the benchmark scripts by their
    ``parse_args`` (found in the current folder, where the job runs, or beside the package); a workload that
    is neither is not checked."""
    import contextlib
    import importlib.util
    import io
    import os

    from .core.registry import lookup
    argv = list(lookup("workload", workload).argv)
    if argv[:2] == ["-m", "mpiopt"]:
        try:
            args = parse_arguments(argv[2:] + list(arguments), CheckingParser)
        except CommandError as error:
            return str(error)
        check = getattr(args, "check", None)  # the checks of the options alone, without data or ranks
        return check(args) if check else None
    if argv[:1] == ["-m"] or not argv:
        return None
    candidates = [os.path.abspath(argv[0]), os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), argv[0])]
    script = next((path for path in candidates if os.path.isfile(path)), None)
    if script is None:
        return None
    spec = importlib.util.spec_from_file_location(f"mpiopt_workload_{workload.replace('-', '_')}", script)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(script))  # as when it runs: its helper modules beside it
    try:
        spec.loader.exec_module(module)
        if not hasattr(module, "parse_args"):
            return None
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            module.parse_args(list(arguments) + argv[1:])
    except SystemExit as exit:
        lines = errors.getvalue().strip().splitlines()
        if exit.code and lines:  # argparse's "PROG: error: MESSAGE", PROG being this process's name
            return f"{argv[0]}: {lines[-1].split('error: ', 1)[-1]}"
        return f"{argv[0]}: the arguments ask for help, the job would run nothing"
    finally:
        sys.path.remove(os.path.dirname(script))
    return None


def run_slurm(args, comm):
    from .slurm import SlurmError, render_script, submit, wait
    workload_args = args.workload_args
    output = [a for i, a in enumerate(workload_args) if i and workload_args[i - 1] == "--output"]
    problem = workload_argument_problem(args.workload, workload_args)
    if problem:
        raise CommandError(f"the arguments of workload {args.workload}: {problem}")
    try:
        text = render_script(args.workload, workload_args, job_name=args.job_name, ntasks=args.ntasks,
                             cpus_per_task=args.cpus_per_task, time=args.time, python=sys.executable,
                             launcher=args.launcher, signal_seconds=args.signal_seconds or None,
                             partition=args.partition)
        if args.render_only:
            print(text, end="")
            return 0
        script = args.script or f"{args.job_name or 'mpiopt-' + args.workload}.sbatch"
        job_id = submit(text, script)
        print(f"submitted job {job_id} ({script})", flush=True)
        if not args.wait:
            return 0
        result = wait(job_id, result=output[-1] if output else None)
    except (ValueError, SlurmError) as error:
        raise CommandError(str(error)) from None
    print(f"job {job_id} {result.state} with exit code {result.exit_code} after {result.restarts} requeue(s); "
          f"log {result.output}" + (f"; result {result.result}" if result.result else ""))
    return result.exit_code


def _guard_against_plain_srun(comm):
    """srun without a PMI plugin starts every task as rank 0 of 1: refuse loudly instead of running N copies."""
    import os
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS")
    if tasks and tasks.isdigit() and int(tasks) > 1 and comm.size == 1 and "SLURM_STEP_ID" in os.environ:
        print(f"mpiopt: error: Slurm started {tasks} tasks but MPI sees 1 rank: srun was run without a PMI "
              "plugin; launch with 'srun --mpi=pmi2' (or mpiexec)", file=sys.stderr, flush=True)
        return True
    return False


def _load_lasso_problem(args, comm):
    """This rank's rows, and a function that returns the whole problem (for the reference)."""
    if args.data:
        from .data.npz import npz_shapes, read_npz_range, read_npz_rows
        A, b = read_npz_rows(args.data, ("A", "b"), comm=comm)

        def full():
            return read_npz_range(args.data, ("A", "b"), 0, npz_shapes(args.data, ("A",))["A"][0])
        return A, b, full, {"data": args.data}
    from .data.synthetic import lasso_rows, make_lasso
    m, n = args.synthetic
    A, b, _ = make_lasso(m, n, args.density, args.noise, args.seed, args.correlation, comm=comm)
    return A, b, lambda: lasso_rows(m, n, 0, m, args.density, args.noise, args.seed, args.correlation), {
        "synthetic": {"rows": m, "n": n, "density": args.density, "noise": args.noise, "seed": args.seed,
                      "correlation": args.correlation}}


def run_lasso(args, comm):
    import numpy as np

    from .admm import lasso
    from .core.io import check_writable, write_json

    check_writable(args.output, comm)
    A, b, full_problem, source = _load_lasso_problem(args, comm)
    settings = _settings(args)
    if args.lam is not None:
        result = lasso(A, b, args.lam, comm=comm, **settings)
    else:
        result = lasso(A, b, comm=comm, lam_ratio=args.lam_ratio, **settings)

    payload = result.to_dict()
    payload["source"] = source
    if comm.rank == 0:
        if not args.no_reference:
            from .admm.reference import lasso_reference
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
    return 0


def main(argv=None):
    from .core import signals
    signals.catch()  # first: a signal that comes while the run starts waits for its first iteration
    from .core.threads import set_blas_threads_from_mpi
    set_blas_threads_from_mpi()
    from mpi4py import MPI

    from .core.comm import run_collectively
    comm = MPI.COMM_WORLD
    argv = list(sys.argv[1:] if argv is None else argv)
    workload_args = []
    if argv[:1] == ["slurm"] and "--" in argv:  # everything after -- belongs to the workload
        split = argv.index("--")
        argv, workload_args = argv[:split], argv[split + 1:]
    Parser.rank = comm.rank
    args = parse_arguments(argv)
    if getattr(args, "checkpoint", None) is None:  # no checkpoint to write: SIGTERM stops, SIGUSR1 is ignored
        signals.release(pass_on=True)
    if args.command == "slurm":
        args.workload_args = workload_args
        if comm.size > 1:
            if comm.rank == 0:
                print("mpiopt slurm: error: it submits jobs; run it as one process, not under mpiexec",
                      file=sys.stderr, flush=True)
            return 2
    elif _guard_against_plain_srun(comm):
        return 2
    try:
        return run_collectively(args.run, args, comm, comm=comm)
    except CommandError as error:  # one process: run_collectively passes it on
        print(f"mpiopt {args.command}: error: {error}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
