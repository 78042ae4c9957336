"""Compiled CPU kernels (numba) of the compressors, each one streaming pass over the data where the math allows.

:mod:`.compress` calls them on numpy arrays while :func:`~.compiled.enabled` (numba installed,
``MPIOPT_NUMBA`` not ``0``); its numpy code stays the twin they are tested against
(tests/test_kernels_compress_fast.py).  Compiled with ``fastmath=False`` (no reassociation, no fused
multiply-adds), so every float operation is the twin's, rounded the same:

=========================  =======================================================================  ============
kernel                     what, in one pass                                                        vs the twin
=========================  =======================================================================  ============
``to_fp16_*``              IEEE half bits from the float32/float64 bits by integer arithmetic       bitwise (NaN
                           (nearest even, subnormals, +-inf from 65520 on; float64 rounded once,    payloads too)
                           as numpy), uint32 lanes so that LLVM vectorizes eight wide
``from_fp16_*``            exact widening by bit arithmetic (faster in cache than a 65536-entry     bitwise
                           table look-up: docs/compression.md)
``to_bf16``, ``from_bf16``  the rule of :func:`.compress.to_bf16`; ``bits << 16``                    bitwise
``sign_pack``              bits of ``x >= 0`` and the scale's float64 sum of |x| or x^2 together:   bits bitwise;
                           element t adds to lane t % LANES (elementwise: vectorized without        sum rtol
                           reassociation), the lanes then added in order                            ~1e-12
``sign_unpack``            +-scale per bit (a byte spread over eight flag bytes, then a select)     bitwise
``topk_*``                 the candidates at or above a threshold estimated from a sample,          bitwise
                           collected in one pass (compared CHUNK at a time, vectorized), the exact
                           k-th largest among them by a radix select, ties to the lower indices
``zero_scatter``           the decode of Top-K and Random-K: one ``memset``, then the k values      bitwise
``scatter_add``            ``out[i] += v`` in index order (``np.add.at``)                           bitwise
``gather``                 Random-K's ``x[indices] * scale``                                        bitwise
``*_feedback``             error feedback ``e += x; payload = C(e); e -= decoded`` fused            bitwise (sign:
                                                                                                    its scale's)
=========================  =======================================================================  ============

Stores here are plain (numba has no streaming stores), so every output line is read before it is written,
where ``np.copyto``'s ``memcpy`` streams: decoding 2 bytes into 4 moves 10 bytes per element, not 6.

A magnitude ``key`` is the bit pattern of |x| (the sign bit cleared) as an int64, ordered as the
magnitudes with NaN above inf, as :func:`.compress.topk_select` compares them.
"""
import math

import numpy as np

from .compiled import jit

LANES = 64                 # interleaved float64 partial sums of the sign scale
CHUNK = 1024               # elements per vectorized step (sign's bits, Top-K's comparisons)
SAMPLE = 1 << 14           # Top-K: elements in the sample that estimates the threshold
SMALL = 1 << 16            # Top-K: below this many elements every element is a candidate


# -- fp16 -------------------------------------------------------------------------------------------------------
@jit
def _half_from_float32_bits(bits):
    """IEEE half bits (uint32) of the float32 of ``bits`` (uint32): nearest even, subnormals, +-inf from
    65520 on, NaN as numpy (the payload's top ten bits, at least 1).  Every intermediate is cast back to
    uint32 (numba widens integer arithmetic to 64 bits): the loops then vectorize eight lanes wide."""
    u32 = np.uint32
    sign = u32(u32(bits >> u32(16)) & u32(0x8000))
    a = u32(bits & u32(0x7FFFFFFF))
    top = u32(a >> u32(13))
    normal = u32(u32(a - u32(0x38000000) + u32(0xFFF) + u32(top & u32(1))) >> u32(13))  # rebias, round
    subnormal = u32(np.float32(a.view(np.float32) + np.float32(0.5)).view(np.uint32) - u32(0x3F000000))
    payload = u32(top & u32(0x3FF))
    nan = u32(u32(0x7C00) | payload) if payload != u32(0) else u32(0x7C01)
    if a < u32(0x38800000):              # below 2^-14: 0.5 + |x| rounds |x| to a multiple of 2^-24
        half = subnormal
    elif a < u32(0x477FF000):
        half = normal
    elif a <= u32(0x7F800000):
        half = u32(0x7C00)
    else:
        half = nan
    return u32(sign | half)


