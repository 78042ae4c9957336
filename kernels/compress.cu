#include "common.cuh"
// Kernels of the gradient compressors: QSGD (8 and 4 bits, stochastic rounding from Philox4x64-10),
// sign bit-packing, Top-K compaction and the scatter-add decode, fp16 and bf16 conversions.
// The numpy twins are in mpiopt/kernels/compress.py and mpiopt/kernels/philox.py.
//
// Bitwise contract with the twins: every floating-point operation whose result is compared bit for bit
// is written with an explicitly rounded intrinsic (mul_rn, add_rn, div_rn below: no FMA contraction), in
// the order the numpy twin computes it.  The per-element logic is in MPIOPT_HD functions so that the
// same text also compiles for the host (the tests build it with nvcc as a host library and compare it with
// numpy on the CPU); the __global__ kernels are thin loops around them.
//
// Subnormals: CuPy compiles every kernel with -ftz=true, appended after the caller's options (so a
// --ftz=false in NVRTC_OPTIONS cannot undo it), and under it every float32 instruction the compiler emits
// (add, mul, div, cvt, setp, neg) flushes subnormal inputs and results to zero, which numpy never does.  So
// the float32 arithmetic, conversions, comparisons and negations below are inline PTX without .ftz, or
// integer operations on the bits: the results are the same whatever -ftz the compiler was given
// (float64 instructions never flush).  The exception is atomicAdd on float32 (scatter_add), which the
// hardware always flushes.
//
// Launch: one thread per element, per group of VEC elements or per lane of a bucket, as noted at each
// kernel; 1-D grid; n is a long long.

#define MPIOPT_HD __host__ __device__ inline

// ---- explicitly rounded arithmetic ------------------------------------------------------------
MPIOPT_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return a * b;
#endif
}
MPIOPT_HD double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
MPIOPT_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return a + b;
#endif
}
MPIOPT_HD double add_rn(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
MPIOPT_HD float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    float r;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return a / b;
#endif
}
MPIOPT_HD double div_rn(double a, double b) {
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
MPIOPT_HD float floor_of(float a) {
#ifdef __CUDA_ARCH__
    float r;
    asm("cvt.rmi.f32.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
#else
    return floorf(a);
#endif
}
MPIOPT_HD double floor_of(double a) { return floor(a); }
MPIOPT_HD double sqrt_rn(double a) {
#ifdef __CUDA_ARCH__
    return __dsqrt_rn(a);
#else
    return sqrt(a);
#endif
}
MPIOPT_HD float to_float_rn(double a) {
#ifdef __CUDA_ARCH__
    float r;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(a));
    return r;
#else
    return (float)a;
#endif
}
// Exact widening of a float32 (its subnormals included); a float64 passes through.
MPIOPT_HD double to_double(float a) {
#ifdef __CUDA_ARCH__
    double r;
    asm("cvt.f64.f32 %0, %1;" : "=d"(r) : "f"(a));
    return r;
#else
    return (double)a;
#endif
}
MPIOPT_HD double to_double(double a) { return a; }
// A float32 as T (float or double), exactly.
MPIOPT_HD float as_type(float a, float) { return a; }
MPIOPT_HD double as_type(float a, double) { return to_double(a); }

// The bits of a float32 and back (a move: no instruction that could flush).
MPIOPT_HD u32 float_bits(float v) {
    union { float f; u32 u; } pun;
    pun.f = v;
    return pun.u;
}
MPIOPT_HD float bits_float(u32 u) {
    union { float f; u32 u; } pun;
    pun.u = u;
    return pun.f;
}
// x >= 0 and x > 0 as numpy has them (false for NaN; -0 >= 0; a negative subnormal < 0): on the bits for
// float32, whose device comparisons flush under -ftz=true.
MPIOPT_HD bool nonnegative(float x) {
    u32 u = float_bits(x), magnitude = u & 0x7FFFFFFFu;
    return magnitude <= 0x7F800000u && (!(u >> 31) || magnitude == 0);
}
MPIOPT_HD bool nonnegative(double x) { return x >= 0.0; }
MPIOPT_HD bool positive(float x) {
    u32 u = float_bits(x);
    return !(u >> 31) && u != 0 && u <= 0x7F800000u;
}
MPIOPT_HD bool positive(double x) { return x > 0.0; }
// -x, the sign bit flipped (float32: also for a subnormal)
MPIOPT_HD float negated(float x) { return bits_float(float_bits(x) ^ 0x80000000u); }
MPIOPT_HD double negated(double x) { return -x; }

// ---- Philox4x64-10 (Salmon, Moraes, Dror and Shaw 2011; Random123's philox4x64_R(10, ...)) --------
// numpy.random.Philox is the same generator: the numpy twin draws whole buffers through it.
// The high 64 bits of a 64 x 64-bit product: __umul64hi on the device, 32-bit halves on the host.
MPIOPT_HD u64 mulhi64(u64 a, u64 b) {
#ifdef __CUDA_ARCH__
    return __umul64hi(a, b);
#else
    u64 a_low = a & 0xFFFFFFFFull, a_high = a >> 32, b_low = b & 0xFFFFFFFFull, b_high = b >> 32;
    u64 low_low = a_low * b_low, low_high = a_low * b_high, high_low = a_high * b_low;
    u64 cross = (low_low >> 32) + (low_high & 0xFFFFFFFFull) + (high_low & 0xFFFFFFFFull);
    return a_high * b_high + (low_high >> 32) + (high_low >> 32) + (cross >> 32);
#endif
}

MPIOPT_HD void philox4x64_10(u64 c[4], u64 k0, u64 k1) {
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += 0x9E3779B97F4A7C15ull;
            k1 += 0xBB67AE8584CAA73Bull;
        }
        u64 high0 = mulhi64(0xD2E7470EE14C6C93ull, c[0]), low0 = 0xD2E7470EE14C6C93ull * c[0];
        u64 high1 = mulhi64(0xCA5A826395121157ull, c[2]), low1 = 0xCA5A826395121157ull * c[2];
        u64 next0 = high1 ^ c[1] ^ k0;
        u64 next2 = high0 ^ c[3] ^ k1;
        c[0] = next0;
        c[1] = low1;
        c[2] = next2;
        c[3] = low0;
    }
}

