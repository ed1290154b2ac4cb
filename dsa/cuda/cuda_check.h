// CUDA runtime failures become Status (Internal) naming the call, the error and the location.
// Every CUDA API call and every launch in dsa goes through these macros.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "dsa/core/status.h"

namespace dsa::cuda {
Status cuda_status(cudaError_t err, const char* call, const char* file, int line);
}  // namespace dsa::cuda

#define DSA_CUDA_RETURN_IF_ERROR(call)                                           \
  do {                                                                           \
    cudaError_t dsa_cuda_err_ = (call);                                          \
    if (dsa_cuda_err_ != cudaSuccess) {                                          \
      return ::dsa::cuda::cuda_status(dsa_cuda_err_, #call, __FILE__, __LINE__); \
    }                                                                            \
  } while (0)
