"""``mpiopt train``: data-parallel training with DDP buckets, compression and ZeRO.
"""
import argparse

from .common import (add_checkpoint_options, add_options_flag, add_settings_flags, built, built_model, chosen_options,
                     exit_status, model_name, settings_from, widths)


def add_parser(commands):
    from .. import data as _data  # noqa: F401 (registers the data sets)
    from .. import models as _models  # noqa: F401 (registers the models)
    from .. import optim as _optim  # noqa: F401 (registers the optimizers)
    from ..core.registry import names
    from ..train import TrainSettings
    train = commands.add_parser(
        "train", help="data-parallel training of a model on a data set: DDP buckets and overlap, ZeRO stages 1-3",
        description="Data-parallel training: every rank holds the data set and takes its share of each global "
                    "batch; gradients are reduced in buckets while the backward pass goes on; --zero-stage shards "
                    "the optimizer state (1), the gradients (2) and the parameters (3) over the ranks.")
    train.add_argument("--model", default="mlp", type=model_name, metavar="MODEL",
                       help=f"{', '.join(names('model'))}, or torch:package.module:factory (a torch model; default %(default)s)")
    train.add_argument("--hidden", type=widths, default=(64,), metavar="W1,W2,...",
                       help="mlp: hidden layer widths (default 64)")
    train.add_argument("--alpha", type=float, default=1e-4, help="L2 penalty on the weights (default %(default)s)")
    train.add_argument("--data", default="digits", choices=names("dataset"), help="data set (default %(default)s)")
    train.add_argument("--test-fraction", type=float, default=0.25, help="held out for testing (default %(default)s)")
    add_options_flag(train, "model")
    train.add_argument("--optimizer", default="adam", choices=names("optimizer"), help="(default %(default)s)")
    add_options_flag(train, "optimizer")
    train.add_argument("--lr", type=float, default=1e-3, help="learning rate (default %(default)s)")
    train.add_argument("--momentum", type=float, help="sgd: momentum")
    train.add_argument("--weight-decay", type=float, help="L2 weight decay in the optimizer")
    group = train.add_argument_group("training settings (generated from mpiopt.train.TrainSettings)")
    shown = {"overlap": {"flags": ["--no-overlap"], "action": "store_false",
                         "help": "reduce the buckets after the backward pass"},
             "blas_threads": {"type": int, "default": None, "metavar": "K", "help": "BLAS threads per rank"},
             "compressor": {"choices": names("compressor"), "default": None,
                            "help": "compress the gradient buckets (default: none); its options below"},
             "seed": {"type": int, "default": TrainSettings.seed, "metavar": "SEED",
                      "help": "the order of the batches, the starting point and the test split "
                              f"(default {TrainSettings.seed})"}}
    settings = add_settings_flags(group, TrainSettings, shown=shown, log="training")
    add_options_flag(group, "reducer")
    group = train.add_argument_group("compressor options (declared by the compressors)")
    add_options_flag(group, "compressor")
    flags = _add_compressor_options(train, group)
    group = train.add_argument_group("output")
    group.add_argument("--output", default="mpiopt_train.json", help="JSON result file (default %(default)s)")
    add_checkpoint_options(group, "training state", "steps")
    train.set_defaults(run=run_train, parser=train, compressor_flags=flags, train_settings=settings,
                       check=lambda args: _compressor_choice(args)[1] or chosen_options(args, "reducer", args.reducer)[1])


# a compressor option the command line does not offer: the compressed reducer gives each rank its own worker
RANK_OWN_COMPRESSOR_OPTIONS = ("worker",)


