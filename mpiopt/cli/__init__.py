"""Command line: ``mpiexec -n N python -m mpiopt <command> ...``.

One module per subcommand (``solve`` holds ``lasso`` and ``solve``, then
``train``, ``federated``, ``asyncsgd`` for ``async-sgd``, ``slurm``), each with
``add_parser(commands)`` and its ``run(args, comm)``; ``common`` holds what
they share.  Runs with ``python -m mpi4py`` semantics: an error that every
rank agrees on (a CollectiveError from validation) is printed once and every
rank exits with status 2; any other uncaught exception on any rank prints its
traceback and aborts the whole MPI job at once, so no rank is left waiting.

Plugins (:mod:`mpiopt.core.plugins`: the ``mpiopt.plugins`` entry points,
``MPIOPT_PLUGINS`` and ``--plugin MODULE``) are loaded on every rank before
the arguments are parsed, so their pieces are choices and their options are
listed in ``--help``.

Exit status, the same for every subcommand: 0 done; 2 a usage or input error
(reported once, on every rank alike); 3 interrupted by a signal after writing
its checkpoint (run the same command again to resume).  ``mpiopt slurm
--wait`` exits with the job's exit status.
"""
import importlib
import sys

from .. import __version__
from .common import (EXIT_STATUS, EXIT_USAGE, CheckingParser, CommandError, HelpFormatter, Parser,
                     guard_against_plain_srun, registry_listing)

__all__ = ["CheckingParser", "CommandError", "Parser", "build_parser", "main", "parse_arguments"]


# subcommand -> the module that adds its parser, in the order of the listing; a module is imported only when
# its subcommand is named (or when the top level lists them all), so a run pays for its own imports alone
SUBCOMMANDS = {"lasso": "solve", "solve": "solve", "train": "train", "federated": "federated",
               "async-sgd": "asyncsgd", "slurm": "slurm"}


def build_parser(parser_class=Parser, command=None):
    """The command line's parser: every subcommand, or with ``command`` (a name of ``SUBCOMMANDS``) only the
    subcommands of its module, the others' modules left unimported."""
    parser = parser_class(
        prog="mpiopt", description="Distributed optimization on MPI ranks. Run under mpiexec -n N.",
        epilog=EXIT_STATUS)
    parser.add_argument("--version", action="version", version=f"mpiopt {__version__}")
    parser.add_argument("--plugin", action="append", metavar="MODULE", default=[],
                        help="import MODULE first, on every rank, for the pieces it registers (repeatable; also "
                             "MPIOPT_PLUGINS=MOD1,MOD2 and the mpiopt.plugins entry points); may come anywhere "
                             "on the line")
    commands = parser.add_subparsers(dest="command", required=True)
    modules = [SUBCOMMANDS[command]] if command else SUBCOMMANDS.values()
    for name in dict.fromkeys(modules):
        module = importlib.import_module(f".{name}", __name__)
        (getattr(module, "add_parsers", None) or module.add_parser)(commands)  # solve adds lasso and solve
    for subcommand in commands.choices.values():
        subcommand.formatter_class = HelpFormatter
        subcommand.epilog = "\n".join(registry_listing(subcommand) + ["", EXIT_STATUS])
    return parser


def named_command(argv):
    """The subcommand ``argv`` names first (its ``--plugin`` options aside), or None: top-level help, the
    version, no subcommand or an unknown one, which the full parser answers with every subcommand listed."""
    rest, _ = plugin_arguments(argv)
    return rest[0] if rest and rest[0] in SUBCOMMANDS else None


def parse_arguments(argv, parser_class=Parser):
    """The command line's namespace; an unknown argument is an error of its subcommand (with its usage)."""
    args, unknown = build_parser(parser_class, named_command(argv)).parse_known_args(argv)
    if unknown:  # reported with the subcommand's usage, not the top level's
        args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def plugin_arguments(argv):
    """(``argv`` without its ``--plugin MODULE`` / ``--plugin=MODULE``, the modules named), anywhere on the line."""
    rest, modules, index = [], [], 0
    while index < len(argv):
        argument = argv[index]
        if argument == "--plugin" and index + 1 < len(argv):
            modules.append(argv[index + 1])
            index += 2
            continue
        if argument.startswith("--plugin="):
            modules.append(argument.split("=", 1)[1])
        else:
            rest.append(argument)
        index += 1
    return rest, modules


def main(argv=None):
    """Run the command line on this rank; its exit status.  The process's entry is :mod:`mpiopt.__main__`,
    which installs the signal handlers before this module is imported; once the run is over both signals
    are ignored until the process exits (:func:`mpiopt.core.signals.finish`)."""
    from ..core import signals
    signals.catch()  # a no-op after mpiopt.__main__; for callers of main() itself
    try:
        return _run(argv, signals)
    finally:
        signals.finish()


def _run(argv, signals):
    from ..core.threads import set_blas_threads_from_mpi
    set_blas_threads_from_mpi()
    from mpi4py import MPI

    from ..core.comm import run_collectively
    from ..core.plugins import load_plugins, plugin_modules
    comm = MPI.COMM_WORLD
    argv = list(sys.argv[1:] if argv is None else argv)
    workload_args = []
    if argv[:1] == ["slurm"] and "--" in argv:  # everything after -- belongs to the workload
        split = argv.index("--")
        argv, workload_args = argv[:split], argv[split + 1:]
    argv, modules = plugin_arguments(argv)
    Parser.rank = comm.rank
    status = run_collectively(load_plugins, plugin_modules(modules), comm, comm=comm)
    if status == EXIT_USAGE:
        return EXIT_USAGE
    args = parse_arguments(argv)
    if getattr(args, "checkpoint", None) is None:  # no checkpoint to write: SIGTERM stops, SIGUSR1 is ignored
        signals.release(pass_on=True)
    if args.command == "slurm":
        args.workload_args = workload_args
        if comm.size > 1:
            if comm.rank == 0:
                print("mpiopt slurm: error: it submits jobs; run it as one process, not under mpiexec",
                      file=sys.stderr, flush=True)
            return EXIT_USAGE
    elif guard_against_plain_srun(comm):
        return EXIT_USAGE
    try:
        return run_collectively(args.run, args, comm, comm=comm)
    except CommandError as error:  # one process: run_collectively passes it on
        print(f"mpiopt {args.command}: error: {error}", file=sys.stderr, flush=True)
        return EXIT_USAGE

if __name__ == "__main__":
    sys.exit(main())
