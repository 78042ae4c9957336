"""Settings of a method: a frozen dataclass with its defaults, validated once (the OSQP/SCS pattern).

A method's settings subclass :class:`Settings`, give each field a default and a
comment, and list their checks in ``checks()``.  ``from_kwargs`` refuses
unknown names, naming the valid ones; :meth:`Settings.collective` builds and
validates the settings on every rank and raises the same CollectiveError
everywhere when any rank's are invalid or the ranks disagree.
"""
import dataclasses
import functools
import inspect
import io
import math
import re
import textwrap
import tokenize

from .comm import check_collectively, first_problem


def is_number(value):
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def checkpoint_and_log_checks(settings):
    """The (ok, message) checks every long run's settings share, in this order: ``checkpoint`` (a path or
    None), ``checkpoint_every`` (an integer >= 0), ``verbose`` (a bool), ``log_every`` (an integer >= 1)."""
    return [
        (settings.checkpoint is None or isinstance(settings.checkpoint, str),
         f"checkpoint must be a path or None, got {settings.checkpoint!r}"),
        (is_integer(settings.checkpoint_every) and settings.checkpoint_every >= 0,
         f"checkpoint_every must be an integer >= 0, got {settings.checkpoint_every!r}"),
        (isinstance(settings.verbose, bool), f"verbose must be True or False, got {settings.verbose!r}"),
        (is_integer(settings.log_every) and settings.log_every >= 1,
         f"log_every must be an integer >= 1, got {settings.log_every!r}"),
    ]


@functools.lru_cache(maxsize=None)
def field_docs(cls):
    """{field: its help}: the comment beside each field of the settings dataclass ``cls`` joined with the
    comment lines under it, base classes first (comments as the fields' docs, the way simple-parsing and
    Sphinx's ``#:`` read them).  A class whose source cannot be read has no docs (empty)."""
    docs = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or "__dataclass_fields__" not in vars(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        docs.update(_comments_of_fields(source, {field.name for field in dataclasses.fields(klass)}))
    return docs


def _comments_of_fields(source, fields):
    """{field: the comment on its line and the comment-only lines that follow it} in a class's ``source``."""
    docs, current, last_row = {}, None, None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind, text, (row, column), _, line = token
        stripped = line.strip()
        if kind == tokenize.NAME and stripped.startswith(text) and re.match(rf"{text}\s*:", stripped) \
                and text in fields and row != last_row:
            current, last_row = text, row
            docs.setdefault(text, "")
        elif kind == tokenize.COMMENT and current is not None:
            alone = stripped.startswith("#")
            if row == last_row or (alone and docs[current]):
                docs[current] = f"{docs[current]} {text.lstrip('#').strip()}".strip()
            else:
                current = None
        elif kind not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT) \
                and row != last_row:
            current = None
    return {name: doc for name, doc in docs.items() if doc}


def _plain(value):
    if isinstance(value, (str, int, float, bool, type(None), dict, list, tuple)) or not hasattr(value, "name"):
        return value
    return value.name


@dataclasses.dataclass(frozen=True)
class Settings:
    """Base of every method's settings; subclasses are frozen dataclasses."""

    label = "method"  # in "unknown <label> setting(s)"
    choices = {}  # field -> its allowed values (or a function returning them, for registry names): the command
                  # line's choices for the field's flag; the checks stay in checks()

    @classmethod
    def from_kwargs(cls, **settings):
        """Build settings from keyword arguments, naming any unknown one (TypeError)."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise TypeError(f"unknown {cls.label} setting(s) {', '.join(map(repr, unknown))}; "
                            f"valid settings are {', '.join(sorted(known))}")
        return cls(**settings)

    def checks(self):
        """(ok, message) pairs, in order; the first failing one is reported."""
        return []

    def problem(self):
        """A message describing the first invalid value, or None."""
        return first_problem(self.checks())

    def as_dict(self):
        """Field names to plain values; an object given as a setting (a Reducer, say) appears by its name."""
        return {field.name: _plain(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def collective(cls, comm, extra_problem=None, agree=None, **settings):
        """Settings from ``settings``, validated on every rank of ``comm`` (collective).

        ``extra_problem`` is a message from checks of the caller's own (or
        None); ``agree`` adds values that must be equal on every rank.  Raises
        the same CollectiveError on every rank when any rank has a problem or
        the settings differ between ranks.
        """
        try:
            options = cls.from_kwargs(**settings)
            problem = options.problem()
        except TypeError as error:
            options, problem = None, str(error)
        check_collectively(comm, problem or extra_problem,
                           dict(agree or {}, settings=options.as_dict() if options else None))
        return options
