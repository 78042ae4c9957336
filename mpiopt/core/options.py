"""The options a named piece takes, declared once: name, type, default, constraint, help.

Every kind of piece (penalty, loss, x-solver, reducer, compressor, model,
optimizer, data set, partition, strategy, hook, asynchronous method,
compute-time model, Slurm workload) declares the keyword options it takes in
one form, the way skglm's penalties own their parameters and Flower's
strategies their configuration::

    class MCP(Penalty):
        options = Options(
            Option("lam", float, help="weight lambda", low=0),
            Option("gamma", float, 3.0, "concavity; the penalty is L1 near 0 and flat beyond gamma lambda",
                   low=1, low_open=True))

Everything else reads the declaration instead of knowing it: validation
(``Options.problem``: one line naming the piece, the option, the constraint
and the value), the front ends' ``*_options`` (``Options.resolve`` fills the
defaults), the command line (``Option.parse`` turns ``gamma=3`` into a float,
``Options.help_lines`` lists them in ``--help``), the docs' tables and a user's
plugin, whose pieces declare theirs the same way.  ``Options`` is a read-only
mapping from option name to :class:`Option`, in declaration order: iterating
it gives the names, ``"lam" in options`` asks for one.

A piece that is a class declares ``options`` as a class attribute (a subclass
extends its base's with ``Base.options + Options(...)``); a factory function
passes ``options=`` to :func:`mpiopt.core.registry.register`.  Either way
``registry.options(kind, name)`` returns the declaration.  A piece built
from its options (a compressor, a model, an optimizer) derives from
:class:`Declared`, whose constructor checks them; ``registry.piece_problem``
and ``registry.build`` make the same checks by kind and name.  An option may
keep a piece's older message word for word (``Option(..., message=...)``).
"""
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()  # the default of an option that must be given

TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "str", object: "value"}


