"""Shared plumbing: communicators, collective validation, array backends, I/O.

The package imports its modules on first use, so that ``import mpiopt.core.signals``
(the command line's first step, :mod:`mpiopt.__main__`) does not start MPI.
"""
import importlib

__all__ = ["CollectiveError", "check_collectively", "first_problem", "resolve_comm"]


def __getattr__(name):
    if name in __all__:
        return getattr(importlib.import_module(".comm", __name__), name)
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
