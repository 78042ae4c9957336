"""QSGD on the CPU, compiled (numba): the numpy twins of :mod:`.compress` in one pass, bitwise.

=============  =================================================================================
function       what (bitwise equal to)
=============  =================================================================================
``norms``      float32 norm per bucket (``qsgd_norms(flat, bucket_size, "max" or "l2")``)
``quantize``   the stored levels of ``qsgd_quantize`` given its norms and Philox key
``compress``   (norms, stored) of ``qsgd_quantize`` (norms computed on the fly, see below)
``dequantize`` ``qsgd_dequantize`` into ``out`` (float32 or float64)
=============  =================================================================================

**The math** (:mod:`.compress`'s docstring): s = ``levels`` (127 or 7), N_b
the float32 norm of bucket b (l2: x_t^2 in float64 added into lane t % 16 of
the bucket in element order, then ``((lane_0 + lane_1) + lane_2) + ...``,
its square root; max: max |x_t| in float64; times ``NORM_MARGIN`` in
float64, rounded to float32); in the input's precision ``scale = s / N`` (0
where N <= 0), ``y = x scale``, ``y = y + u`` (rounded once), ``floor``,
clipped to [-s, s]; int8 levels, or two signed nibbles per byte (element 2j
low).  u_i = ``(w >> 8) 2^-24`` with w the low (even i) or high (odd i) half
of word ``(i // 2) % 4`` of Philox4x64-10 at counter ``(i // 8, step, 0, 0)``:
the eight elements of a block are its four words read as eight little-endian
uint32.  Decoding: ``level * float32(N / float32(s))``, the step widened to
the output's precision first.

**One pass.** The buffer is cut into pieces of ``CHUNK`` elements (a multiple
of 8, so a piece owns whole Philox blocks and whole nibble pairs).  Per piece:
the norms of the buckets it reaches that are not done yet (``compress``; the
l2 sums in a ``<16 x double>`` accumulator, one lane per ``t % 16``), a
prefetch of the next piece (the memory works while the rounds compute), the
Philox words of its blocks into a small scratch buffer, then one loop per bucket
segment: u, ``x scale``, ``+ u``, floor, clip, int8 (vectorized: 8 float32 per
AVX2 instruction), and for 4 bits the nibble packing of the piece.  All the
operations are IEEE-rounded as numpy's (``fastmath=False``: no fused
multiply-adds, no reassociation; the lane sums in the lanes' order), so the
results are the numpy twins' bit for bit, for every n, bucket size, key and step,
overflowing norms (inf) and zero buckets included; not promised for NaN inputs
(numpy's int8 cast of NaN is unspecified).

**Philox on a CPU.** A 64 x 64 -> 128-bit product per half round: numba has no
128-bit integer, so the rounds are LLVM IR written here (``philox_group``, an
``@intrinsic``): scalar blocks multiply in ``i128`` (one ``mulx``), and groups
of four blocks run in ``<4 x i64>`` vectors from 32-bit halves (four
``vpmuludq`` and eleven adds, shifts and masks per product);
``VECTOR_GROUPS`` groups and ``SCALAR_BLOCKS`` scalar blocks interleaved round
by round keep the scalar multiplier and the vector units busy together (the
round keys, the counter's constant words and the first round's zero product
fold away: 18 products per block).

**Cost**: the Philox rounds, not memory, bound ``compress`` (the same for 8
and 4 bits), which is why the interleaving above matters; ``dequantize`` is
memory-bound.  The measured times are in docs/compression.md ("On the CPU:
compiled kernels").

numba comes through the one switch, :mod:`.compiled` (its ``jit`` options too);
without numba, or on a big-endian machine (the words are read as little-endian
uint32 halves), ``AVAILABLE`` is False and the functions return None.
:mod:`.compress` calls them only while :func:`.compiled.enabled` (so not with
``MPIOPT_NUMBA=0``); otherwise the numpy twins run.
"""
import sys

import numpy as np

from . import compiled
from .philox import MULTIPLIERS, ROUNDS, WEYL

