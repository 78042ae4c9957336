"""QSGD on the CPU, compiled (numba): the numpy twins of :mod:`.compress` in one pass, bitwise.

=============  =================================================================================
function       what (bitwise equal to)
=============  =================================================================================
``norms``      float32 norm per bucket (``qsgd_norms(flat, bucket_size, "max" or "l2")``)
``quantize``   the stored levels of ``qsgd_quantize`` given its norms and the noise's seeds
``compress``   (norms, stored) of ``qsgd_quantize`` (norms computed on the fly, see below)
``dequantize`` ``qsgd_dequantize`` into ``out`` (float32 or float64)
``feedback``   error feedback's three steps (``qsgd_feedback``) in the same pass
=============  =================================================================================

**The math** (:mod:`.compress`'s docstring): s = ``levels`` (127 or 7), N_b
the float32 norm of bucket b (l2: x_t^2 in float64 added into lane t % 16 of
the bucket in element order, then ``((lane_0 + lane_1) + lane_2) + ...``,
its square root; max: max |x_t| in float64; times ``NORM_MARGIN`` in
float64, rounded to float32); in the input's precision ``scale = s / N`` (0
where N <= 0), ``y = x scale``, ``y = y + u`` (rounded once), ``floor``,
clipped to [-s, s]; int8 levels, or two signed nibbles per byte (element 2j
low).  u_i = ``(w >> 8) 2^-24`` with w = ``triple32((i mod 2^32) ^ s_j)``,
s_j the seed of the call's j = i // 2^32 (:mod:`.hash32`).  Decoding:
``level * float32(N / float32(s))``, the step widened to the output's
precision first.

**One pass.** The buffer is cut into pieces of ``CHUNK`` elements (even, so a
piece owns whole nibble pairs).  Per piece: the norms of the buckets it
reaches that are not done yet (``compress``; the l2 sums in a
``<16 x double>`` accumulator, one lane per ``t % 16``), a prefetch of the
next piece, then one loop per bucket segment: the hash of the index, u,
``x scale``, ``+ u``, floor, clip, int8 (vectorized: the hash in 32-bit lanes,
``vpmulld``), and for 4 bits the nibble packing of the piece.  All the float
operations are IEEE-rounded as numpy's (``fastmath=False``: no fused
multiply-adds, no reassociation; the lane sums in the lanes' order), so the
results are the numpy twins' bit for bit, for every n, bucket size, seed and
step, overflowing norms (inf) and zero buckets included; not promised for NaN
inputs (numpy's int8 cast of NaN is unspecified).

**Cost**: eleven 32-bit integer operations per element for the noise (three
multiplies), the float steps and the norms' pass over each bucket (in L1);
``dequantize`` is memory-bound.  The measured times are in
docs/compression.md ("On the CPU: compiled kernels").

numba comes through the one switch, :mod:`.compiled` (its ``jit`` options too);
without numba ``AVAILABLE`` is False and the functions return None.
:mod:`.compress` calls them only while :func:`.compiled.enabled` (so not with
``MPIOPT_NUMBA=0``); otherwise the numpy twins run.
"""

import numpy as np

from . import compiled
from .hash32 import MULTIPLIERS, SEED_SPAN, SHIFTS

NORM_MARGIN = 1.0 + 2.0 ** -20  # as mpiopt.kernels.compress (kept here: compress may import this module)
LANES = 16                       # the interleaved float64 sums of the l2 norms (as compress.LANES)
UNIT = 2.0 ** -24
CHUNK = 1024                     # elements per piece: x and the levels stay in L1
LINE_BYTES = 64                  # the prefetch stride

__all__ = ["AVAILABLE", "compress", "dequantize", "feedback", "norms", "quantize"]