@jit
def _half_from_float64_bits(bits):
    """IEEE half bits of the float64 of ``bits`` (int64), rounded once (as numpy's float64 cast)."""
    sign = (bits >> 48) & 0x8000
    a = bits & 0x7FFFFFFFFFFFFFFF
    normal = (a - 0x3F00000000000000 + 0x1FFFFFFFFFF + ((a >> 42) & 1)) >> 42
    subnormal = np.float64(np.int64(a).view(np.float64) + 2.0 ** 28).view(np.int64) - 0x41B0000000000000
    payload = (a >> 42) & 0x3FF
    nan = 0x7C00 | payload | (payload == 0)
    if a < 0x3F10000000000000:            # below 2^-14: 2^28 + |x| rounds |x| to a multiple of 2^-24
        half = subnormal
    elif a < 0x40EFFE0000000000:
        half = normal
    elif a <= 0x7FF0000000000000:
        half = 0x7C00
    else:
        half = nan
    return sign | half


@jit
def _float32_bits_of_half(h):
    """float32 bits (uint32) of the half ``h`` (uint32; exact, NaN payloads kept as numpy's widening)."""
    u32 = np.uint32
    sign = u32(u32(h & u32(0x8000)) << u32(16))
    a = u32(h & u32(0x7FFF))
    subnormal = np.float32(np.float32(a) * np.float32(2.0 ** -24)).view(np.uint32)
    if a < u32(0x400):
        wide = subnormal
    elif a < u32(0x7C00):
        wide = u32(a << u32(13)) + u32(0x38000000)
    else:
        wide = u32(0x7F800000) | u32(u32(a & u32(0x3FF)) << u32(13))
    return u32(sign | wide)


@jit
def _float64_bits_of_half(h):
    """float64 bits (int64) of the half ``h`` (exact; NaN payloads kept, as numpy's widening)."""
    sign = (h & 0x8000) << 48
    a = h & 0x7FFF
    subnormal = np.float64(np.float64(a) * 2.0 ** -24).view(np.int64)
    if a < 0x400:
        wide = subnormal
    elif a < 0x7C00:
        wide = (a << 42) + 0x3F00000000000000
    else:
        wide = 0x7FF0000000000000 | ((a & 0x3FF) << 42)
    return sign | wide


@jit
def to_fp16_f32(x, out):
    """``out`` (uint16) = half bits of float32 ``x``."""
    bits = x.view(np.uint32)
    for i in range(x.size):
        out[i] = _half_from_float32_bits(bits[i])


@jit
def to_fp16_f64(x, out):
    """``out`` (uint16) = half bits of float64 ``x`` (rounded once)."""
    bits = x.view(np.int64)
    for i in range(x.size):
        out[i] = _half_from_float64_bits(bits[i])


@jit
def from_fp16_f32(halves, out):
    """float32 ``out`` = the values of the halves (uint16 patterns)."""
    bits = out.view(np.uint32)
    for i in range(halves.size):
        bits[i] = _float32_bits_of_half(np.uint32(halves[i]))


@jit
def from_fp16_f64(halves, out):
    """float64 ``out`` = the values of the halves (uint16 patterns)."""
    bits = out.view(np.int64)
    for i in range(halves.size):
        bits[i] = _float64_bits_of_half(np.int64(halves[i]))


