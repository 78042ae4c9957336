"""Names for the pieces a user chooses: losses, penalties, reducers, x-solvers, models, optimizers, ...

Each piece registers itself in its own module, under a kind and a name::

    @register("penalty", "l1")
    class L1(Penalty): ...

and everything that lists or chooses pieces reads the registry: the solver's
validation, the command line's choices, the estimators and the docs.  A user
adds a piece the same way from their own code and then uses it by name.
Registration happens when the piece's module is imported: a kind of mpiopt's
own (``BUILTIN_KINDS``) is owned by one package, which every look-up (``names``,
``lookup``, ``unknown``) imports first, so the built-ins are there whatever
the caller imported before.  That import is by name and lazy, so the core
still imports nothing above it.

Each piece also declares the options it takes (:mod:`.options`): a class as
its ``options`` attribute, a factory function through ``register(...,
options=Options(...))``.  ``options(kind, name)`` returns the declaration (a user's older ``options =
("lam", ...)`` tuple of names read through the kind's other declarations) and
``options_problem(kind, name, values)`` checks values against it; the front
ends, the command line and the docs read the same declaration.
``piece_problem(kind, name, values)`` and ``build(kind, name, values)`` are
the front ends' side for a piece built from its options (``get_compressor``,
``get_model``, ``get_optimizer``): the same checks as the piece's constructor
(:class:`~.options.Declared`), before anything is built.
"""
import importlib
from collections.abc import Mapping

from .options import NO_OPTIONS, Declared, Option, Options

_REGISTRY = {}
_DECLARED = {}  # (kind, name) -> Options given to register() for an item without an options attribute

# kind -> the package whose import registers mpiopt's own pieces of that kind
BUILTIN_KINDS = {
    "loss": "mpiopt.admm", "penalty": "mpiopt.admm", "x_solver": "mpiopt.admm",
    "reducer": "mpiopt.collectives", "compressor": "mpiopt.compression",
    "model": "mpiopt.models", "optimizer": "mpiopt.optim", "dataset": "mpiopt.data",
    "strategy": "mpiopt.federated", "partition": "mpiopt.federated", "hook": "mpiopt.federated",
    "attack": "mpiopt.federated",
    "asyncsgd-method": "mpiopt.asyncsgd", "asyncsgd-problem": "mpiopt.asyncsgd", "tau-model": "mpiopt.asyncsgd",
    "power-model": "mpiopt.asyncsgd", "asyncsgd-graph": "mpiopt.asyncsgd",
    "workload": "mpiopt.slurm",
}
_loaded = set()  # the kinds whose package has been imported (or is being imported)


def _load_builtins(kind):
    """Import the package that registers ``kind``'s built-in pieces, once."""
    if kind in BUILTIN_KINDS and kind not in _loaded:
        _loaded.add(kind)  # first: the package's own import may look the kind up
        try:
            importlib.import_module(BUILTIN_KINDS[kind])
        except BaseException:
            _loaded.discard(kind)
            raise


class RegistryError(ValueError):
    """An unknown name; the message lists the valid ones."""


def register(kind, name, item=None, *, replace=False, options=None):
    """Register ``item`` as ``kind``/``name``; without ``item``, a decorator.

    A name is registered once per kind unless ``replace`` is true (so that two
    pieces cannot silently shadow each other).  ``options`` declares the
    options of an item that has no ``options`` attribute of its own (a factory
    function); a class declares them as its attribute.
    """
    if options is not None and not isinstance(options, Options):
        raise RegistryError(f"the options of {kind} {name!r} must be declared as Options(...), got {options!r}")

    def add(item):
        entries = _REGISTRY.setdefault(kind, {})
        if name in entries and entries[name] is not item and not replace:
            raise RegistryError(f"{kind} {name!r} is already registered ({entries[name]!r}); "
                                "pass replace=True to replace it")
        entries[name] = item
        if options is not None:
            _DECLARED[kind, name] = options
        else:
            _DECLARED.pop((kind, name), None)
        return item
    if not isinstance(name, str) or not name:
        raise RegistryError(f"a {kind} name must be a non-empty string, got {name!r}")
    return add if item is None else add(item)


def names(kind):
    """The registered names of ``kind``, in registration order (the built-ins first)."""
    _load_builtins(kind)
    return list(_REGISTRY.get(kind, {}))


