"""Plugins: modules of a user's that register pieces of their own before mpiopt parses a command line.

A plugin is a module whose import registers pieces (``register("penalty",
"mcp")(MCP)``, a compressor, an asynchronous method, ...) with their declared
options; from then on they are used by name like mpiopt's own.  The command
line loads, on every rank and before it parses its arguments:

1. the entry points of the group ``mpiopt.plugins`` of every installed
   distribution, as pytest loads ``pytest11``::

       [project.entry-points."mpiopt.plugins"]
       mcp = "my_package.mcp"          # a module, or "my_package:register", a function called once

2. the modules named in the environment variable ``MPIOPT_PLUGINS``
   (separated by commas), which a Slurm job inherits;
3. the modules given with ``--plugin MODULE`` (repeatable).

A Python user imports their module, or calls ``load_plugins``.  A plugin
that fails to import (on any rank) is one CollectiveError on every rank,
naming the plugin and the error; no rank goes on to parse without it.
"""
import importlib
import os
from importlib import metadata

from .comm import check_collectively, resolve_comm

GROUP = "mpiopt.plugins"
ENVIRONMENT = "MPIOPT_PLUGINS"

_loaded = {}  # source (module name or "entry point NAME = VALUE") -> the loaded object


def plugin_modules(arguments=(), environment=None):
    """The modules to load besides the entry points: ``MPIOPT_PLUGINS``'s, then ``arguments``', in order."""
    text = os.environ.get(ENVIRONMENT, "") if environment is None else environment
    named = [name.strip() for name in text.split(",") if name.strip()]
    return list(dict.fromkeys(named + [name for name in arguments if name]))


def load_plugins(modules=(), comm=None, *, entry_points=True):
    """Import the plugins (module docstring) on every rank of ``comm``; returns what was loaded, in order.

    Collective: a plugin that fails on one rank raises the same CollectiveError on all of them.  Each plugin
    is loaded once per process.
    """
    comm = resolve_comm(comm)
    sources = [(f"entry point {point.name} = {point.value}", point) for point in _entry_points()] \
        if entry_points else []
    sources += [(name, name) for name in modules]
    problem = None
    for source, target in sources:
        if source in _loaded:
            continue
        try:
            _loaded[source] = _load(target)
        except BaseException as error:  # noqa: BLE001 (any failure of a user's import is reported)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            problem = f"plugin {source!r} failed to load: {type(error).__name__}: {error}".replace("\n", " ")
            break
    check_collectively(comm, problem)
    return [source for source, _ in sources]


def _entry_points():
    return sorted(metadata.entry_points(group=GROUP), key=lambda point: (point.name, point.value))


def _load(target):
    if isinstance(target, str):
        return importlib.import_module(target)
    loaded = target.load()
    if callable(loaded) and not isinstance(loaded, type):
        loaded()
    return loaded