@jit
def fp16_feedback_f32(x, residual, out):
    """``e += x; out = half(e); e -= float(out)`` per element (float32)."""
    for i in range(x.size):
        e = residual[i] + x[i]
        h = _half_from_float32_bits(np.float32(e).view(np.uint32))
        out[i] = h
        residual[i] = e - np.uint32(_float32_bits_of_half(h)).view(np.float32)


@jit
def fp16_feedback_f64(x, residual, out):
    """``e += x; out = half(e); e -= float(out)`` per element (float64)."""
    for i in range(x.size):
        e = residual[i] + x[i]
        h = _half_from_float64_bits(np.float64(e).view(np.int64))
        out[i] = h
        residual[i] = e - np.int64(_float64_bits_of_half(h)).view(np.float64)


# -- bf16 -------------------------------------------------------------------------------------------------------
@jit
def _bf16_of(value):
    """bfloat16 bits (uint32) of ``value`` rounded to float32 first: ``(bits + 0x7FFF + ((bits >> 16) & 1))
    >> 16``; NaN -> 0x7FC0 with its sign (uint32 arithmetic, as :func:`_half_from_float32_bits`)."""
    u32 = np.uint32
    bits = np.float32(value).view(np.uint32)
    high = u32(bits >> u32(16))
    rounded = u32(u32(bits + u32(0x7FFF) + u32(high & u32(1))) >> u32(16))
    nan = u32(u32(0x7FC0) | u32(high & u32(0x8000)))
    return nan if u32(bits & u32(0x7FFFFFFF)) > u32(0x7F800000) else rounded


@jit
def _float32_of_bf16(pattern):
    return np.uint32(np.uint32(pattern) << np.uint32(16)).view(np.float32)


@jit
def to_bf16(x, out):
    """``out`` (uint16) = bfloat16 bits of ``x`` (float32 or float64)."""
    for i in range(x.size):
        out[i] = _bf16_of(x[i])


@jit
def from_bf16(patterns, out):
    """``out`` (float32 or float64) = the float32 of ``patterns << 16``."""
    for i in range(patterns.size):
        out[i] = _float32_of_bf16(patterns[i])


@jit
def bf16_feedback(x, residual, out):
    """``e += x; out = bf16(e); e -= float(out)`` per element."""
    for i in range(x.size):
        e = residual[i] + x[i]
        pattern = _bf16_of(e)
        out[i] = pattern
        residual[i] = e - _float32_of_bf16(pattern)


# -- sign -------------------------------------------------------------------------------------------------------
GATHER_BITS = 0x8040201008040201   # the low bits of eight bytes (a uint64), times this: the top byte, first high
SPREAD_BITS = 0x0102040810204080   # a byte repeated eight times, masked by this: byte j keeps bit 7 - j


