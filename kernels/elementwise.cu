#include "common.cuh"
// Soft-thresholding: out_i = sign(v_i) max(|v_i| - kappa, 0).
extern "C" __global__ void soft_threshold(const double* v, double kappa, double* out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        double a = fabs(v[i]) - kappa;
        out[i] = a > 0.0 ? copysign(a, v[i]) : 0.0;
    }
}
