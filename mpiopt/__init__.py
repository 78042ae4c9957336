"""mpiopt: distributed optimization on MPI ranks.

Subpackages are imported on first use (``mpiopt.admm``, ``mpiopt.data``, ...),
so ``import mpiopt`` is cheap and does not import numpy before the command line
has set the BLAS thread count for each rank.
"""
import importlib

__version__ = "0.1.0"

_SUBPACKAGES = ("admm", "cli", "collectives", "core", "data", "estimators", "models", "optim", "slurm")


def __getattr__(name):
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'mpiopt' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBPACKAGES))