@dataclass(frozen=True)
class Option:
    """One keyword option of a named piece.

    ``type`` is bool, int, float, str, or object (anything: arrays, callables,
    sequences; the piece checks those itself).  An int is accepted where a
    float is declared.  ``low``/``high`` bound a number (``low_open``/
    ``high_open``: strictly), ``choices`` lists the allowed values,
    ``nullable`` also allows None (a default of None implies it).
    ``message``, when given, is what :meth:`problem` says when the declaration
    refuses a value, ``message.format(name=name, value=value)``: a piece's own
    wording that users, scripts and tests already read (``rank must be an
    integer >= 1, got {value!r}``), while the declaration still decides.
    """

    name: str
    type: type = float
    default: object = REQUIRED
    help: str = ""
    low: object = None
    high: object = None
    choices: tuple = None
    nullable: bool = False
    low_open: bool = False
    high_open: bool = False
    message: str = None

    @property
    def required(self):
        return self.default is REQUIRED

    @property
    def accepts_none(self):
        return self.nullable or self.default is None

    def constraint(self):
        """The constraint in words: ``float > 1``, ``int in [1, 64]``, ``one of mean, max``."""
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        words = TYPE_NAMES.get(self.type, getattr(self.type, "__name__", str(self.type)))
        if self.low is not None and self.high is not None:
            words += (f" in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                      f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            words += f" {'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            words += f" {'<' if self.high_open else '<='} {self.high:g}"
        return words + (" or None" if self.accepts_none and self.choices is None else "")

    def problem(self, value):
        """A message when ``value`` does not meet the declaration (``gamma must be a float > 1, got 0.5``), in
        ``message``'s words when it is given; None when it does."""
        found = self._refusal(value)
        if found is None or self.message is None:
            return found
        return self.message.format(name=self.name, value=value)

    def _refusal(self, value):
        """The declaration's own message for ``value``, or None."""
        if value is None:
            return None if self.accepts_none else f"{self.name} must be given ({_a(self.constraint())}), got None"
        if self.choices is not None:
            return None if _in(value, self.choices) else f"{self.name} must be {self.constraint()}, got {value!r}"
        if not _of_type(value, self.type):
            return f"{self.name} must be {_a(self.constraint())}, got {value!r}"
        if self.type in (int, float):
            if not math.isfinite(value):
                return f"{self.name} must be a finite {self.constraint()}, got {value!r}"
            below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
            above = self.high is not None and (value >= self.high if self.high_open else value > self.high)
            if below or above:
                return f"{self.name} must be {_a(self.constraint())}, got {value!r}"
        return None

    def parse(self, text):
        """The value of ``text`` as typed on a command line (``none`` for None; ``true``/``false`` for a bool)."""
        if not isinstance(text, str):
            return text
        if text.lower() in ("none", "null") and self.accepts_none:
            return None
        kind = self.type if self.choices is None else type(self.choices[0])
        try:
            if kind is bool:
                if text.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError(text)
                return text.lower() in ("true", "1", "yes", "on")
            if kind is int:
                return int(text)
            if kind is float:
                return float(text)
        except ValueError:
            raise ValueError(f"{self.name} must be {_a(self.constraint())}, got {text!r}") from None
        return text

    def typed(self, value):
        """``value`` (already accepted by :meth:`problem`) as the declared Python type: an int option's
        integer (numpy's too) as int, a float option's real number (an integer, a numpy float) as float, a
        bool option's as bool; None, a choice and any other type as given.  Pieces keep their options in
        this form, so that their arithmetic is Python's and their settings are JSON."""
        if value is None or self.choices is not None:
            return value
        if self.type is bool:
            return bool(value)
        if self.type is int:
            return int(value)
        if self.type is float:
            return float(value)
        return value

    def describe(self):
        """``gamma (float > 1, default 3): concavity`` for help texts and docs."""
        default = "required" if self.required else f"default {self.default!r}" if isinstance(
            self.default, str) else f"default {self.default}"
        return f"{self.name} ({self.constraint()}, {default})" + (f": {self.help}" if self.help else "")


def _a(words):
    """``words`` with its article: ``an int >= 1``, ``a float``, ``one of a, b``."""
    if words.startswith("one of"):
        return words
    return ("an " if words[0] in "aeiou" else "a ") + words


def _of_type(value, kind):
    if kind is object:
        return True
    if kind is bool:
        return isinstance(value, (bool, np.bool_))
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    return isinstance(value, kind)


def _in(value, choices):
    try:
        return value in choices
    except (TypeError, ValueError):  # an array compared with strings
        return False


class Options(Mapping):
    """The declared options of one piece: name -> :class:`Option`, in declaration order (read-only)."""

    def __init__(self, *options):
        self._options = {}
        for option in options:
            if not isinstance(option, Option):
                raise TypeError(f"Options takes Option declarations, got {option!r}")
            self._options[option.name] = option

    def __getitem__(self, name):
        return self._options[name]

    def __iter__(self):
        return iter(self._options)

    def __len__(self):
        return len(self._options)

    def __add__(self, other):
        """These options and ``other``'s (``other`` wins on a shared name, keeping this one's place)."""
        merged = dict(self._options)
        merged.update(other._options if isinstance(other, Options) else Options(*other)._options)
        return Options(*merged.values())

    def __eq__(self, other):
        if isinstance(other, Options):
            return list(self._options.values()) == list(other._options.values())
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"Options({', '.join(self._options)})"

    def without(self, *names):
        """These options less ``names``."""
        return Options(*(option for name, option in self._options.items() if name not in names))

    def defaults(self):
        """Name -> default of the options that have one."""
        return {name: option.default for name, option in self._options.items() if not option.required}

    def unknown(self, values, owner):
        """The message for names in ``values`` that are not declared (``owner takes a, b; got c``), or None."""
        extra = [name for name in values if name not in self._options]
        if not extra:
            return None
        takes = ", ".join(self._options) or "no options"
        return f"{owner} takes {takes}; got {', '.join(map(str, extra))}"

    def problem(self, values, owner, *, complete=False):
        """The first problem of ``values`` (a dict) against the declaration, or None.

        An undeclared name is a problem; so, with ``complete``, is a required
        option left out.  Each message names ``owner`` (``penalty 'mcp'``).
        """
        message = self.unknown(values, owner)
        if message:
            return message
        for name, option in self._options.items():
            if name in values:
                message = option.problem(values[name])
            elif complete and option.required:
                message = f"{name} must be given"
            if message:
                return f"{owner}: {message}"
        return None

    def resolve(self, values, owner):
        """``values`` checked and completed with the defaults; ValueError with the one-line problem."""
        message = self.problem(values, owner, complete=True)
        if message:
            raise ValueError(message)
        return {**self.defaults(), **values}

    def parse(self, pairs, owner):
        """``["rank=4", "warm_start=false"]`` (or ``"rank=4,warm_start=false"``) as typed values; ValueError
        naming the pair that does not parse or is not declared."""
        if isinstance(pairs, str):
            pairs = [part for part in pairs.split(",") if part]
        values = {}
        for pair in pairs:
            name, sep, text = pair.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or not name:
                raise ValueError(f"{owner}: an option is NAME=VALUE, got {pair!r}")
            if name not in self._options:
                raise ValueError(self.unknown({name: None}, owner))
            try:
                values[name] = self._options[name].parse(text.strip())
            except ValueError as error:
                raise ValueError(f"{owner}: {error}") from None
        return values

    def help_lines(self):
        """One line per option, for ``--help`` and the docs."""
        return [option.describe() for option in self._options.values()]


NO_OPTIONS = Options()


def seed_option(help_text):
    """The ``seed`` option of a piece that draws random numbers: an integer >= 0, default 0, worded as
    :func:`mpiopt.core.random.seed_problem` words it."""
    return Option("seed", int, 0, help_text, low=0, message="seed must be an integer >= 0, got {value!r}")


class Declared:
    """A piece whose ``options`` declaration checks its constructor's values (a compressor, a model, an
    optimizer, a federated strategy, hook or attack): its constructor calls :meth:`take_options` (or
    :meth:`check_options` for values it keeps itself), and :func:`mpiopt.core.registry.piece_problem` /
    :func:`~mpiopt.core.registry.build` run the same checks by kind and registered name before anything is
    built."""

    name = "piece"
    options = NO_OPTIONS

    @classmethod
    def options_problem(cls, values, options=None):
        """The one-line problem of ``values`` (options by name) against ``options`` (default: the class's
        declaration), worded ``{name}: ...``, or None.  A piece with relations between its options extends
        this with them, after the declared checks."""
        return (cls.options if options is None else options).problem(values, cls.name)

    def check_options(self, values, options=None):
        """Raise ValueError with :meth:`options_problem`'s message, if any (the constructors call it)."""
        problem = type(self).options_problem(values, options)
        if problem:
            raise ValueError(problem)

    def take_options(self, args=(), values=None, *, complete=False, keep=True):
        """The options of ``args`` (positional, in declaration order) and ``values`` (by name), checked against
        ``type(self).options`` by :meth:`options_problem`, completed with its defaults, each as its declared
        type (:meth:`Option.typed`) and, with ``keep``, set as an attribute of its name; the dict of them in
        declaration order.  TypeError for an undeclared option (and, with ``complete``, a required one left
        out), as for any constructor; ValueError for a value the declaration refuses."""
        declared, values = type(self).options, dict(values or {})
        if len(args) > len(declared):
            raise TypeError(f"{self.name} takes at most {len(declared)} options ({', '.join(declared)}), "
                            f"got {len(args)} positional values")
        for name, value in zip(declared, args):
            if name in values:
                raise TypeError(f"{self.name}: {name} given twice")
            values[name] = value
        message = declared.unknown(values, self.name)
        missing = [name for name, option in declared.items() if complete and option.required and name not in values]
        if message or missing:
            raise TypeError(message or f"{self.name} needs {', '.join(missing)}")
        values = {**declared.defaults(), **values}
        self.check_options(values)
        resolved = {name: declared[name].typed(values[name]) for name in declared if name in values}
        if keep:
            for name, value in resolved.items():
                setattr(self, name, value)
        return resolved
