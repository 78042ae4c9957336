"""float16 sums at memory speed: the ring's reduction of fp16 payloads, compiled, and its numpy twin.

numpy adds float16 arrays one element at a time in software (each half
widened to float32, added, rounded back), many times slower than a float32 add
of twice the bytes (docs/compression.md has the times).  The compressed reducer's
``allreduce`` path sums fp16 payloads exactly so (mpiopt.collectives.compressed),
so on the CPU that sum cost more than fp16 saved.  :func:`add` computes the same
thing, compiled (:mod:`.compiled`): for each element

    out = half(float32(a) + float32(b))

with float32(h) exact and half(f) numpy's
rounding of a float32 to the nearest half, ties to even: beyond 65520 +-inf,
below 2^-14 subnormal (f 2^24 rounded to an integer), NaN kept NaN.  These are
numpy's own operations (its half add is ``npy_float_to_half(npy_half_to_float(a)
+ npy_half_to_float(b))``), so the compiled sum equals ``np.add`` on float16 bit
for bit, NaN payloads aside (tests/test_kernels_halves.py).

Cost: one pass, reading 4 and writing 2 bytes per element; the widening and
the rounding are the fp16 compressor's own (:mod:`.compress_fast`: integer
arithmetic on the bits, with numpy's NaN rule), one implementation for both.
"""
import numpy as np

from . import compiled
from .compress_fast import _float32_bits_of_half, _half_from_float32_bits

CHUNK = 1 << 16  # elements summed into a buffer of their own, then copied, when out overlaps an input


def add(a, b, out):
    """``out = a + b`` for float16 arrays (contiguous, the same size; ``out`` may be ``a`` or ``b``), as
    ``np.add``; compiled when :func:`.compiled.enabled`.  Returns ``out``."""
    if compiled.enabled() and type(a) is type(b) is type(out) is np.ndarray \
            and a.dtype == b.dtype == out.dtype == np.float16 and a.size == b.size == out.size \
            and a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous:
        a, b, flat = (array.reshape(-1).view(np.uint16) for array in (a, b, out))
        if not (np.may_share_memory(flat, a) or np.may_share_memory(flat, b)):
            _add_compiled(a, b, flat)
            return out
        sums = np.empty(min(CHUNK, flat.size), dtype=np.uint16)  # in place (the ring's case): by pieces
        for start in range(0, flat.size, CHUNK):
            stop = min(start + CHUNK, flat.size)
            piece = sums[:stop - start]
            _add_compiled(a[start:stop], b[start:stop], piece)
            flat[start:stop] = piece
        return out
    return np.add(a, b, out=out)


@compiled.jit
def _add_compiled(a, b, out):
    """``out = half(float32(a) + float32(b))`` on the uint16 patterns, with :mod:`.compress_fast`'s exact
    widening and its rounding to the nearest half (the fp16 compressor's own conversions).  ``out`` must not
    overlap ``a`` or ``b``: with it distinct the loop vectorizes, see :func:`add`."""
    for i in range(a.size):
        left = np.uint32(_float32_bits_of_half(np.uint32(a[i]))).view(np.float32)
        right = np.uint32(_float32_bits_of_half(np.uint32(b[i]))).view(np.float32)
        out[i] = _half_from_float32_bits(np.float32(left + right).view(np.uint32))
