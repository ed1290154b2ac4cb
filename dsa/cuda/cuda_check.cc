#include "dsa/cuda/cuda_check.h"

#include <fmt/format.h>

namespace dsa::cuda {

Status cuda_status(cudaError_t err, const char* call, const char* file, int line) {
  return internal_error(fmt::format("{} failed: {} ({}) at {}:{}", call, cudaGetErrorName(err),
                                    cudaGetErrorString(err), file, line));
}

}  // namespace dsa::cuda
