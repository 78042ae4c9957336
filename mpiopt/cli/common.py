"""What the subcommands share: the rank-0 parser, argument types, the checkpoint flags, building a
registered piece, the plot check and the exit codes.
"""
import argparse
import math
import re
import sys

EXIT_DONE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 2, 3
EXIT_STATUS = ("exit status: 0 done; 2 a usage or input error (the same one-line message on every rank); 3 "
               "interrupted by a signal after writing its checkpoint (run the same command again to resume)")


def exit_status(result):
    """The exit status of a finished run: 3 when a signal interrupted it (its checkpoint written), else 0."""
    return EXIT_INTERRUPTED if result.status == "interrupted" else EXIT_DONE


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


def shape(text):
    match = re.fullmatch(r"\s*(\d+)\s*[xX,]\s*(\d+)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected ROWSxCOLUMNS such as 20000x500, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def labels(text):
    try:
        return [int(label) for label in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integer labels such as 0,0,1,1, got {text!r}")


def positive_int(text):
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return int(text)


def widths(text):
    try:
        widths = tuple(int(width) for width in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer widths such as 64,32, got {text!r}")
    return widths


def boolean(text):
    value = text.strip().lower()
    if value in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return value in ("true", "yes", "on", "1")
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def literal(text):
    """An option value of no declared type: an integer, a number, true/false, or the text itself."""
    for convert in (int, float, boolean):
        try:
            return convert(text)
        except (ValueError, argparse.ArgumentTypeError):
            pass
    return text


def add_checkpoint_options(group, state, unit):
    """--checkpoint and --checkpoint-every, the same for every command that resumes from its checkpoint."""
    group.add_argument("--checkpoint", metavar="FILE.npz",
                       help=f"write the {state} here (on SIGUSR1, SIGTERM and every --checkpoint-every {unit}) "
                            "and resume from it when it exists")
    group.add_argument("--checkpoint-every", type=int, default=0,
                       help=f"{unit} between checkpoints (0: only on signals and at the end)")


def built(kind, name, given, always):
    """(the registered ``kind`` ``name`` built from ``always`` and the ``given`` options it takes, problem).

    ``always`` holds the options every piece of the kind may take (passed when its constructor names
    them); an option the user gave that it does not take is a problem, as is a constructor's error."""
    import inspect

    from ..core.registry import lookup
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


def plot_problem(path, comm):
    """Why a plot to ``path`` (None: no plot) cannot be drawn, on rank 0 (which draws it), or None: checked with
    the other options, before any work, so that a missing matplotlib does not fail the run at its end."""
    from ..federated.result import require_plotting
    if not path or comm.rank != 0:
        return None
    try:
        require_plotting()
    except ImportError as error:
        return f"--plot: {error}"
    return None


def number(value, spec, missing="-"):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, spec)


def guard_against_plain_srun(comm):
    """srun without a PMI plugin starts every task as rank 0 of 1: refuse loudly instead of running N copies."""
    import os
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS")
    if tasks and tasks.isdigit() and int(tasks) > 1 and comm.size == 1 and "SLURM_STEP_ID" in os.environ:
        print(f"mpiopt: error: Slurm started {tasks} tasks but MPI sees 1 rank: srun was run without a PMI "
              "plugin; launch with 'srun --mpi=pmi2' (or mpiexec)", file=sys.stderr, flush=True)
        return True
    return False
