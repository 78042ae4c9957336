"""Gradient compressors and error feedback; arrays in, payload arrays out, no MPI inside.

``get_compressor(name, **options)`` returns a registered compressor (kind
``"compressor"`` in :mod:`mpiopt.core.registry`); see :mod:`.base` for the
interface and docs/compression.md for the formulas and costs:

============  =========================================  =================  ======  ========
name          what travels                               bytes (n float32)  linear  unbiased
============  =========================================  =================  ======  ========
``none``      the values                                 4 n                yes     yes
``fp16``      IEEE half                                  2 n                yes     no (rounding)
``bf16``      bfloat16 as uint16                         2 n                no      no (rounding)
``qsgd``      per-bucket norms + 8- or 4-bit levels      n or n/2, + 4/bucket  no   yes
``qsgd8``     ``qsgd`` with bits=8                       n + 4 n/bucket     no      yes
``qsgd4``     ``qsgd`` with bits=4                       n/2 + 4 n/bucket   no      yes
``sign``      packed signs + one scale                   n/8 + 4            no      no
``topk``      k values + k int32 indices                 8 k                no      no
``randomk``   k values at shared indices                 4 k                yes     yes (scaled)
``powersgd``  P (rows x r) then Q (cols x r)             4 (rows+cols) r    yes     no
============  =========================================  =================  ======  ========

``ErrorFeedback(compressor)`` wraps any of them.  ``COMPRESSORS`` maps the
registered names to their classes, read from the registry at each use.  Each
compressor declares its options (``registry.options("compressor", name)``;
the table in docs/compression.md is generated from them), and
``compressor_problem(name, options)`` checks options against the declaration
without building anything.
"""
from ..core.registry import RegistryError, RegistryView, build, lookup, piece_problem
# Imported in this order, the compressors register their names in this order.
from .none import NoCompression
from .fp16 import FP16
from .bf16 import BF16
from .qsgd import QSGD, QSGD4, QSGD8
from .sign import Sign
from .topk import TopK
from .randomk import RandomK
from .powersgd import PowerSGD, PowerSGDRound
from .error_feedback import EF21, ErrorFeedback
from .base import Compressor, Context, bucket_payload_bytes, pack, tensor_matrix_shape, unpack


COMPRESSORS = RegistryView("compressor", "COMPRESSORS")  # name -> class, a live view of the registry


def compressor_problem(name, options):
    """The one-line problem of ``options`` (a dict) for the compressor ``name``, or None: an unknown name, an
    undeclared option, a value outside its declaration, then the compressor's own relations between them."""
    return piece_problem("compressor", name, options)


def get_compressor(name, **options):
    """A compressor by registered name; ``options`` go to its constructor, checked against its declaration
    first: RegistryError for an unknown name, TypeError for an undeclared option, ValueError for a bad value."""
    try:
        piece = lookup("compressor", name)
    except RegistryError as error:
        raise RegistryError(f"unknown compressor {name!r}; {error}") from None
    if piece is not NoCompression:  # numba's import, before a run's clock starts; the identity compiles nothing
        from ..kernels import compress_fast, qsgd_fast  # noqa: F401
    return build("compressor", name, options)


__all__ = ["BF16", "COMPRESSORS", "Compressor", "Context", "EF21", "ErrorFeedback", "FP16", "NoCompression", "PowerSGD",
           "PowerSGDRound", "QSGD", "QSGD4", "QSGD8", "RandomK", "Sign", "TopK", "bucket_payload_bytes",
           "compressor_problem", "get_compressor", "pack", "tensor_matrix_shape", "unpack"]