def _add_compressor_options(parser, group):
    """A flag for every option the registered compressors declare (``registry.options``), typed and described by
    the declaration: ``--ratio``, ``--rank``, ``--bits``, ... (a plugin's compressor's too);
    ``--compressor-NAME`` where NAME is already a flag of the command.  Returns {option: flag}."""
    from ..core.registry import names, options
    owners = {}
    for compressor in names("compressor"):
        for option in options("compressor", compressor).values():
            if option.name not in RANK_OWN_COMPRESSOR_OPTIONS:
                owners.setdefault(option.name, []).append((compressor, option))
    flags = {}
    for name, takers in owners.items():
        flag = "--" + name.replace("_", "-")
        if flag in parser._option_string_actions:
            flag = "--compressor-" + name.replace("_", "-")
        defaults = {compressor: option.default for compressor, option in takers
                    if not option.required and option.default is not None}
        shown = (str(next(iter(defaults.values()))).lower() if len(set(map(repr, defaults.values()))) == 1 else
                 ", ".join(f"{compressor} {value}" for compressor, value in defaults.items()))
        group.add_argument(flag, dest=f"compressor_option_{name}", type=_typed(takers[0][1]), metavar=name.upper(),
                           help=f"{', '.join(compressor for compressor, _ in takers)}: {takers[0][1].help or name}"
                                + (f" (default {shown})" if shown else ""))
        flags[name] = flag
    return flags


def _typed(option):
    """An argparse type that reads a value as ``option`` declares it."""
    def convert(text):
        try:
            return option.parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    convert.__name__ = option.constraint()
    return convert


def _compressor_choice(args):
    """(the compressor options given, a problem or None): every option must be one the chosen compressor
    declares, and its constructor (which checks the values) must accept them."""
    from ..compression import get_compressor
    from ..core.registry import options
    given = {option: getattr(args, f"compressor_option_{option}") for option in args.compressor_flags
             if getattr(args, f"compressor_option_{option}") is not None}
    flags = args.compressor_flags
    if args.compressor is None:
        feedback = {None: [], True: ["--error-feedback"], False: ["--no-error-feedback"]}[args.error_feedback]
        named = [flags[option] for option in given] + (["--compressor-opt"] if args.compressor_opt else []) + feedback
        return given, (f"{', '.join(named)} set{'s' if len(named) == 1 else ''} a compressor's option; choose the "
                       "compressor with --compressor" if named else None)
    accepted = [option for option in options("compressor", args.compressor) if option in flags]
    refused = [flags[option] for option in given if option not in accepted]
    if refused:
        takes = ", ".join(flags[option] for option in accepted) or "no options"
        return given, f"compressor {args.compressor} takes {takes}; got {', '.join(refused)}"
    chosen, problem = chosen_options(args, "compressor", args.compressor)
    if problem:
        return given, problem
    given.update(chosen)
    try:
        get_compressor(args.compressor, **given)  # its constructor checks the values
    except (TypeError, ValueError) as error:
        return given, str(error)
    return given, None


def run_train(args, comm):
    from ..core.comm import check_collectively
    from ..core.io import check_writable, write_json
    from ..data import load_dataset
    from ..train import TrainSettings, train
    check_writable(args.output, comm)
    check_writable(args.checkpoint, comm, what="checkpoint")
    compressor_options, problem = _compressor_choice(args)
    reducer_options, reducer_problem = chosen_options(args, "reducer", args.reducer)
    check_collectively(comm, problem or reducer_problem)  # before the data and the reducer (and a Slurm job)
    data = load_dataset(args.data, comm, test_fraction=args.test_fraction, seed=args.seed)
    model, problem = built_model(args.model, {}, {"n_features": data.n_features, "n_classes": data.n_classes,
                                                     "alpha": args.alpha, "hidden": args.hidden}, args)
    optimizer, optimizer_problem = built("optimizer", args.optimizer,
                                         {"momentum": args.momentum, "weight_decay": args.weight_decay},
                                         {"lr": args.lr}, args)
    check_collectively(comm, problem or optimizer_problem)
    settings = dict(settings_from(args, args.train_settings, TrainSettings),
                    compressor_options=compressor_options or None, reducer_options=reducer_options or None)
    result = train(model, data.X_train, data.y_train, optimizer, comm, checkpoint=args.checkpoint,
                   checkpoint_every=args.checkpoint_every, **settings)
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
    return exit_status(result)