@jit(inline="always")
def _sign_chunk(v, start, lanes, flags, bits, square):
    """Elements start .. start + CHUNK - 1 of ``v``: ``lanes[t % LANES] += |v_t|`` (or v_t^2) in float64 and
    their sign bits into ``bits``; loops that vectorize (elementwise over lanes and over the flag bytes)."""
    for base in range(start, start + CHUNK, LANES):
        for j in range(LANES):
            w = np.float64(v[base + j])
            lanes[j] += w * w if square else abs(w)
    for j in range(CHUNK):
        flags[j] = v[start + j] >= 0
    words = flags.view(np.uint64)
    for word in range(CHUNK // 8):
        bits[(start >> 3) + word] = (words[word] * np.uint64(GATHER_BITS)) >> np.uint64(56)


@jit(inline="always")
def _sign_rest(v, start, lanes, bits, square):
    """The elements of ``v`` from ``start`` (a multiple of CHUNK) to its end, one at a time."""
    packed = 0
    for t in range(start, v.size):
        w = np.float64(v[t])
        lanes[t % LANES] += w * w if square else abs(w)
        packed |= np.int64(v[t] >= 0) << (7 - (t & 7))
        if t & 7 == 7 or t == v.size - 1:
            bits[t >> 3] = packed
            packed = 0


@jit(inline="always")
def _lane_total(lanes):
    total = lanes[0]
    for j in range(1, LANES):
        total += lanes[j]
    return total


@jit
def sign_pack(x, bits, square):
    """Pack the bits of ``x >= 0`` into ``bits``; returns the float64 sum of |x| (x^2 with ``square``):
    element t adds to lane t % LANES, in order, then the lanes are added in order."""
    lanes = np.zeros(LANES)
    flags = np.empty(CHUNK, dtype=np.uint8)
    full = x.size // CHUNK * CHUNK
    for start in range(0, full, CHUNK):
        _sign_chunk(x, start, lanes, flags, bits, square)
    _sign_rest(x, full, lanes, bits, square)
    return _lane_total(lanes)


@jit
def sign_pack_feedback(x, residual, bits, square, settle, pending):
    """``e += x`` and :func:`sign_pack` of the new e, chunk by chunk in one pass; with ``settle`` first
    ``e -= +pending where e >= 0, else -pending`` (the previous call's decoded payload, whose bits were
    ``e >= 0`` of this same e: :func:`sign_feedback_finish` deferred into this pass)."""
    lanes = np.zeros(LANES)
    flags = np.empty(CHUNK, dtype=np.uint8)
    negative = -pending
    full = x.size // CHUNK * CHUNK
    for start in range(0, full, CHUNK):
        if settle:
            for i in range(start, start + CHUNK):
                e = residual[i]
                residual[i] = (e - (pending if e >= 0 else negative)) + x[i]
        else:
            for i in range(start, start + CHUNK):
                residual[i] += x[i]
        _sign_chunk(residual, start, lanes, flags, bits, square)
    for i in range(full, x.size):
        e = residual[i]
        if settle:
            e = e - (pending if e >= 0 else negative)
        residual[i] = e + x[i]
    _sign_rest(residual, full, lanes, bits, square)
    return _lane_total(lanes)


@jit
def sign_unpack(bits, magnitude, out):
    """``out_t = +magnitude`` where bit t is 1, ``-magnitude`` where it is 0 (magnitude of out's dtype): each
    byte spread over eight flag bytes, then a vectorized select."""
    negative = -magnitude
    flags = np.empty(CHUNK, dtype=np.uint8)
    words = flags.view(np.uint64)
    full = out.size // CHUNK * CHUNK
    for start in range(0, full, CHUNK):
        for word in range(CHUNK // 8):
            words[word] = (np.uint64(bits[(start >> 3) + word]) * np.uint64(0x0101010101010101)) \
                & np.uint64(SPREAD_BITS)
        for j in range(CHUNK):
            out[start + j] = magnitude if flags[j] != 0 else negative
    for t in range(full, out.size):
        out[t] = magnitude if (np.int64(bits[t >> 3]) >> (7 - (t & 7))) & 1 else negative


@jit
def sign_feedback_finish(residual, magnitude):
    """``e -= +magnitude where e >= 0, else -magnitude``: the decoded payload of :func:`sign_pack_feedback`
    subtracted (its bits were ``e >= 0`` of this same e)."""
    negative = -magnitude
    for i in range(residual.size):
        e = residual[i]
        residual[i] = e - (magnitude if e >= 0 else negative)


# -- Top-K ------------------------------------------------------------------------------------------------------
@jit(inline="always")
def _collect_block(data, bits, base, stop, mask, estimate, found, count):
    """Append the elements base .. stop-1 whose key ``bits & mask`` is at least ``estimate`` to ``found``
    (indices, keys, values) after ``count``, as many as fit; the new count (counting on beyond the capacity)."""
    indices, keys, values = found
    for i in range(base, stop):
        key = bits[i] & mask
        if key >= estimate:
            if count < indices.size:
                indices[count] = i
                keys[count] = key
                values[count] = data[i]
            count += 1
    return count


@jit(inline="always")
def _collect_chunk(data, bits, start, mask, estimate, flags, found, count):
    """:func:`_collect_block` of the CHUNK elements from ``start``: the comparisons first, vectorized, into
    ``flags`` (bytes), then only the groups of eight with a flag set are looked at one by one."""
    for j in range(CHUNK):
        flags[j] = (bits[start + j] & mask) >= estimate
    words = flags.view(np.uint64)
    for word in range(CHUNK // 8):
        if words[word] != 0:
            count = _collect_block(data, bits, start + 8 * word, start + 8 * word + 8, mask, estimate, found, count)
    return count


@jit
def topk_collect(data, bits, mask, estimate, found):
    """The elements of ``data`` whose key (``bits & mask``, ``bits`` the uint32 view of float32 data, uint64
    of float64) is at least ``estimate``, in index order, into ``found`` (indices, keys, values), as many as
    fit; returns how many there are."""
    flags = np.empty(CHUNK, dtype=np.uint8)
    count = 0
    full = data.size // CHUNK * CHUNK
    for start in range(0, full, CHUNK):
        count = _collect_chunk(data, bits, start, mask, estimate, flags, found, count)
    return _collect_block(data, bits, full, data.size, mask, estimate, found, count)


@jit
def topk_collect_feedback(x, residual, bits, mask, estimate, found):
    """``e += x`` and :func:`topk_collect` of the new e (``bits``: e's bits), chunk by chunk in one pass."""
    flags = np.empty(CHUNK, dtype=np.uint8)
    count = 0
    full = x.size // CHUNK * CHUNK
    for start in range(0, full, CHUNK):
        for i in range(start, start + CHUNK):
            residual[i] += x[i]
        count = _collect_chunk(residual, bits, start, mask, estimate, flags, found, count)
    for i in range(full, x.size):
        residual[i] += x[i]
    return _collect_block(residual, bits, full, x.size, mask, estimate, found, count)


@jit
def topk_finish(found, k, top_shift, values, indices):
    """The k of the ``found`` candidates (indices, keys, values; in index order) of largest key, ties to the
    lower indices, into ``values`` and ``indices``, in index order.  The k-th largest key by a radix select,
    eight bits at a time from bit ``top_shift`` down, keeping after each digit only the candidates that
    share the digits so far."""
    candidates, keys, found_values = found
    work = keys.copy()
    survivors = work.size
    rank = k                                   # of the k-th largest key among the survivors, from the top
    histogram = np.zeros(256, dtype=np.int64)
    for shift in range(top_shift, -1, -8):
        down = np.uint64(shift)
        histogram[:] = 0
        for i in range(survivors):
            histogram[np.int64((work[i] >> down) & np.uint64(255))] += 1
        digit = 255
        while histogram[digit] < rank:
            rank -= histogram[digit]
            digit -= 1
        if histogram[digit] < survivors:
            kept = 0
            for i in range(survivors):
                if np.int64((work[i] >> down) & np.uint64(255)) == digit:
                    work[kept] = work[i]
                    kept += 1
            survivors = kept
    threshold = work[0]
    ties = rank                                # the keys equal to the threshold that are in the top k
    taken = 0
    for i in range(keys.size):
        key = keys[i]
        if key > threshold or (key == threshold and ties > 0):
            if key == threshold:
                ties -= 1
            indices[taken] = candidates[i]
            values[taken] = found_values[i]
            taken += 1


# -- sparse decode, scatter-add, gather -------------------------------------------------------------------------
@jit
def first_bad_index(indices, n):
    """The position of the first index outside [-n, n), or -1."""
    for j in range(indices.size):
        if indices[j] < -n or indices[j] >= n:
            return j
    return -1


@jit
def zero_scatter(out, indices, values):
    """``out[:] = 0; out[indices] = values`` (the last of repeated indices wins), indices checked by
    :func:`first_bad_index`, negative ones counting from the end.  The zeros are one ``memset`` (whose
    streaming stores skip reading the lines they overwrite; zeroing between the indices in the same pass
    costs one libc call per index, and plain stores read every line first)."""
    n = out.size
    out[:] = 0
    for j in range(indices.size):
        i = np.int64(indices[j])
        out[i + n if i < 0 else i] = values[j]


@jit
def scatter_add(out, indices, values, sign):
    """``out[i] += values[j]`` (``-=`` for sign -1) in the order of j, as ``np.add.at``; checked indices."""
    n = out.size
    for j in range(indices.size):
        i = np.int64(indices[j])
        if i < 0:
            i += n
        if sign < 0:
            out[i] -= values[j]
        else:
            out[i] += values[j]


@jit
def gather(x, indices, scale, scaled, values):
    """``values = x[indices]``, times ``scale`` (of x's dtype) when ``scaled``."""
    for j in range(indices.size):
        value = x[indices[j]]
        values[j] = value * scale if scaled else value


@jit
def gather_feedback(residual, indices, scale, scaled, values):
    """:func:`gather` from e, then ``e[indices] -= values`` (unique indices)."""
    for j in range(indices.size):
        i = indices[j]
        value = residual[i] * scale if scaled else residual[i]
        values[j] = value
        residual[i] -= value


# -- Top-K driver -----------------------------------------------------------------------------------------------
def _found(capacity, dtype):
    """Buffers for ``capacity`` candidates: (int32 indices, keys, values)."""
    return (np.empty(capacity, dtype=np.int32), np.empty(capacity, dtype=np.uint64 if dtype == np.float64 else
                                                          np.uint32), np.empty(capacity, dtype=dtype))


def topk(flat, k, residual=None):
    """(values, int32 indices) of :func:`.compress.topk_select` (0 < k < n), bitwise; with ``residual`` (e,
    flat's size and dtype): ``e += flat`` in the collecting pass, e's top k, and ``e[indices] -= values``.

    The estimate: the key of rank ``1.25 m + 4 sqrt(m) + 4`` from the top of SAMPLE evenly spaced elements
    (m = SAMPLE k / n, the expected rank of the k-th largest), so about 1.25 k + O(sqrt k) candidates.  Too
    many for the buffer (ties at the estimate): the pass again with the exact count as capacity; fewer than
    k: the estimate of a rank four times higher, down to every element."""
    n = flat.size
    data = flat if residual is None else residual
    wide = data.dtype == np.float64
    bits = data.view(np.uint64 if wide else np.uint32)
    mask = bits.dtype.type(0x7FFFFFFFFFFFFFFF if wide else 0x7FFFFFFF)
    rank = SAMPLE
    if n > SMALL:
        stride = n // SAMPLE
        sample = data[::stride][:SAMPLE]
        if residual is not None:
            sample = sample + flat[::stride][:SAMPLE]
        sample = sample.view(bits.dtype) & mask
        expected = SAMPLE * k / n
        rank = math.ceil(1.25 * expected + 4 * math.sqrt(expected)) + 4
    fused = residual is not None
    while True:
        if rank >= SAMPLE:
            estimate, capacity = bits.dtype.type(0), n
        else:
            estimate = np.partition(sample, SAMPLE - rank)[SAMPLE - rank]
            capacity = min(n, n // SAMPLE * rank * 5 // 4 + 1024)
        found = _found(capacity, data.dtype)
        if fused:
            count = topk_collect_feedback(flat, residual, bits, mask, estimate, found)
            fused = False
        else:
            count = topk_collect(data, bits, mask, estimate, found)
        if count > capacity:  # the same pass into a buffer of the exact size
            found = _found(count, data.dtype)
            topk_collect(data, bits, mask, estimate, found)
        if count >= k:
            break
        rank *= 4
    values, indices = np.empty(k, dtype=data.dtype), np.empty(k, dtype=np.int32)
    topk_finish(tuple(part[:count] for part in found), k, 56 if wide else 24, values, indices)
    if residual is not None:
        scatter_add(residual, indices, values, -1)
    return values, indices
