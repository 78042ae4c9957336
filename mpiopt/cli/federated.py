"""``mpiopt federated``: federated learning over virtual clients on the ranks.
"""
from .common import (add_checkpoint_options, add_options_flag, add_settings_flags, built, built_model, chosen_options,
                     declared_only, exit_status, model_name, plot_problem, positive_int, routed, settings_from, widths)


def add_parser(commands):
    from .. import data as _data  # noqa: F401 (registers the data sets)
    from .. import federated as _federated  # noqa: F401 (registers the strategies and partitioners)
    from .. import models as _models  # noqa: F401 (registers the models)
    from ..core.registry import names
    from ..federated import FederatedSettings
    federated = commands.add_parser(
        "federated", help="federated learning: K virtual clients over the ranks; FedAvg, SCAFFOLD, FedDyn, FedAdam, "
                          "federated ADMM, robust aggregation, Byzantine clients, compressed uploads",
        description="Federated learning with K virtual clients spread over the MPI ranks (client k on rank k % p): "
                    "each round a fraction of the clients trains locally from the global model and the strategy "
                    "combines their updates; the same model at any rank count.  Every strategy, attack and "
                    "compressor below takes its options through --strategy-opt, --attack-opt, --compressor-opt.")
    federated.add_argument("--strategy", default="fedavg", choices=names("strategy"), help="(default %(default)s)")
    federated.add_argument("--mu", type=float, help="fedprox: proximal weight (default 0.01)")
    add_options_flag(federated, "strategy")
    federated.add_argument("--server-lr", type=float,
                           help="server learning rate, for the strategies that take server_lr (default 1.0)")
    federated.add_argument("--server-momentum", type=float,
                           help="server momentum, FedAvgM, for the strategies that take it (default 0.0)")
    group = federated.add_argument_group("data")
    group.add_argument("--data", default="digits", choices=names("dataset") + ["synthetic"],
                       help="a registered data set, split by --partition, or FedProx's Synthetic(alpha, beta) "
                            "(default %(default)s)")
    group.add_argument("--partition", default="iid", choices=names("partition"), help="(default %(default)s)")
    add_options_flag(group, "partition")
    group.add_argument("--alpha", type=float, default=0.5,
                       help="dirichlet, quantity: concentration; synthetic: alpha (default %(default)s)")
    group.add_argument("--beta", type=float, default=0.5, help="synthetic: beta (default %(default)s)")
    group.add_argument("--clients", type=positive_int, default=100, help="K (default %(default)s)")
    group.add_argument("--test-fraction", type=float, default=0.25, help="held out for testing (default %(default)s)")
    group = federated.add_argument_group("model")
    group.add_argument("--model", default="softmax", type=model_name, metavar="MODEL",
                       help=f"{', '.join(names('model'))}, or torch:package.module:factory (a torch model; default %(default)s)")
    add_options_flag(group, "model")
    group.add_argument("--hidden", type=widths, default=(32,), metavar="W1,W2,...", help="mlp: hidden widths")
    group.add_argument("--weight-penalty", type=float, default=0.0, help="the model's L2 penalty alpha")
    group = federated.add_argument_group("rounds (generated from mpiopt.federated.FederatedSettings)")
    shown = {"batch_size": {"type": _rows, "default": FederatedSettings.batch_size, "metavar": "B",
                            "help": "B: rows per local step, 0 for all of a client's rows "
                                    f"(default {FederatedSettings.batch_size})"},
             "seed": {"type": int, "default": FederatedSettings.seed, "metavar": "SEED",
                      "help": "the split, the partition, the sampling, the faults and the local minibatch orders "
                              f"(default {FederatedSettings.seed})"}}
    settings = add_settings_flags(group, FederatedSettings, shown=shown, log="round")
    group = federated.add_argument_group("the options of the chosen attack (--attack) and uplink compressor "
                                         "(--compressor)")
    add_options_flag(group, "attack")
    add_options_flag(group, "compressor")
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
    add_checkpoint_options(group, "state at round boundaries", "rounds")
    federated.set_defaults(run=run_federated, parser=federated, federated_settings=settings)


def _rows(text):
    """--batch-size: rows per local step, 0 (None) for all of a client's rows."""
    value = int(text)
    return None if value == 0 else value


def _federated_clients(args, comm):
    """(clients, test data, n_features, n_classes, source, problem) of the CLI's data options."""
    import numpy as np

    from ..data import load_dataset
    from ..federated import partition, split_clients, synthetic_clients
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
    options, problem = chosen_options(args, "partition", args.partition)
    if problem:
        return None, None, 0, 0, source, problem
    options = {**declared_only("partition", args.partition, {"alpha": args.alpha}), **options}
    source.update(options)
    try:
        parts = partition(args.partition, data.y_train, args.clients, args.seed, **options)
    except ValueError as error:
        return None, None, 0, 0, source, str(error)
    return (split_clients(data.X_train, data.y_train, parts), (data.X_test, data.y_test), data.n_features,
            data.n_classes, source, None)


def _federated_hooks(args):
    """(the hooks of --dp-* and --secure, DP first so that the clipped update is masked; a problem or None)."""
    from ..federated import DPHook, SecureAggregationHook
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


def run_federated(args, comm):
    from ..core.comm import check_collectively
    from ..core.io import check_writable, write_json
    from ..federated import FederatedSettings
    from ..federated import run_federated as federate
    check_writable(args.output, comm)
    check_writable(args.csv, comm, what="CSV file")
    check_writable(args.plot, comm, what="plot")
    check_writable(args.checkpoint, comm, what="checkpoint")
    clients, test, n_features, n_classes, source, problem = _federated_clients(args, comm)
    model, model_problem = (None, None) if problem else built_model(
        args.model, {}, {"n_features": n_features, "n_classes": n_classes, "alpha": args.weight_penalty,
                                  "hidden": args.hidden}, args)
    strategy_options, strategy_problem = routed("strategy", args.strategy, {
        "server_lr": args.server_lr, "server_momentum": args.server_momentum, "mu": args.mu})
    chosen, chosen_problem = chosen_options(args, "strategy", args.strategy)
    strategy_options.update(chosen)
    attack_options, attack_problem = chosen_options(args, "attack", args.attack)
    compressor_options, compressor_problem = chosen_options(args, "compressor", args.compressor)
    model_problem = model_problem or strategy_problem or chosen_problem or attack_problem or compressor_problem
    hooks, hooks_problem = _federated_hooks(args)
    check_collectively(comm, problem or model_problem or hooks_problem or plot_problem(args.plot, comm))
    result = federate(model, clients, args.strategy, comm, strategy_options=strategy_options, test_data=test,
                      hooks=hooks, attack_options=attack_options, compressor_options=compressor_options, checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
                      **settings_from(args, args.federated_settings, FederatedSettings))
    if comm.rank == 0:
        write_json(args.output, dict(result.to_dict(), source=source))
        if args.csv:
            result.to_csv(args.csv)
        if args.plot:
            result.plot(args.plot)
        accuracy = "" if result.test_accuracy is None else f"; test accuracy {result.test_accuracy:.4f}"
        print(f"federated {result.rounds} rounds ({result.status}); client loss {result.loss:.6e}{accuracy}; "
              f"result written to {args.output}")
    return exit_status(result)
