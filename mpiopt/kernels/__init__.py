"""GPU kernels through CuPy, each with a numpy twin of the same semantics.

The CUDA sources live in the repository's ``kernels/`` folder and are
installed as ``mpiopt.kernels.cuda`` (setup.py maps the folder), so a
non-editable install finds them too.  Every kernel function here takes arrays
and dispatches on their module (:func:`mpiopt.core.backend.get_array_module`):
numpy arrays run the numpy twin, CuPy arrays the CUDA kernel compiled on first
use (:func:`.loader.raw_module`).  Nothing above this package calls CuPy
kernels directly.
"""
import importlib

from .admm import relax, soft_threshold, z_u_update
from .loader import cuda_source, cuda_sources, nvcc_ptx, raw_module

# imported on first use: .compress imports the compiled CPU kernels and with them numba (a quarter of a second),
# which a process that never compresses (the solvers) should not pay for
_COMPRESS = ("from_bf16", "from_fp16", "qsgd_dequantize", "qsgd_norms", "qsgd_quantize", "scatter_add", "sign_pack",
             "sign_unpack", "to_bf16", "to_fp16", "topk_select")
_SUBMODULES = ("admm", "cd", "compiled", "compress", "compress_fast", "halves", "loader", "philox", "qsgd_fast")

__all__ = ["cuda_source", "cuda_sources", "nvcc_ptx", "raw_module", "relax", "soft_threshold", "z_u_update",
           *_COMPRESS]


def __getattr__(name):
    if name in _COMPRESS:
        value = getattr(importlib.import_module(".compress", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
