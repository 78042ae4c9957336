"""GPU kernels through CuPy, each with a numpy twin of the same semantics.

The CUDA sources live in the repository's ``kernels/`` folder and are
installed as ``mpiopt.kernels.cuda`` (setup.py maps the folder), so a
non-editable install finds them too.  Every kernel function here takes arrays
and dispatches on their module (:func:`mpiopt.core.backend.get_array_module`):
numpy arrays run the numpy twin, CuPy arrays the CUDA kernel compiled on first
use (:func:`.loader.raw_module`).  Nothing above this package calls CuPy
kernels directly.
"""
from .admm import relax, soft_threshold, z_u_update
from .compress import (from_bf16, from_fp16, qsgd_dequantize, qsgd_norms, qsgd_quantize, scatter_add, sign_pack,
                       sign_unpack, to_bf16, to_fp16, topk_select)
from .loader import cuda_source, cuda_sources, nvcc_ptx, raw_module

__all__ = ["cuda_source", "cuda_sources", "nvcc_ptx", "raw_module", "relax", "soft_threshold", "z_u_update",
           "from_bf16", "from_fp16", "qsgd_dequantize", "qsgd_norms", "qsgd_quantize", "scatter_add", "sign_pack",
           "sign_unpack", "to_bf16", "to_fp16", "topk_select"]