// The four 64-bit words of block `block` of the stream (key, step): counter (block, step, 0, 0).  They hold
// elements 8 block .. 8 block + 7: element i is the low (even i) or high (odd i) half of word (i / 2) % 4.
MPIOPT_HD void philox_block(u64 block, u64 step, u64 k0, u64 k1, u64 words[4]) {
    words[0] = block;
    words[1] = step;
    words[2] = 0;
    words[3] = 0;
    philox4x64_10(words, k0, k1);
}
MPIOPT_HD u32 philox_lane(const u64 words[4], int lane) {  // lane = i % 8
    u64 word = words[lane / 2];
    return (lane % 2) ? (u32)(word >> 32) : (u32)word;
}
// Element i on its own (a whole block for one element: for tests and scattered use).
MPIOPT_HD u32 philox_element(u64 k0, u64 k1, u64 step, u64 i) {
    u64 words[4];
    philox_block(i / 8, step, k0, k1, words);
    return philox_lane(words, (int)(i % 8));
}

// A 32-bit element as a uniform number in [0, 1): (word >> 8) 2^-24, exact in float32 and float64.
MPIOPT_HD float unit_float(u32 word) { return (float)(word >> 8) * 5.9604644775390625e-08f; }
MPIOPT_HD double unit_double(u32 word) { return (double)(word >> 8) * 5.9604644775390625e-08; }
MPIOPT_HD float unit_of(u32 word, float) { return unit_float(word); }
MPIOPT_HD double unit_of(u32 word, double) { return unit_double(word); }

// ---- QSGD's noise: triple32 (Wellons 2018, hash-prospector) of (i mod 2^32) XOR seed ---------------------------
// The definition and its constants: mpiopt/kernels/hash32.py (the numpy reference the tests hold this to).
MPIOPT_HD u32 hash32(u32 x) {
    x ^= x >> 17;
    x *= 0xED5AD4BBu;
    x ^= x >> 11;
    x *= 0xAC4C1B51u;
    x ^= x >> 15;
    x *= 0x31848BABu;
    x ^= x >> 14;
    return x;
}
MPIOPT_HD u32 hashed_element(const u32* seeds, u64 i) { return hash32((u32)i ^ seeds[i >> 32]); }

