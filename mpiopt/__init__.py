"""mpiopt: distributed optimization on MPI ranks.

Subpackages are imported on first use (``mpiopt.admm``, ``mpiopt.data``, ...),
so ``import mpiopt`` does not import numpy.  Under an MPI launcher that puts
several ranks on this node (or with ``SLURM_CPUS_PER_TASK``), and unless a
thread variable such as ``OMP_NUM_THREADS`` is set, it gives this rank its
share of the node's cores for BLAS and OpenMP, for the whole process: the
thread variables for the libraries loaded later, threadpoolctl for those
already loaded (``mpiopt.core.threads``).
"""
import importlib

__version__ = "0.1.0"

from .core.threads import limit_at_import  # noqa: E402

_SUBPACKAGES = (
    "admm", "asyncsgd", "cli", "collectives", "compression", "core", "data", "estimators", "federated",
    "kernels", "models", "optim", "slurm", "train",
)

limit_at_import()


def __getattr__(name):
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'mpiopt' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBPACKAGES))
