"""What the subcommands share: the rank-0 parser, argument types, the checkpoint flags, building a
registered piece, the plot check and the exit codes.
"""
import argparse
import dataclasses
import math
import re
import sys

EXIT_DONE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 2, 3
EXIT_STATUS = ("exit status: 0 done; 2 a usage or input error (the same one-line message on every rank); 3 "
               "interrupted by a signal after writing its checkpoint (run the same command again to resume)")


def exit_status(result):
    """The exit status of a finished run: 3 when a signal interrupted it (its checkpoint written), else 0."""
    return EXIT_INTERRUPTED if result.status == "interrupted" else EXIT_DONE


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that a text of several lines (the epilog listing the registered pieces and
    their options) keeps its lines and their indents, each line wrapped on its own."""

    def _fill_text(self, text, width, indent):
        if "\n" not in text:
            return super()._fill_text(text, width, indent)
        import textwrap
        lines = []
        for line in text.splitlines():
            lead = indent + line[:len(line) - len(line.lstrip())]
            lines.append(textwrap.fill(line.strip(), width, initial_indent=lead, subsequent_indent=lead + "    ")
                         if line.strip() else "")
        return "\n".join(lines)


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


def add_checkpoint_options(group, state, unit):
    """--checkpoint and --checkpoint-every, the same for every command that resumes from its checkpoint."""
    group.add_argument("--checkpoint", metavar="FILE.npz",
                       help=f"write the {state} here (on SIGUSR1, SIGTERM and every --checkpoint-every {unit}) "
                            "and resume from it when it exists")
    group.add_argument("--checkpoint-every", type=int, default=0,
                       help=f"{unit} between checkpoints (0: only on signals and at the end)")


def built(kind, name, given, always, args=None):
    """(the registered ``kind`` ``name`` built from its options, a problem or None), read by its declaration.

    Built by ``registry.build`` (the declaration's checks, then the constructor).  ``given`` holds options the
    user set (None: not set): one the piece does not declare is a problem, in the words the command line has
    long used (``optimizer adam takes no momentum``: a flag of the command, not a keyword).
    ``always`` holds values the command line always has (the data's shape, a flag's default): passed when the
    piece declares them.  With ``args``, the ``--KIND-opt`` values come last.  The constructor's own error
    (a bad value) is a problem too."""
    from ..core.registry import build, options
    chosen, problem = chosen_options(args, kind, name) if args is not None else ({}, None)
    if problem:
        return None, problem
    declared = options(kind, name)
    refused = [option for option, value in given.items() if value is not None and option not in declared]
    if refused:
        return None, f"{kind} {name} takes no {', '.join(refused)}"
    values = {key: value for key, value in {**always, **given}.items() if value is not None and key in declared}
    try:
        return build(kind, name, {**values, **chosen}), None
    except (TypeError, ValueError) as error:
        return None, str(error)


def plot_problem(path, comm):
    """Why a plot to ``path`` (None: no plot) cannot be drawn, on rank 0 (which draws it), or None: checked with
    the other options, before any work, so that a missing matplotlib does not fail the run at its end."""
    from ..core.result import require_plotting
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
        from ..core.comm import mpi_vendor
        from ..slurm.plugin import srun_commands
        print(f"mpiopt: error: Slurm started {tasks} tasks but MPI sees 1 rank: srun was run without a PMI "
              f"plugin; launch with {srun_commands()} (this Python's MPI is {mpi_vendor()}), or with mpiexec",
              file=sys.stderr, flush=True)
        return True
    return False


def add_options_flag(parser, kind, what=None):
    """``--KIND-opt NAME=VALUE`` (repeatable, or comma-separated): an option of the chosen piece of ``kind``, read
    and typed through its declaration (``registry.options``); the pieces and their options are listed in the
    subcommand's ``--help``."""
    flag = what or kind.replace("_", "-").replace("asyncsgd-", "")
    action = parser.add_argument(f"--{flag}-opt", action="append", default=[], metavar="NAME=VALUE",
                                 dest=f"{flag.replace('-', '_')}_opt",
                                 help=f"an option of the chosen {flag}, as declared by it (repeatable; "
                                      f"NAME=VALUE,NAME=VALUE also works); every {flag}'s options are listed below")
    action.listed_kind = (kind, flag)


def chosen_options(args, kind, name, what=None):
    """(the ``--KIND-opt`` values for ``kind`` ``name``, typed by its declaration, a one-line problem or None)."""
    from ..core.registry import options, unknown
    flag = what or kind.replace("_", "-").replace("asyncsgd-", "")
    pairs = getattr(args, f"{flag.replace('-', '_')}_opt", [])
    if not pairs:
        return {}, None
    problem = unknown(kind, name)
    if problem:
        return {}, problem
    try:
        return options(kind, name).parse([part for pair in pairs for part in pair.split(",") if part],
                                         f"{flag} {name!r}"), None
    except ValueError as error:
        return {}, f"--{flag}-opt: {error}"


def registry_listing(parser):
    """The epilog lines listing, for each kind the subcommand chooses from, every registered piece (a plugin's
    too) and its declared options."""
    from ..core.registry import names, options
    lines = []
    for kind, flag in [action.listed_kind for action in parser._actions if hasattr(action, "listed_kind")]:
        lines.append(f"{flag}s and their options (--{flag}-opt NAME=VALUE):")
        for name in names(kind):
            declared = options(kind, name)
            lines.append(f"  {name}" + ("" if declared else ": no options"))
            lines.extend(f"      {line}" for line in declared.help_lines())
    return lines


def routed(kind, name, values, flags=None):
    """(the ``values`` given, option -> value, None for not given, that ``kind`` ``name`` declares; a problem or
    None): a value given for an option the piece does not declare is ``<kind> <name> takes no <flag>``."""
    from ..core.registry import options
    declared = options(kind, name)
    refused = [(flags or {}).get(option, option) for option, value in values.items()
               if value is not None and option not in declared]
    if refused:
        return {}, f"{kind} {name} takes no {', '.join(refused)}"
    return {option: value for option, value in values.items() if value is not None}, None


def declared_only(kind, name, values):
    """The ``values`` (option -> value) that ``kind`` ``name`` declares: settings the command line always has
    (a default of its own) and passes to whichever piece takes them."""
    from ..core.registry import options
    declared = options(kind, name)
    return {option: value for option, value in values.items() if option in declared}


# the settings every command line spells its own way: the checkpoint's (add_checkpoint_options, the same flags
# for every subcommand that resumes) and the log's (--quiet: the log is on by default on the command line)
CHECKPOINT_FIELDS = ("checkpoint", "checkpoint_every")


def add_settings_flags(parser, settings_class, skip=CHECKPOINT_FIELDS, shown=None, log="iteration"):
    """A flag for every field of the settings dataclass ``settings_class`` but ``skip``; returns their names.

    Each flag is generated from its field: ``--field-name`` (dest the field), typed by the annotation (int,
    float, str), its choices from ``settings_class.choices``, its help the field's comment
    (:func:`mpiopt.core.settings.field_docs`) and its default the field's; a bool is a switch (``--name``
    when it defaults to False, ``--no-name`` when True, both when None).  A field typed otherwise (a dict, a
    tuple, an object) has no flag.  ``verbose`` is ``--quiet`` ("no ``log`` log"): the command line logs
    unless told not to.  ``shown`` maps a field to the argparse keywords that replace the generated ones, with
    ``flags`` for its option strings, where the command line has long spelled it otherwise."""
    from ..core.settings import field_docs
    docs, shown = field_docs(settings_class), {"verbose": {"flags": ["--quiet"], "action": "store_false",
                                                           "default": True, "help": f"no {log} log"},
                                               **(shown or {})}
    names = []
    for field in dataclasses.fields(settings_class):
        if field.name in skip:
            continue
        doc = docs.get(field.name, "").replace("%", "%%")  # argparse formats the help with %
        spec = _settings_flag(field, field.default, doc, settings_class.choices.get(field.name))
        if spec is None and field.name not in shown:
            continue
        if field.name in shown:  # its own keywords; the generated flag and help unless it gives them
            spec = dict({"flags": (spec or {}).get("flags", ["--" + field.name.replace("_", "-")]),
                         "help": (spec or {}).get("help", doc)}, **shown[field.name])
        parser.add_argument(*spec.pop("flags"), dest=field.name, **spec)
        names.append(field.name)
    return names


def _settings_flag(field, default, doc, choices):
    """The generated flag of one settings field: {"flags": [...], argparse keywords}, or None (no flag)."""
    flag = "--" + field.name.replace("_", "-")
    kind = field.type if isinstance(field.type, type) else {"int": int, "float": float, "str": str,
                                                            "bool": bool}.get(field.type)
    if kind is bool:
        if default is None:
            return {"flags": [flag], "action": argparse.BooleanOptionalAction, "default": None, "help": doc}
        if default:
            return {"flags": ["--no-" + flag[2:]], "action": "store_false", "default": True,
                    "help": doc + " (on by default; this flag turns it off)"}
        return {"flags": [flag], "action": "store_true", "default": False, "help": doc}
    if kind not in (int, float, str):
        return None
    choices = choices() if callable(choices) else choices
    shown = "" if default is None else f" (default {default})"
    return {"flags": [flag], "type": kind, "default": default, "help": doc + shown,
            **({"choices": list(choices)} if choices is not None else {"metavar": field.name.upper()})}


def settings_from(args, names, settings_class):
    """The settings the flags of :func:`add_settings_flags` (``names``) set, by field: those that differ from
    ``settings_class``'s defaults (the API then routes just what was set, as when a user calls it)."""
    defaults = {field.name: field.default for field in dataclasses.fields(settings_class)}
    return {name: getattr(args, name) for name in names
            if not (getattr(args, name) is defaults[name] or _equal(getattr(args, name), defaults[name]))}


def _equal(a, b):
    return type(a) is type(b) and a == b


TORCH_MODEL = "torch:"


def model_name(value):
    """``--model``: a registered model, or ``torch:package.module:factory`` (a user's torch model, built by
    :func:`mpiopt.torch.model.load_factory`)."""
    from ..core.registry import names
    if value.startswith(TORCH_MODEL) or value in names("model"):
        return value
    raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {', '.join(names('model'))}, or "
                                     f"{TORCH_MODEL}package.module:factory)")


def built_model(name, given, always, args=None):
    """(the model ``--model`` names, a problem or None): a registered one as :func:`built` builds it, or a
    torch model from its factory (its n_features must be the data's)."""
    if not name.startswith(TORCH_MODEL):
        return built("model", name, given, always, args)
    try:
        from ..torch.model import load_factory
        model = load_factory(name)
    except (ImportError, AttributeError, TypeError, ValueError) as error:
        return None, f"--model {name}: {error}"
    if model.n_features != always.get("n_features", model.n_features):
        return None, f"--model {name}: the model takes {model.n_features} features, the data have {always['n_features']}"
    return model, None