// Raw Philox blocks: counters[4 i .. 4 i + 3] -> out[4 i .. 4 i + 3]; one thread per block.
extern "C" __global__ void philox4x64_10_blocks(const u64* counters, u64 k0, u64 k1, u64* out, long long blocks) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < blocks) {
        u64 c[4] = {counters[4 * i], counters[4 * i + 1], counters[4 * i + 2], counters[4 * i + 3]};
        philox4x64_10(c, k0, k1);
        for (int j = 0; j < 4; ++j) out[4 * i + j] = c[j];
    }
}

// Uniform numbers u_0 .. u_{n-1} of the stream (key, step); one thread per block of eight.
template <typename T>
MPIOPT_HD void philox_uniform_block(u64 k0, u64 k1, u64 step, T* out, long long n, long long block) {
    u64 words[4];
    philox_block((u64)block, step, k0, k1, words);
    for (int lane = 0; lane < 8 && 8 * block + lane < n; ++lane)
        out[8 * block + lane] = unit_of(philox_lane(words, lane), T());
}
template <typename T>
__device__ void philox_uniform(u64 k0, u64 k1, u64 step, T* out, long long n) {
    long long block = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (8 * block < n) philox_uniform_block(k0, k1, step, out, n, block);
}
extern "C" __global__ void philox_uniform_f32(u64 k0, u64 k1, u64 step, float* out, long long n) {
    philox_uniform<float>(k0, k1, step, out, n);
}
extern "C" __global__ void philox_uniform_f64(u64 k0, u64 k1, u64 step, double* out, long long n) {
    philox_uniform<double>(k0, k1, step, out, n);
}


// ---- several elements per thread, 16-byte loads and stores --------------------------------------------------
// The elementwise kernels (fp16/bf16 conversions, sign_unpack, qsgd_dequantize) give each thread VEC = 8
// consecutive elements: where both arrays start on a 16-byte boundary and the 8 are all inside, they move
// as 16-byte vectors (float4, double2, uint4: 32-64 bytes in flight per thread instead of 4-8, what a
// device at several TB/s needs to cover its latency); otherwise (a misaligned view, the last partial group)
// one element at a time.  The per-element arithmetic is the same either way.  Launch: ceil(n / VEC) threads.
#define VEC 8
__device__ inline bool aligned16(const void* p) { return ((unsigned long long)p & 15ull) == 0; }
__device__ inline void load8(const float* p, float* v) {
    float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ inline void load8(const double* p, double* v) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        double2 a = reinterpret_cast<const double2*>(p)[k];
        v[2 * k] = a.x; v[2 * k + 1] = a.y;
    }
}
__device__ inline void load8(const unsigned short* p, unsigned short* v) {
    uint4 a = reinterpret_cast<const uint4*>(p)[0];
    u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        v[2 * k] = (unsigned short)(w[k] & 0xFFFFu);
        v[2 * k + 1] = (unsigned short)(w[k] >> 16);
    }
}
__device__ inline void store8(float* p, const float* v) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ inline void store8(double* p, const double* v) {
#pragma unroll
    for (int k = 0; k < 4; ++k) reinterpret_cast<double2*>(p)[k] = make_double2(v[2 * k], v[2 * k + 1]);
}
__device__ inline void store8(unsigned short* p, const unsigned short* v) {
    reinterpret_cast<uint4*>(p)[0] = make_uint4((u32)v[0] | ((u32)v[1] << 16), (u32)v[2] | ((u32)v[3] << 16),
                                                (u32)v[4] | ((u32)v[5] << 16), (u32)v[6] | ((u32)v[7] << 16));
}
// out[i] = f(x[i]) for the thread's VEC elements.
template <typename In, typename Out, typename F>
__device__ inline void map_elements(const In* x, Out* out, long long n, F f) {
    long long i = VEC * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    if (i + VEC <= n && aligned16(x) && aligned16(out)) {
        In v[VEC];
        Out r[VEC];
        load8(x + i, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) r[k] = f(v[k]);
        store8(out + i, r);
    } else {
        for (long long j = i; j < n && j < i + VEC; ++j) out[j] = f(x[j]);
    }
}
// out[i] = f(i) for the thread's VEC elements (decoders that read packed inputs).
template <typename Out, typename F>
__device__ inline void generate_elements(Out* out, long long n, F f) {
    long long i = VEC * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    if (i + VEC <= n && aligned16(out)) {
        Out r[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) r[k] = f(i + k);
        store8(out + i, r);
    } else {
        for (long long j = i; j < n && j < i + VEC; ++j) out[j] = f(j);
    }
}

