"""float16 sums at memory speed: the ring's reduction of fp16 payloads, compiled, and its numpy twin.

numpy adds float16 arrays one element at a time in software (each half
widened to float32, added, rounded back): 95 ms for 8 M elements on one core,
25 times a float32 add of twice the bytes.  The compressed reducer's
``allreduce`` path sums fp16 payloads exactly so (mpiopt.collectives.compressed),
so on the CPU that sum cost more than fp16 saved.  :func:`add` computes the same
thing, compiled (:mod:`.compiled`): for each element

    out = half(float32(a) + float32(b))

with float32(h) exact (a table of the 65536 halves) and half(f) numpy's
rounding of a float32 to the nearest half, ties to even: beyond 65520 +-inf,
below 2^-14 subnormal (f 2^24 rounded to an integer), NaN kept NaN.  These are
numpy's own operations (its half add is ``npy_float_to_half(npy_half_to_float(a)
+ npy_half_to_float(b))``), so the compiled sum equals ``np.add`` on float16 bit
for bit, NaN payloads aside (tests/test_kernels_halves.py).

Cost: one pass, reading 4 and writing 2 bytes per element; the rounding is
integer arithmetic on the float32 bits of the sum (F. Giesen's
``float_to_half_fast3_rtne``, with numpy's NaN rule).
"""
import numpy as np

from . import compiled

CHUNK = 2048  # elements summed into a float32 buffer, then rounded: the two loops vectorize apart


def add(a, b, out):
    """``out = a + b`` for float16 arrays (contiguous, the same size; ``out`` may be ``a`` or ``b``), as
    ``np.add``; compiled when :func:`.compiled.enabled`.  Returns ``out``."""
    if compiled.enabled() and type(a) is type(b) is type(out) is np.ndarray \
            and a.dtype == b.dtype == out.dtype == np.float16 and a.size == b.size == out.size \
            and a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous:
        _add_compiled(a.reshape(-1).view(np.uint16), b.reshape(-1).view(np.uint16),
                      out.reshape(-1).view(np.uint16), _widened())
        return out
    return np.add(a, b, out=out)


_TABLE = {}


def _widened():
    """The 65536 halves as float32 (exact), indexed by their bits; made once."""
    if "table" not in _TABLE:
        _TABLE["table"] = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    return _TABLE["table"]


@compiled.jit(inline="always")
def float_bits_to_half(bits, value):
    """The bits of the half nearest the float32 ``value`` (ties to even), ``bits`` its float32 bits: numpy's
    ``npy_floatbits_to_halfbits`` for every non-NaN value, and a NaN for a NaN (numpy's payload rule)."""
    sign = np.uint16((bits >> np.uint32(16)) & np.uint32(0x8000))
    magnitude = bits & np.uint32(0x7FFFFFFF)
    if magnitude >= np.uint32(0x47800000):                        # >= 65536, inf, NaN
        if magnitude > np.uint32(0x7F800000):                     # NaN: numpy keeps the top payload bits
            half = np.uint16(0x7C00) | np.uint16((magnitude >> np.uint32(13)) & np.uint32(0x3FF))
            if half == np.uint16(0x7C00):
                half = np.uint16(0x7C01)
            return sign | half
        return sign | np.uint16(0x7C00)
    if magnitude < np.uint32(0x38800000):                         # below 2^-14: subnormal or zero
        scaled = abs(value) * np.float32(16777216.0)              # exact: a power of two
        return sign | np.uint16(np.rint(scaled))                  # ties to even; 1024 is 2^-14, a normal
    odd = (magnitude >> np.uint32(13)) & np.uint32(1)
    magnitude = magnitude - np.uint32(0x38000000) + np.uint32(0xFFF) + odd   # rebias, round to nearest even
    return sign | np.uint16(magnitude >> np.uint32(13))           # a carry past 65504 gives 0x7C00: inf


@compiled.jit
def _add_compiled(a, b, out, table):
    total = np.empty(CHUNK, dtype=np.float32)
    bits = total.view(np.uint32)
    n = a.size
    for start in range(0, n, CHUNK):
        count = min(CHUNK, n - start)
        for i in range(count):
            total[i] = table[a[start + i]] + table[b[start + i]]
        for i in range(count):
            out[start + i] = float_bits_to_half(bits[i], total[i])
