#include "common.cuh"
// The local vector steps of consensus ADMM (mpiopt/kernels/admm.py holds their numpy twins).
//
// Every operation is an explicit IEEE round-to-nearest intrinsic (__dadd_rn, __dsub_rn, __dmul_rn,
// __ddiv_rn): the compiler may not contract a multiply and an add into a fused multiply-add, so each
// kernel rounds exactly as numpy does and gives the numpy twin's values bit for bit.  Inputs and outputs
// are contiguous float64 vectors of n entries; an output may be one of the inputs (each thread reads its
// entries before writing them).

// v - clip(v, -kappa, kappa), which is sign(v) max(|v| - kappa, 0); clip as numpy's (maximum, then
// minimum), so a NaN passes through as numpy's does.
__device__ __forceinline__ double admm_shrink(double v, double kappa) {
    double clipped = v < -kappa ? -kappa : v;
    clipped = clipped > kappa ? kappa : clipped;
    return __dsub_rn(v, clipped);
}

// Soft-thresholding, the prox of kappa ||.||_1: out_i = sign(v_i) max(|v_i| - kappa, 0).
extern "C" __global__ void soft_threshold(const double* v, double kappa, double* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = admm_shrink(v[i], kappa);
    }
}

// Over-relaxation: out_i = z_i + alpha (x_i - z_i) = alpha x_i + (1 - alpha) z_i.
extern "C" __global__ void relax(const double* x, const double* z, double alpha, double* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        double zi = z[i];
        out[i] = __dadd_rn(zi, __dmul_rn(alpha, __dsub_rn(x[i], zi)));
    }
}

// The fused z- and u-steps of an L1 penalty, in one pass over the all-reduced sums of xh_j + u_j:
//     z_i = S_kappa(sums_i / count)   for i < penalized   (the last n - penalized entries are left free:
//     z_i = sums_i / count            otherwise            an unpenalized intercept)
//     u_next_i = (u_i + xh_i) - z_i
extern "C" __global__ void z_u_update(const double* sums, double count, double kappa, long long penalized,
                                      const double* u, const double* x_relaxed, double* z, double* u_next,
                                      long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        double mean = __ddiv_rn(sums[i], count);
        double zi = i < penalized ? admm_shrink(mean, kappa) : mean;
        double ui = __dadd_rn(u[i], x_relaxed[i]);
        z[i] = zi;
        u_next[i] = __dsub_rn(ui, zi);
    }
}