// ---- QSGD ------------------------------------------------------------------------------------------
// Bucket b holds elements [b bucket, min(n, (b + 1) bucket)).  Norms are float32, rounded up by margin:
//   l2:  float32(sqrt(total) margin) in float64, where element t of the bucket adds x_t x_t to lane t % 16
//        (each lane a float64 sum in element order) and total = ((lane 0 + lane 1) + lane 2) + ... + lane 15;
//   max: float32(max_t |x_t| margin) in float64 (NaN propagates).
#define QSGD_LANES 16
template <typename T>
MPIOPT_HD float qsgd_norm_of_bucket(const T* x, long long n, long long bucket, long long b, int use_max,
                                    double margin) {
    long long start = b * bucket, stop = start + bucket < n ? start + bucket : n;
    double total = 0.0;
    if (use_max) {
        for (long long i = start; i < stop; ++i) {
            double v = to_double(x[i]);
            double a = v < 0.0 ? -v : v;
            if (a > total || a != a) total = a;
            if (total != total) break;
        }
        return to_float_rn(mul_rn(total, margin));
    }
    double lane[QSGD_LANES];
    for (int j = 0; j < QSGD_LANES; ++j) lane[j] = 0.0;
    for (long long t = start; t < stop; t += QSGD_LANES) {
#pragma unroll
        for (int j = 0; j < QSGD_LANES; ++j) {
            if (t + j < stop) {
                double v = to_double(x[t + j]);
                lane[j] = add_rn(lane[j], mul_rn(v, v));
            }
        }
    }
    total = lane[0];
    for (int j = 1; j < QSGD_LANES; ++j) total = add_rn(total, lane[j]);
    return to_float_rn(mul_rn(sqrt_rn(total), margin));
}

// The level of one element: scale = levels / norm (0 where norm <= 0), y = x scale + u, clipped floor(y).
template <typename T>
MPIOPT_HD int qsgd_level(T x, float norm, int levels, T u) {
    T scale = positive(norm) ? div_rn((T)levels, as_type(norm, T())) : (T)0;
    T y = floor_of(add_rn(mul_rn(x, scale), u));
    T bound = (T)levels;
    if (y > bound) y = bound;
    if (y < -bound) y = -bound;
    return (int)y;
}

// Quantize elements 8 g .. 8 g + 7 (one Philox block) into `stored`: int8 levels (bits 8) or two signed
// nibbles per byte (bits 4: element 2 j in the low nibble of byte j, a missing last element is 0).
// Quantize elements 8 g .. 8 g + 7 into `stored`: int8 levels (bits 8) or two signed nibbles per byte (bits 4:
// element 2 j in the low nibble of byte j, a missing last element is 0).  The noise: u_i of the hashed stream
// (hash32 below), seeds[i >> 32] the seed of element i's 2^32 elements.
template <typename T>
MPIOPT_HD void qsgd_quantize_group(const T* x, const float* norms, long long n, long long bucket, int bits,
                                   int levels, const u32* seeds, long long g, unsigned char* stored) {
    int level[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int lane = 0; lane < 8; ++lane) {
        long long i = 8 * g + lane;
        if (i < n) level[lane] = qsgd_level(x[i], norms[i / bucket], levels, unit_of(hashed_element(seeds, (u64)i), T()));
    }
    for (int lane = 0; lane < 8; ++lane) {
        long long i = 8 * g + lane;
        if (bits == 8) {
            if (i < n) stored[i] = (unsigned char)(signed char)level[lane];
        } else if (lane % 2 == 0 && i < n) {
            stored[i / 2] = (unsigned char)((level[lane] & 0x0F) | ((level[lane + 1] & 0x0F) << 4));
        }
    }
}

