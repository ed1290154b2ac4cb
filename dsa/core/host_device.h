// DSA_HD marks functions written once for the CPU reference and the CUDA kernels (SPEC.md inv. 16):
// the host compiler sees plain inline functions, nvcc sees __host__ __device__ ones.
#pragma once

#if defined(__CUDACC__)
#define DSA_HD __host__ __device__ __forceinline__
#else
#define DSA_HD inline
#endif

// `#pragma unroll` in DSA_HD code: nvcc unrolls (so a small array indexed by the loop stays in
// registers); the host compiler (nvcc's host pass too), which would warn about the pragma, sees
// nothing.
#if defined(__CUDA_ARCH__)
#define DSA_HD_UNROLL _Pragma("unroll")
#else
#define DSA_HD_UNROLL
#endif