NORM_MARGIN = 1.0 + 2.0 ** -20  # as mpiopt.kernels.compress (kept here: compress may import this module)
LANES = 16                       # the interleaved float64 sums of the l2 norms (as compress.LANES)
UNIT = 2.0 ** -24
CHUNK = 1024                     # elements per piece: x, the Philox words and the levels stay in L1
VECTOR_GROUPS = 2                # groups of four Philox blocks in <4 x i64> per call of philox_group
SCALAR_BLOCKS = 2                # and blocks in scalar i128 arithmetic, interleaved with them
GROUP_BLOCKS = 4 * VECTOR_GROUPS + SCALAR_BLOCKS
MASK64 = (1 << 64) - 1
LINE_BYTES = 64                  # the prefetch stride

__all__ = ["AVAILABLE", "compress", "dequantize", "norms", "philox_blocks", "quantize", "stream_words"]


numba = compiled.numba if sys.byteorder == "little" else None
if numba is not None:  # the kernels at module level, so that numba's on-disk cache finds them again
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    jit = compiled.jit

    def inline(function):
        return compiled.jit(function, inline="always")
    i8, i32, i64, i128 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.IntType(128)
    v4 = ir.VectorType(i64, 4)

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

    # -- Philox4x64-10 ----------------------------------------------------------------------------------------
    def scalar_mulhilo(builder, a, multiplier):
        product = builder.mul(builder.zext(a, i128), ir.Constant(i128, multiplier))
        return builder.trunc(builder.lshr(product, ir.Constant(i128, 64)), i64), builder.trunc(product, i64)

    def vector_mulhilo(builder, a, multiplier):
        """(high, low) of ``a * multiplier`` in <4 x i64> from 32 x 32-bit products (vpmuludq): with
        t = a_high m_low + (a_low m_low >> 32) and w = (t mod 2^32) + a_low m_high (neither overflows),
        high = a_high m_high + (t >> 32) + (w >> 32), low = (w << 32) | (a_low m_low mod 2^32)."""
        def splat(value):
            return ir.Constant(v4, [value] * 4)
        mask, s32 = splat(0xFFFFFFFF), splat(32)
        m_low, m_high = splat(multiplier & 0xFFFFFFFF), splat(multiplier >> 32)
        a_low, a_high = builder.and_(a, mask), builder.lshr(a, s32)
        low_low = builder.mul(a_low, m_low)
        t = builder.add(builder.mul(a_high, m_low), builder.lshr(low_low, s32))
        w = builder.add(builder.and_(t, mask), builder.mul(a_low, m_high))
        high = builder.add(builder.add(builder.mul(a_high, m_high), builder.lshr(t, s32)), builder.lshr(w, s32))
        return high, builder.or_(builder.shl(w, s32), builder.and_(low_low, mask))

    def broadcast(builder, value):
        vector = ir.Constant(v4, None)
        for lane in range(4):
            vector = builder.insert_element(vector, value, ir.Constant(i32, lane))
        return vector

    def rounds(builder, blocks, key0, key1, mulhilo, widen):
        """Philox4x64-10 on ``blocks`` (lists of four words: scalars or vectors), round by round."""
        for round_ in range(ROUNDS):
            k0 = builder.add(key0, ir.Constant(i64, round_ * WEYL[0] & MASK64))
            k1 = builder.add(key1, ir.Constant(i64, round_ * WEYL[1] & MASK64))
            for block, multiply in zip(blocks, mulhilo):
                wide0, wide1 = widen[multiply](k0), widen[multiply](k1)
                high0, low0 = multiply(builder, block[0], MULTIPLIERS[0])
                high1, low1 = multiply(builder, block[2], MULTIPLIERS[1])
                block[:] = [builder.xor(builder.xor(high1, block[1]), wide0), low1,
                            builder.xor(builder.xor(high0, block[3]), wide1), low0]

    @intrinsic
    def philox_group(typingctx, out, offset, block, step, key0, key1):
        """Blocks ``block .. block + GROUP_BLOCKS - 1`` of the stream (key, step) into
        ``out[offset + 4 (b - block) + w]`` (uint64 words, block after block)."""
        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, value=args[0]).data
            base = builder.gep(data, [args[1]])
            first, step_, k0, k1 = args[2:]
            zero, zeros = ir.Constant(i64, 0), ir.Constant(v4, [0] * 4)
            blocks, multiplies = [], []
            for group in range(VECTOR_GROUPS):
                counter = builder.add(broadcast(builder, first), ir.Constant(v4, [4 * group + j for j in range(4)]))
                blocks.append([counter, broadcast(builder, step_), zeros, zeros])
                multiplies.append(vector_mulhilo)
            for index in range(SCALAR_BLOCKS):
                blocks.append([builder.add(first, ir.Constant(i64, 4 * VECTOR_GROUPS + index)), step_, zero, zero])
                multiplies.append(scalar_mulhilo)
            widen = {vector_mulhilo: lambda k: broadcast(builder, k), scalar_mulhilo: lambda k: k}
            rounds(builder, blocks, k0, k1, multiplies, widen)
            order = ir.Constant(ir.VectorType(i32, 8), [0, 4, 1, 5, 2, 6, 3, 7])
            words = ir.Constant(ir.VectorType(i32, 16), [0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15])
            for group in range(VECTOR_GROUPS):  # four blocks' words, transposed to block after block
                c = blocks[group]
                both = builder.shuffle_vector(builder.shuffle_vector(c[0], c[1], order),
                                              builder.shuffle_vector(c[2], c[3], order), words)
                pointer = builder.bitcast(builder.gep(base, [ir.Constant(i64, 16 * group)]),
                                          ir.VectorType(i64, 16).as_pointer())
                builder.store(both, pointer, align=8)
            for index in range(SCALAR_BLOCKS):
                for word in range(4):
                    where = builder.gep(base, [ir.Constant(i64, 16 * VECTOR_GROUPS + 4 * index + word)])
                    builder.store(blocks[VECTOR_GROUPS + index][word], where, align=8)
            return context.get_dummy_value()
        return types.void(out, types.int64, types.uint64, types.uint64, types.uint64, types.uint64), codegen

    @intrinsic
    def philox_one(typingctx, c0, c1, c2, c3, key0, key1):
        """Philox4x64-10 of one counter (any four words): the four output words."""
        def codegen(context, builder, signature, args):
            block = list(args[:4])
            rounds(builder, [block], args[4], args[5], [scalar_mulhilo], {scalar_mulhilo: lambda k: k})
            return context.make_tuple(builder, signature.return_type, block)
        u64 = types.uint64
        return types.UniTuple(u64, 4)(u64, u64, u64, u64, u64, u64), codegen

    @jit
    def counters_kernel(counters, key0, key1, out):
        for row in range(counters.shape[0]):
            c = philox_one(counters[row, 0], counters[row, 1], counters[row, 2], counters[row, 3], key0, key1)
            for word in range(4):
                out[row, word] = c[word]

    @inline
    def fill_words(words, first, count, step, key0, key1):
        """Blocks ``first .. first + count - 1`` of the stream into words[0 .. 4 count) (and up to
        4 (GROUP_BLOCKS - 1) words beyond: scratch)."""
        for index in range(0, count, GROUP_BLOCKS):
            philox_group(words, 4 * index, np.uint64(first + index), step, key0, key1)

    @jit
    def stream_kernel(first, count, step, key0, key1, words):
        fill_words(words, first, count, step, key0, key1)

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
    def quantize_segment(x, first, count, noise, noise_first, out, out_first, scale, bound):
        """out[out_first + t] = clip(floor(x[first + t] scale + u(noise[noise_first + t])), -bound, bound) as
        int8 for t < count: one bucket's part of a piece.  (Unsigned indices: no negative-index wraparound, so
        LLVM vectorizes; no array views either, whose reference counts cost atomic calls.)"""
        for t in range(count):
            y = x[np.uint64(first + t)] * scale
            y = y + unit_like(noise[np.uint64(noise_first + t)], y)
            y = floor(y)
            if y > bound:
                y = bound
            if y < -bound:
                y = -bound
            out[np.uint64(out_first + t)] = np.int8(y)

    @jit
    def quantize_kernel(x, bits, norms, compute_norms, use_max, magnitude_mask, infinity, bucket_size, bound,
                        key0, key1, step, four_bits, stored, words, words32, levels):
        """Levels of x into ``stored`` (int8: 8 bits; uint8 nibble pairs: 4 bits), piece by piece; with
        ``compute_norms`` the norms too, bucket by bucket just ahead of the quantization."""
        n = x.shape[0]
        zero = bound - bound
        done = 0  # buckets whose norms are in `norms`
        for p0 in range(0, n, CHUNK):
            p1 = min(n, p0 + CHUNK)
            if compute_norms:
                last = (p1 - 1) // bucket_size
                while done <= last:
                    start = done * bucket_size
                    norms[done] = bucket_norm(x, bits, start, min(n, start + bucket_size), use_max,
                                              magnitude_mask, infinity)
                    done += 1
            # the next piece: read from memory while the rounds below compute (no demand loads then)
            for line in range(p1, min(n, p1 + CHUNK), LINE_BYTES // x.itemsize):
                prefetch(x, line)
            fill_words(words, p0 // 8, (p1 - p0 + 7) // 8, step, key0, key1)
            i = p0
            b = p0 // bucket_size
            while i < p1:
                stop = min(p1, (b + 1) * bucket_size)
                norm = norms[b]
                scale = bound / norm if norm > 0 else zero  # s / N in x's precision (N widened exactly)
                if four_bits:
                    quantize_segment(x, i, stop - i, words32, i - p0, levels, i - p0, scale, bound)
                else:
                    quantize_segment(x, i, stop - i, words32, i - p0, stored, i, scale, bound)
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

    _KERNELS = {"norms": norms_kernel, "quantize": quantize_kernel, "dequantize": dequantize_kernel,
                "counters": counters_kernel, "stream": stream_kernel}
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


def _quantize(flat, norms_, compute, use_max, bits, bucket_size, levels, key0, key1, step):
    n = flat.size
    stored = np.empty(n if bits == 8 else -(-n // 2), dtype=np.int8 if bits == 8 else np.uint8)
    words = np.empty(4 * (CHUNK // 8 + GROUP_BLOCKS), dtype=np.uint64)
    level_scratch = np.empty(CHUNK + 1, dtype=np.int8)
    value_bits, mask, infinity = _bits(flat)
    _KERNELS["quantize"](flat, value_bits, norms_, compute, bool(use_max), mask, infinity, int(bucket_size),
                         flat.dtype.type(levels), np.uint64(key0), np.uint64(key1), np.uint64(step), bits == 4,
                         stored, words, words.view(np.uint32), level_scratch)
    return stored


def quantize(flat, norms, bits, bucket_size, levels, key0, key1, step):
    """The stored levels of ``flat`` (int8[n] for 8 bits, uint8[ceil(n / 2)] for 4 bits) given its float32
    ``norms`` and the Philox key (key0, key1) = ``philox_key(seed, *stream_key)``: bitwise the levels of
    ``qsgd_quantize(..., norms=norms)``; None without numba."""
    if not AVAILABLE:
        return None
    flat, bucket_size = _flat(flat), int(bucket_size)
    _check(bits, bucket_size)
    norms = np.ascontiguousarray(norms, dtype=np.float32).reshape(-1)
    if norms.size != -(-flat.size // bucket_size):
        raise ValueError(f"expected {-(-flat.size // bucket_size)} norms, got {norms.size}")
    return _quantize(flat, norms, False, False, bits, bucket_size, levels, key0, key1, step)


def compress(flat, bits, bucket_size, use_max, levels, key0, key1, step):
    """(norms, stored) of ``flat`` in one pass (each bucket's norm computed just before its quantization):
    bitwise ``qsgd_quantize(flat, bits, bucket_size, "max" if use_max else "l2", ...)``; None without numba."""
    if not AVAILABLE:
        return None
    flat, bucket_size = _flat(flat), int(bucket_size)
    _check(bits, bucket_size)
    norms_ = np.empty(-(-flat.size // bucket_size), dtype=np.float32)
    return norms_, _quantize(flat, norms_, True, use_max, bits, bucket_size, levels, key0, key1, step)


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


# -- Philox, for the tests ---------------------------------------------------------------------------------------
def philox_blocks(counters, key0, key1):
    """Philox4x64-10 of each row of ``counters`` (m x 4 uint64), compiled scalar rounds: m x 4 uint64."""
    if not AVAILABLE:
        return None
    counters = np.ascontiguousarray(counters, dtype=np.uint64).reshape(-1, 4)
    out = np.empty_like(counters)
    _KERNELS["counters"](counters, np.uint64(key0), np.uint64(key1), out)
    return out


def stream_words(key0, key1, step, first_block, count):
    """Blocks ``first_block .. first_block + count - 1`` of the stream (key, step) through the interleaved
    vector and scalar rounds of the quantizer: count x 4 uint64."""
    if not AVAILABLE:
        return None
    words = np.empty(4 * (count + GROUP_BLOCKS), dtype=np.uint64)
    _KERNELS["stream"](int(first_block), int(count), np.uint64(step), np.uint64(key0), np.uint64(key1), words)
    return words[:4 * count].reshape(count, 4)