template <typename T>
MPIOPT_HD T qsgd_decoded(const unsigned char* stored, const float* norms, long long bucket, int bits, int levels,
                         long long i) {
    int level;
    if (bits == 8) {
        level = (signed char)stored[i];
    } else {
        int nibble = (stored[i / 2] >> (4 * (int)(i % 2))) & 0x0F;
        level = nibble >= 8 ? nibble - 16 : nibble;
    }
    T step = as_type(div_rn(norms[i / bucket], (float)levels), T());
    return mul_rn((T)level, step);
}

// QSGD_LANES (16) threads per bucket, thread j of a bucket summing its lane j (elements start + j, + 16, ...,
// in order) as qsgd_norm_of_bucket does, so neighbouring threads read neighbouring elements (coalesced); the
// bucket's first thread then adds the lanes in order 0 .. 15 (the same float64 operations in the same order:
// bitwise the one-thread version and the twin).  The max norm: each lane's max, then the max of the lanes
// (NaN if any is NaN).  Launch: QSGD_LANES threads per bucket (16 buckets per block of 256).
template <typename T>
__device__ void qsgd_norms(const T* x, long long n, long long bucket, int use_max, double margin, float* norms) {
    long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long b = thread / QSGD_LANES;
    int j = (int)(thread % QSGD_LANES);
    long long start = b * bucket;
    bool live = start < n;
    long long stop = live ? (start + bucket < n ? start + bucket : n) : start;
    double lane = 0.0;
    for (long long t = start + j; t < stop; t += QSGD_LANES) {
        double v = to_double(x[t]);
        if (use_max) {
            double a = v < 0.0 ? -v : v;
            if (a > lane || a != a) lane = a;
            if (lane != lane) break;
        } else {
            lane = add_rn(lane, mul_rn(v, v));
        }
    }
    // Lanes 1 .. 15 to lane 0 of the 16-thread group, one at a time, in order (every thread of the warp takes
    // part in each shuffle; blockDim is a multiple of 16, so a group never straddles two warps).
    double total = lane;
    for (int k = 1; k < QSGD_LANES; ++k) {
        double other = __shfl_sync(0xFFFFFFFFu, lane, k, QSGD_LANES);
        if (use_max) {
            if (other > total || other != other) total = total != total ? total : other;
        } else {
            total = add_rn(total, other);
        }
    }
    if (live && j == 0) norms[b] = use_max ? to_float_rn(mul_rn(total, margin))
                                           : to_float_rn(mul_rn(sqrt_rn(total), margin));
}
extern "C" __global__ void qsgd_norms_f32(const float* x, long long n, long long bucket, int use_max, double margin,
                                          float* norms) {
    qsgd_norms<float>(x, n, bucket, use_max, margin, norms);
}
extern "C" __global__ void qsgd_norms_f64(const double* x, long long n, long long bucket, int use_max,
                                          double margin, float* norms) {
    qsgd_norms<double>(x, n, bucket, use_max, margin, norms);
}

// One thread per group of eight elements (one Philox block).
template <typename T>
__device__ void qsgd_quantize(const T* x, const float* norms, long long n, long long bucket, int bits, int levels,
                              const u32* seeds, unsigned char* stored) {
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (8 * g < n) qsgd_quantize_group(x, norms, n, bucket, bits, levels, seeds, g, stored);
}
extern "C" __global__ void qsgd_quantize_f32(const float* x, const float* norms, long long n, long long bucket,
                                             int bits, int levels, const u32* seeds, unsigned char* stored) {
    qsgd_quantize<float>(x, norms, n, bucket, bits, levels, seeds, stored);
}
extern "C" __global__ void qsgd_quantize_f64(const double* x, const float* norms, long long n, long long bucket,
                                             int bits, int levels, const u32* seeds, unsigned char* stored) {
    qsgd_quantize<double>(x, norms, n, bucket, bits, levels, seeds, stored);
}

