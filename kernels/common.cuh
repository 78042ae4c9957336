// Shared definitions of mpiopt's CUDA kernels (pasted in place of #include "common.cuh" by the loader,
// so that NVRTC needs no include path).
#pragma once
typedef unsigned int u32;
typedef unsigned long long u64;