numba = compiled.numba
if numba is not None:  # the kernels at module level, so that numba's on-disk cache finds them again
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    jit = compiled.jit

    def inline(function):
        return compiled.jit(function, inline="always")
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)

    # -- small IR helpers: exact conversions numba's scalar typing would widen -----------------------------
    @intrinsic
    def cast_like(typingctx, value, like):
        """``value`` converted to the type of ``like`` (an LLVM cast: sitofp, fpext, fptosi, ...)."""
        def codegen(context, builder, signature, args):
            return context.cast(builder, args[0], signature.args[0], signature.return_type)
        return like(value, like), codegen

    @intrinsic
    def unit_like(typingctx, word, like):
        """``(word >> 8) 2^-24`` (word a uint32) in the type of ``like``: exact."""
        def codegen(context, builder, signature, args):
            fty = context.get_value_type(signature.return_type)
            shifted = builder.lshr(args[0], ir.Constant(i32, 8))  # < 2^24: a non-negative int32
            return builder.fmul(builder.sitofp(shifted, fty), ir.Constant(fty, UNIT))
        return like(types.uint32, like), codegen

    @intrinsic
    def floor(typingctx, value):
        def codegen(context, builder, signature, args):
            fty = context.get_value_type(signature.return_type)
            function = builder.module.declare_intrinsic("llvm.floor", [fty])
            return builder.call(function, [args[0]])
        return value(value), codegen

    @intrinsic
    def nibbles(typingctx, byte):
        """(low, high) signed nibbles of a uint8 as int8 (arithmetic shifts)."""
        def codegen(context, builder, signature, args):
            four = ir.Constant(i8, 4)
            low = builder.ashr(builder.shl(args[0], four), four)
            high = builder.ashr(args[0], four)
            return context.make_tuple(builder, signature.return_type, (low, high))
        return types.UniTuple(types.int8, 2)(types.uint8), codegen

    @intrinsic
    def pack(typingctx, low, high):
        """``(low & 0x0F) | (high << 4)`` of two int8 levels, as uint8."""
        def codegen(context, builder, signature, args):
            low = builder.and_(args[0], ir.Constant(i8, 0x0F))
            return builder.or_(low, builder.shl(args[1], ir.Constant(i8, 4)))
        return types.uint8(types.int8, types.int8), codegen

    @intrinsic
    def bits_to_float(typingctx, bits):
        """The float32 (int32 bits) or float64 (int64 bits) of the same bits."""
        result = types.float32 if bits.bitwidth == 32 else types.float64
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(result))
        return result(bits), codegen

    @intrinsic
    def prefetch(typingctx, array, index):
        """Prefetch the cache line of ``array[index]`` into all levels (a hint: never faults)."""
        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, value=args[0]).data
            where = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(8).as_pointer())
            name = "llvm.prefetch.p0" if str(where.type) == "ptr" else "llvm.prefetch.p0i8"  # opaque pointers?
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [where.type, i32, i32, i32]), name)
            builder.call(function, [where, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()
        return types.void(array, types.int64), codegen

    # -- the noise: triple32 of (index mod 2^32) XOR seed (mpiopt.kernels.hash32) ------------------------------
    @intrinsic
    def hash_word(typingctx, offset, base, seed):
        """``triple32(((base + offset) mod 2^32) ^ seed)`` in i32 arithmetic (offset an int64 loop index, base
        a uint32, seed a uint32): numba's integer typing would widen the products to 64 bits, and an i32 index
        lets LLVM keep a 32-bit vector induction instead of narrowing 64-bit ones."""
        def codegen(context, builder, signature, args):
            x = builder.xor(builder.add(builder.trunc(args[0], i32), args[1]), args[2])
            for shift, multiplier in zip(SHIFTS, MULTIPLIERS):
                x = builder.xor(x, builder.lshr(x, ir.Constant(i32, shift)))
                x = builder.mul(x, ir.Constant(i32, multiplier))
            return builder.xor(x, builder.lshr(x, ir.Constant(i32, SHIFTS[-1])))
        return types.uint32(offset, types.uint32, types.uint32), codegen

    # -- norms --------------------------------------------------------------------------------------------------
    @intrinsic
    def l2_total(typingctx, x, start, stop):
        """The bucket's float64 sum of squares of x[start:stop] in LANES interleaved lanes: element t of the
        bucket adds x_t^2 to lane t % 16 (a <16 x double> accumulator), the missing lanes of the last group
        add +0.0 (exact), then ((lane_0 + lane_1) + lane_2) + ... + lane_15."""
        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, value=args[0]).data
            element = context.get_value_type(signature.args[0].dtype)
            double = ir.DoubleType()
            wide = ir.VectorType(double, LANES)
            first, last = args[1], args[2]
            base = builder.gep(data, [first])
            size = builder.sub(last, first)
            groups = builder.udiv(size, ir.Constant(i64, LANES))
            accumulator = cgutils.alloca_once_value(builder, ir.Constant(wide, [0.0] * LANES))

            def add(values):
                if element != double:
                    values = builder.fpext(values, wide)
                builder.store(builder.fadd(builder.load(accumulator), builder.fmul(values, values)), accumulator)

            with cgutils.for_range(builder, groups) as loop:
                where = builder.gep(base, [builder.mul(loop.index, ir.Constant(i64, LANES))])
                add(builder.load(builder.bitcast(where, ir.VectorType(element, LANES).as_pointer()),
                                 align=element.get_abi_size(context.target_data)))
            full = builder.mul(groups, ir.Constant(i64, LANES))
            rest = builder.sub(size, full)
            tail = cgutils.alloca_once_value(builder, ir.Constant(ir.VectorType(element, LANES), [0.0] * LANES))
            for lane in range(LANES - 1):
                with builder.if_then(builder.icmp_signed(">", rest, ir.Constant(i64, lane))):
                    value = builder.load(builder.gep(base, [builder.add(full, ir.Constant(i64, lane))]))
                    builder.store(builder.insert_element(builder.load(tail), value, ir.Constant(i32, lane)), tail)
            add(builder.load(tail))
            lanes = builder.load(accumulator)
            total = builder.extract_element(lanes, ir.Constant(i32, 0))
            for lane in range(1, LANES):
                total = builder.fadd(total, builder.extract_element(lanes, ir.Constant(i32, lane)))
            return total
        return types.float64(x, types.int64, types.int64), codegen

    @inline
    def l2_norm(x, start, stop):
        """float32(sqrt(sum of squares in lanes) margin)."""
        return np.float32(np.sqrt(l2_total(x, start, stop)) * NORM_MARGIN)

    @inline
    def max_norm(bits, start, stop, magnitude_mask, infinity):
        """float32(max |x_t| margin) from the bits of x (int32 or int64): |x| compares as its bits with the
        sign cleared; bits above infinity's are NaNs, which propagate."""
        largest = bits[start] & magnitude_mask
        for t in range(1, stop - start):
            b = bits[np.uint64(start + t)] & magnitude_mask
            if b > largest:
                largest = b
        if largest > infinity:
            return np.float32(np.nan)
        return np.float32(np.float64(bits_to_float(cast_like(largest, infinity))) * NORM_MARGIN)

    @inline
    def bucket_norm(x, bits, start, stop, use_max, magnitude_mask, infinity):
        if use_max:
            return max_norm(bits, start, stop, magnitude_mask, infinity)
        return l2_norm(x, start, stop)

    @jit
    def norms_kernel(x, bits, bucket_size, use_max, magnitude_mask, infinity, out):
        n = x.shape[0]
        for b in range(out.shape[0]):
            start = b * bucket_size
            out[b] = bucket_norm(x, bits, start, min(n, start + bucket_size), use_max, magnitude_mask, infinity)

    # -- quantize -----------------------------------------------------------------------------------------------
    @inline
    def quantize_segment(x, first, count, seed, out, out_first, scale, bound, feedback, decoded_step):
        """out[out_first + t] = clip(floor(x[first + t] scale + u_{first + t}), -bound, bound) as int8 for
        t < count: one bucket's part of a piece; with ``feedback`` also x[first + t] -= level decoded_step
        (x the residual: e -= decoded, the level exact as a float).  (Unsigned indices: no negative-index
        wraparound, so LLVM vectorizes; no array views either, whose reference counts cost atomic calls.)"""
        base = np.uint32(first & 0xFFFFFFFF)
        for t in range(count):
            where = np.uint64(first + t)
            value = x[where]
            y = value * scale
            y = y + unit_like(hash_word(t, base, seed), y)
            y = floor(y)
            if y > bound:
                y = bound
            if y < -bound:
                y = -bound
            out[np.uint64(out_first + t)] = np.int8(y)
            if feedback:
                x[where] = value - y * decoded_step

    @jit
    def quantize_kernel(x, bits, norms, compute_norms, use_max, magnitude_mask, infinity, bucket_size, bound,
                        seeds, four_bits, stored, levels, feedback, addend):
        """Levels of x into ``stored`` (int8: 8 bits; uint8 nibble pairs: 4 bits), piece by piece; with
        ``compute_norms`` the norms too, bucket by bucket just ahead of the quantization.  With ``feedback``
        x is error feedback's residual e: each bucket first gets e += addend (the input), and each element
        e -= its decoded value once quantized, all while the bucket is in L1."""
        n = x.shape[0]
        zero = bound - bound
        done = 0  # buckets whose norms are in `norms`
        for p0 in range(0, n, CHUNK):
            p1 = min(n, p0 + CHUNK)
            if compute_norms:
                last = (p1 - 1) // bucket_size
                while done <= last:
                    start = done * bucket_size
                    stop = min(n, start + bucket_size)
                    if feedback:
                        for t in range(start, stop):
                            x[np.uint64(t)] = x[np.uint64(t)] + addend[np.uint64(t)]
                    norms[done] = bucket_norm(x, bits, start, stop, use_max, magnitude_mask, infinity)
                    done += 1
            # the next piece: read from memory while the rounds below compute (no demand loads then)
            for line in range(p1, min(n, p1 + CHUNK), LINE_BYTES // x.itemsize):
                prefetch(x, line)
            seed = seeds[p0 >> 32]  # a piece never straddles two seeds (2^32 is a multiple of CHUNK)
            i = p0
            b = p0 // bucket_size
            while i < p1:
                stop = min(p1, (b + 1) * bucket_size)
                norm = norms[b]
                scale = bound / norm if norm > 0 else zero  # s / N in x's precision (N widened exactly)
                decoded_step = cast_like(np.float32(norm / np.float32(bound)), scale)  # as dequantize's
                if four_bits:
                    quantize_segment(x, i, stop - i, seed, levels, i - p0, scale, bound, feedback, decoded_step)
                else:
                    quantize_segment(x, i, stop - i, seed, stored, i, scale, bound, feedback, decoded_step)
                i = stop
                b += 1
            if four_bits:
                count = p1 - p0
                if count % 2:
                    levels[count] = 0  # the missing last element: a zero high nibble
                half = p0 // 2
                for j in range((count + 1) // 2):
                    stored[np.uint64(half + j)] = pack(levels[2 * j], levels[2 * j + 1])

    # -- dequantize ---------------------------------------------------------------------------------------------
    @jit
    def dequantize_kernel(norms, stored, n, four_bits, bucket_size, levels, out):
        for b in range(norms.shape[0]):
            start = b * bucket_size
            stop = min(n, start + bucket_size)
            step_ = cast_like(np.float32(norms[b] / np.float32(levels)), out[0])
            if not four_bits:
                for t in range(stop - start):
                    where = np.uint64(start + t)
                    out[where] = cast_like(stored[where], step_) * step_
            else:
                t = start
                if t % 2 and t < stop:  # an odd start: the high nibble of a byte
                    out[t] = cast_like(nibbles(stored[t // 2])[1], step_) * step_
                    t += 1
                pairs = (stop - t) // 2
                for j in range(pairs):
                    low, high = nibbles(stored[np.uint64(t // 2 + j)])
                    out[np.uint64(t + 2 * j)] = cast_like(low, step_) * step_
                    out[np.uint64(t + 2 * j + 1)] = cast_like(high, step_) * step_
                t += 2 * pairs
                if t < stop:
                    out[t] = cast_like(nibbles(stored[t // 2])[0], step_) * step_

    _KERNELS = {"norms": norms_kernel, "quantize": quantize_kernel, "dequantize": dequantize_kernel}
else:
    _KERNELS = None

AVAILABLE = _KERNELS is not None


# -- the Python API (numpy arrays) ------------------------------------------------------------------------------
def _flat(x):
    flat = np.ascontiguousarray(x).reshape(-1)
    if flat.dtype not in (np.float32, np.float64):
        raise TypeError(f"expected float32 or float64 values, got {flat.dtype}")
    return flat


def _bits(flat):
    """(the int view of the values, the mask of the magnitude bits, the bits of +infinity) for the max norm."""
    if flat.dtype == np.float32:
        return flat.view(np.int32), np.int32(0x7FFFFFFF), np.int32(0x7F800000)
    return flat.view(np.int64), np.int64(0x7FFFFFFFFFFFFFFF), np.int64(0x7FF0000000000000)


def _check(bits, bucket_size):
    if bits not in (4, 8):
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")
    if int(bucket_size) < 1:
        raise ValueError(f"bucket_size must be >= 1, got {bucket_size!r}")


def norms(flat, bucket_size, use_max):
    """float32 norms of the buckets of ``flat`` (ceil(n / bucket_size)), bitwise ``qsgd_norms(flat,
    bucket_size, "max" if use_max else "l2")``; None without numba."""
    if not AVAILABLE:
        return None
    flat, bucket_size = _flat(flat), int(bucket_size)
    _check(8, bucket_size)
    out = np.empty(-(-flat.size // bucket_size), dtype=np.float32)
    value_bits, mask, infinity = _bits(flat)
    _KERNELS["norms"](flat, value_bits, bucket_size, bool(use_max), mask, infinity, out)
    return out


def _seeds(seeds, n):
    seeds = np.ascontiguousarray(seeds, dtype=np.uint32).reshape(-1)
    if seeds.size < max(1, -(-n // SEED_SPAN)):
        raise ValueError(f"{n} elements need {max(1, -(-n // SEED_SPAN))} seeds, got {seeds.size}")
    return seeds


def _quantize(flat, norms_, compute, use_max, bits, bucket_size, levels, seeds, addend=None):
    n = flat.size
    stored = np.empty(n if bits == 8 else -(-n // 2), dtype=np.int8 if bits == 8 else np.uint8)
    level_scratch = np.empty(CHUNK + 1, dtype=np.int8)
    value_bits, mask, infinity = _bits(flat)
    _KERNELS["quantize"](flat, value_bits, norms_, compute, bool(use_max), mask, infinity, int(bucket_size),
                         flat.dtype.type(levels), _seeds(seeds, n), bits == 4, stored, level_scratch,
                         addend is not None, flat if addend is None else addend)
    return stored


def quantize(flat, norms, bits, bucket_size, levels, seeds):
    """The stored levels of ``flat`` (int8[n] for 8 bits, uint8[ceil(n / 2)] for 4 bits) given its float32
    ``norms`` and the noise's ``seeds`` (:func:`~mpiopt.kernels.hash32.stream_seeds`): bitwise the levels of
    ``qsgd_quantize(..., norms=norms)``; None without numba."""
    if not AVAILABLE:
        return None
    flat, bucket_size = _flat(flat), int(bucket_size)
    _check(bits, bucket_size)
    norms = np.ascontiguousarray(norms, dtype=np.float32).reshape(-1)
    if norms.size != -(-flat.size // bucket_size):
        raise ValueError(f"expected {-(-flat.size // bucket_size)} norms, got {norms.size}")
    return _quantize(flat, norms, False, False, bits, bucket_size, levels, seeds)


def compress(flat, bits, bucket_size, use_max, levels, seeds):
    """(norms, stored) of ``flat`` in one pass (each bucket's norm computed just before its quantization):
    bitwise ``qsgd_quantize(flat, bits, bucket_size, "max" if use_max else "l2", ...)``; None without numba."""
    if not AVAILABLE:
        return None
    flat, bucket_size = _flat(flat), int(bucket_size)
    _check(bits, bucket_size)
    norms_ = np.empty(-(-flat.size // bucket_size), dtype=np.float32)
    return norms_, _quantize(flat, norms_, True, use_max, bits, bucket_size, levels, seeds)


def feedback(flat, residual, bits, bucket_size, use_max, levels, seeds):
    """Error feedback's step in one pass: ``residual += flat``, (norms, stored) of the new residual as
    :func:`compress` gives them, ``residual -= decoded``; bitwise the three steps of the twins.  ``flat`` and
    ``residual``: C-contiguous 1-D arrays of one float dtype and size (residual updated in place).  None
    without numba."""
    if not AVAILABLE:
        return None
    flat, bucket_size = _flat(flat), int(bucket_size)
    _check(bits, bucket_size)
    if residual.dtype != flat.dtype or residual.shape != flat.shape or not residual.flags.c_contiguous:
        raise ValueError(f"residual must be a C-contiguous {flat.dtype} array of {flat.size} elements")
    norms_ = np.empty(-(-flat.size // bucket_size), dtype=np.float32)
    return norms_, _quantize(residual, norms_, True, use_max, bits, bucket_size, levels, seeds, flat)


def dequantize(norms, stored, n, bits, bucket_size, levels, out):
    """``out[i] = level_i * float32(N_b / float32(levels))`` (widened to out's dtype first), bitwise
    ``qsgd_dequantize(norms, stored, n, bits, bucket_size, out=out)``; returns ``out`` (None without
    numba).  ``out``: a C-contiguous float32 or float64 array of n elements."""
    if not AVAILABLE:
        return None
    _check(bits, bucket_size)
    flat_out = out.reshape(-1)
    if flat_out.size != n or not out.flags.c_contiguous or out.dtype not in (np.float32, np.float64):
        raise ValueError(f"out must be a C-contiguous float32 or float64 array of {n} elements")
    stored = np.ascontiguousarray(stored)
    stored = stored.view(np.int8) if bits == 8 else stored.view(np.uint8)
    if n:
        _KERNELS["dequantize"](np.ascontiguousarray(norms, dtype=np.float32), stored, int(n), bits == 4,
                               int(bucket_size), int(levels), flat_out)
    return out
