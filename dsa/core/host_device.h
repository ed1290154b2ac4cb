// DSA_HD marks functions written once for the CPU reference and the CUDA kernels (SPEC.md inv. 16):
// the host compiler sees plain inline functions, nvcc sees __host__ __device__ ones.
#pragma once

#if defined(__CUDACC__)
#define DSA_HD __host__ __device__ __forceinline__
#else
#define DSA_HD inline
#endif