// VEC elements per thread (see map_elements).
template <typename T>
__device__ void qsgd_dequantize(const unsigned char* stored, const float* norms, long long n, long long bucket,
                                int bits, int levels, T* out) {
    generate_elements(out, n, [=](long long i) { return qsgd_decoded<T>(stored, norms, bucket, bits, levels, i); });
}
extern "C" __global__ void qsgd_dequantize_f32(const unsigned char* stored, const float* norms, long long n,
                                               long long bucket, int bits, int levels, float* out) {
    qsgd_dequantize<float>(stored, norms, n, bucket, bits, levels, out);
}
extern "C" __global__ void qsgd_dequantize_f64(const unsigned char* stored, const float* norms, long long n,
                                               long long bucket, int bits, int levels, double* out) {
    qsgd_dequantize<double>(stored, norms, n, bucket, bits, levels, out);
}

// ---- sign: bit 7 - (i % 8) of byte i / 8 is 1 where x_i >= 0 (np.packbits order) -------------------
template <typename T>
MPIOPT_HD unsigned char sign_byte(const T* x, long long n, long long j) {
    unsigned int byte = 0;
    for (int t = 0; t < 8; ++t) {
        long long i = 8 * j + t;
        if (i < n && nonnegative(x[i])) byte |= 1u << (7 - t);
    }
    return (unsigned char)byte;
}
template <typename T>
MPIOPT_HD T sign_value(const unsigned char* bits, T magnitude, long long i) {
    return ((bits[i / 8] >> (7 - (int)(i % 8))) & 1) ? magnitude : negated(magnitude);
}

// One pass over x: the bits and the scale's float64 partial sums.  Each warp takes SIGN_WORDS words of 32
// consecutive elements; for each word every lane reads one element (coalesced), __ballot_sync gathers the 32
// signs, and lanes 0-3 write the word's four bytes, bit-reversed into np.packbits order (element 8 b + t of
// byte b at bit 7 - t); every lane adds |x| (l1) or x^2 (l2, square != 0) in float64, then the warp's and the
// block's sums go to partials[blockIdx.x] (the caller adds the partials: the scale is a reduction, equal to
// the twin's to rounding).  Launch: 32 threads per SIGN_WORDS * 32 elements; partials: one per block, zeroed.
#define SIGN_WORDS 8
template <typename T>
__device__ void sign_pack_pass(const T* x, long long n, int square, unsigned char* bits, double* partials) {
    __shared__ double warp_sums[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    long long base = (((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * 32 * SIGN_WORDS;
    long long nbytes = (n + 7) / 8;
    double sum = 0.0;
    for (int w = 0; w < SIGN_WORDS; ++w) {
        long long i = base + 32 * w + lane;
        bool inside = i < n;
        T v = inside ? x[i] : (T)0;
        unsigned int mask = __ballot_sync(0xFFFFFFFFu, inside && nonnegative(v));
        if (inside) {
            double d = to_double(v);
            sum = add_rn(sum, square ? mul_rn(d, d) : (d < 0.0 ? -d : d));
        }
        if (lane < 4) {
            long long byte = (base + 32 * w) / 8 + lane;
            if (byte < nbytes) bits[byte] = (unsigned char)(__brev(mask >> (8 * lane)) >> 24);
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) sum = add_rn(sum, __shfl_down_sync(0xFFFFFFFFu, sum, offset));
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int k = 0; k < (int)((blockDim.x + 31) / 32); ++k) total = add_rn(total, warp_sums[k]);
        partials[blockIdx.x] = total;
    }
}
extern "C" __global__ void sign_pack_f32(const float* x, long long n, int square, unsigned char* bits,
                                         double* partials) {
    sign_pack_pass(x, n, square, bits, partials);
}
extern "C" __global__ void sign_pack_f64(const double* x, long long n, int square, unsigned char* bits,
                                         double* partials) {
    sign_pack_pass(x, n, square, bits, partials);
}
// VEC elements (one byte of bits) per thread; the scale is read on the device (scale[0], float32).
extern "C" __global__ void sign_unpack_f32(const unsigned char* bits, const float* scale, long long n, float* out) {
    float magnitude = scale[0];
    generate_elements(out, n, [=](long long i) { return sign_value(bits, magnitude, i); });
}
extern "C" __global__ void sign_unpack_f64(const unsigned char* bits, const float* scale, long long n, double* out) {
    double magnitude = to_double(scale[0]);
    generate_elements(out, n, [=](long long i) { return sign_value(bits, magnitude, i); });
}

// ---- Top-K -------------------------------------------------------------------------------------------
// Compaction of the selected elements: where take[i], position pos[i] - 1 (pos: inclusive prefix sum of
// take) gets the value and the index.  One thread per element.
template <typename T>
MPIOPT_HD void topk_compact_one(const T* x, const bool* take, const long long* pos, T* values, int* indices,
                                long long i) {
    if (take[i]) {
        long long p = pos[i] - 1;
        values[p] = x[i];
        indices[p] = (int)i;
    }
}
template <typename T>
__device__ void topk_compact(const T* x, const bool* take, const long long* pos, long long n, T* values,
                             int* indices) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) topk_compact_one(x, take, pos, values, indices, i);
}
extern "C" __global__ void topk_compact_f32(const float* x, const bool* take, const long long* pos, long long n,
                                            float* values, int* indices) {
    topk_compact<float>(x, take, pos, n, values, indices);
}
extern "C" __global__ void topk_compact_f64(const double* x, const bool* take, const long long* pos, long long n,
                                            double* values, int* indices) {
    topk_compact<double>(x, take, pos, n, values, indices);
}

// out[indices[j]] += values[j] (atomic: repeated indices add up, in no fixed order).  One thread per entry.
extern "C" __global__ void scatter_add_f32(float* out, const int* indices, const float* values, long long k) {
    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < k) atomicAdd(out + indices[j], values[j]);
}
extern "C" __global__ void scatter_add_f64(double* out, const int* indices, const double* values, long long k) {
    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < k) atomicAdd(out + indices[j], values[j]);
}