def unknown(kind, name):
    """The message for a name that is not registered, or None when it is."""
    valid = names(kind)
    if isinstance(name, str) and name in valid:
        return None
    if not valid:
        kinds = sorted(set(BUILTIN_KINDS) | {key for key, entries in _REGISTRY.items() if entries})
        return f"no {kind} is registered (got {name!r}); the kinds are {', '.join(kinds)}"
    return f"{kind} must be one of {', '.join(valid)}, got {name!r}"


def lookup(kind, name):
    """The item registered as ``kind``/``name``; RegistryError naming the valid names otherwise."""
    message = unknown(kind, name)
    if message:
        raise RegistryError(message)
    return _REGISTRY[kind][name]


def options(kind, name):
    """The declared options of ``kind``/``name`` (:class:`~mpiopt.core.options.Options`; empty when it takes
    none); RegistryError for an unknown name."""
    item = lookup(kind, name)
    if (kind, name) in _DECLARED:
        return _DECLARED[kind, name]
    declared = getattr(item, "options", None)
    if isinstance(declared, Options):
        return declared
    if isinstance(declared, (tuple, list)) and all(isinstance(option, str) for option in declared):
        return _older_declaration(kind, declared)
    return NO_OPTIONS


def _older_declaration(kind, option_names):
    """A user's older ``options = ("lam", ...)`` tuple of names as a declaration: each name as the first
    registered piece of ``kind`` declares it (``lam`` as the penalties' weight), or as an option taking any
    value, None by default."""
    known = {}
    for other in reversed(names(kind)):
        declared = _DECLARED.get((kind, other), getattr(_REGISTRY[kind][other], "options", None))
        if isinstance(declared, Options):
            known.update(declared)
    return Options(*(known.get(option) or Option(option, object, None) for option in option_names))


def options_problem(kind, name, values, *, complete=False):
    """The one-line problem of ``values`` for ``kind``/``name`` (an unknown name, an undeclared option, a value
    outside its declaration), or None.  Collective use: pass the message to ``check_collectively``."""
    message = unknown(kind, name)
    if message:
        return message
    return options(kind, name).problem(values, f"{kind} {name!r}", complete=complete)


def _signature_problem(kind, name, values, complete):
    """The message for an undeclared option or (with ``complete``) a required one left out, or None."""
    declared, owner = options(kind, name), f"{kind} {name!r}"
    message = declared.unknown(values, owner)
    missing = [key for key, option in declared.items() if complete and option.required and key not in values]
    return message or (f"{owner} needs {', '.join(missing)}" if missing else None)


def piece_problem(kind, name, values, *, complete=False):
    """The one-line problem of building ``kind``/``name`` with ``values`` (options by name), or None: an
    unknown name, an undeclared option, with ``complete`` a required one left out, a value outside its
    declaration (the piece's wording, see :class:`~.options.Declared`), then the piece's own relations."""
    return unknown(kind, name) or _signature_problem(kind, name, values, complete) or \
        _value_problem(kind, name, values)


def _value_problem(kind, name, values):
    """The problem of the declared options' ``values`` (known names), in the piece's wording, or None."""
    piece = lookup(kind, name)
    if isinstance(piece, type) and issubclass(piece, Declared):
        return piece.options_problem(dict(values))
    return options(kind, name).problem(values, name)


def build(kind, name, values):
    """``kind``/``name`` built with ``values`` (options by name) once they pass :func:`piece_problem`:
    RegistryError for an unknown name, TypeError for an undeclared or missing option, ValueError for a bad
    value."""
    piece = lookup(kind, name)
    message = _signature_problem(kind, name, values, True)
    if message:
        raise TypeError(message)
    message = _value_problem(kind, name, values)
    if message:
        raise ValueError(message)
    return piece(**values)


def unregister(kind, name):
    """Remove a registration (tests, and users replacing a piece)."""
    _REGISTRY.get(kind, {}).pop(name, None)
    _DECLARED.pop((kind, name), None)


class RegistryView(Mapping):
    """The registered pieces of one kind, name -> item, in registration order: a live, read-only view,
    so a piece registered later (a user's own) is in it too."""

    def __init__(self, kind, label):
        self.kind, self.label = kind, label

    def __getitem__(self, name):
        if unknown(self.kind, name):
            raise KeyError(name)
        return lookup(self.kind, name)

    def __contains__(self, name):
        return unknown(self.kind, name) is None

    def __iter__(self):
        return iter(names(self.kind))

    def __len__(self):
        return len(names(self.kind))

    def __repr__(self):
        return f"{self.label}({', '.join(self)})"
