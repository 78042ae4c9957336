"""Named pieces that check their options through their declaration, in their own words.

:class:`~mpiopt.core.options.Option` decides whether a value is good and words
the problem from its constraint (``rank must be an int >= 1, got 0``).  The
compressors, the models and the optimizers had their own one-line messages
before they declared their options (``rank must be an integer >= 1, got 0``,
``bits must be 8 or 4, got 3``), which users, tests and scripts read:
:class:`Worded` keeps such a message while the declaration still decides.

:class:`Declared` is the base of such a piece: its constructor checks its
values with ``check_options`` (the declaration, then the piece's own relations
between options, ``options_problem``), worded ``{name}: ...``.
:func:`piece_problem` and :func:`build` are the front ends' side, by kind and
registered name (``get_compressor``, ``get_model``, ``get_optimizer``): the
same checks before anything is built, and an undeclared or missing option is a
TypeError, as a constructor's would be.
"""
from dataclasses import dataclass

from ..core import registry
from ..core.options import NO_OPTIONS, Option


@dataclass(frozen=True)
class Worded(Option):
    """An :class:`Option` whose problem reads ``message.format(value=value)`` when the declaration refuses it."""

    message: str = None

    def problem(self, value):
        found = super().problem(value)
        return found if found is None or self.message is None else self.message.format(value=value)


def seed_option(help_text):
    """The ``seed`` option of a piece that draws random numbers: an integer >= 0, default 0, worded as
    :func:`mpiopt.core.random.seed_problem` words it."""
    return Worded("seed", int, 0, help_text, low=0, message="seed must be an integer >= 0, got {value!r}")


class Declared:
    """A piece whose ``options`` declaration checks its constructor's values."""

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


def _signature_problem(kind, name, options, complete):
    """The message for an undeclared option or (with ``complete``) a required one left out, or None."""
    declared, owner = registry.options(kind, name), f"{kind} {name!r}"
    message = declared.unknown(options, owner)
    missing = [key for key, option in declared.items() if complete and option.required and key not in options]
    return message or (f"{owner} needs {', '.join(missing)}" if missing else None)


def piece_problem(kind, name, options, *, complete=False):
    """The one-line problem of building ``kind``/``name`` with ``options`` (a dict), or None: an unknown name,
    an undeclared option, with ``complete`` a required one left out, a value outside its declaration (the
    piece's wording, see :class:`Declared`), then the piece's own relations."""
    message = registry.unknown(kind, name) or _signature_problem(kind, name, options, complete)
    if message:
        return message
    piece = registry.lookup(kind, name)
    if isinstance(piece, type) and issubclass(piece, Declared):
        return piece.options_problem(dict(options))
    return registry.options(kind, name).problem(options, name)


def build(kind, name, options):
    """``kind``/``name`` built with ``options`` once they pass :func:`piece_problem`: RegistryError for an unknown
    name, TypeError for an undeclared or missing option, ValueError for a bad value."""
    piece = registry.lookup(kind, name)
    message = _signature_problem(kind, name, options, True)
    if message:
        raise TypeError(message)
    message = piece_problem(kind, name, options)
    if message:
        raise ValueError(message)
    return piece(**options)