// ---- fp16: IEEE half, round to nearest even (the hardware conversion) -----------------------------
__device__ inline unsigned short half_bits(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}
__device__ inline unsigned short half_bits(double v) {
    unsigned short h;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(v));
    return h;
}
__device__ inline float half_to_float(unsigned short h) {
    float v;
    asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(h));
    return v;
}
// VEC elements per thread (see map_elements).
extern "C" __global__ void to_fp16_f32(const float* x, unsigned short* out, long long n) {
    map_elements(x, out, n, [](float v) { return half_bits(v); });
}
extern "C" __global__ void to_fp16_f64(const double* x, unsigned short* out, long long n) {
    map_elements(x, out, n, [](double v) { return half_bits(v); });
}
extern "C" __global__ void from_fp16_f32(const unsigned short* h, float* out, long long n) {
    map_elements(h, out, n, [](unsigned short v) { return half_to_float(v); });
}
extern "C" __global__ void from_fp16_f64(const unsigned short* h, double* out, long long n) {
    map_elements(h, out, n, [](unsigned short v) { return to_double(half_to_float(v)); });
}

// ---- bf16: the upper half of the float32 bits, rounded to nearest even; NaN -> quiet NaN, sign kept ----
MPIOPT_HD unsigned short bf16_of_bits(u32 bits) {
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (unsigned short)(0x7FC0u | ((bits >> 16) & 0x8000u));
    return (unsigned short)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}
// VEC elements per thread (see map_elements).
extern "C" __global__ void to_bf16_f32(const float* x, unsigned short* out, long long n) {
    map_elements(x, out, n, [](float v) { return bf16_of_bits(float_bits(v)); });
}
extern "C" __global__ void to_bf16_f64(const double* x, unsigned short* out, long long n) {
    map_elements(x, out, n, [](double v) { return bf16_of_bits(float_bits(to_float_rn(v))); });
}
extern "C" __global__ void from_bf16_f32(const unsigned short* b, float* out, long long n) {
    map_elements(b, out, n, [](unsigned short v) { return bits_float((u32)v << 16); });
}
extern "C" __global__ void from_bf16_f64(const unsigned short* b, double* out, long long n) {
    map_elements(b, out, n, [](unsigned short v) { return to_double(bits_float((u32)v << 16)); });
}
