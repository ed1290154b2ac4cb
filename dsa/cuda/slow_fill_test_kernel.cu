#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/slow_fill_test_kernel.h"
#include "dsa/cuda/stream.h"

namespace dsa::cuda::test_kernels {

namespace {

__global__ void slow_fill_kernel(int32_t* words, size_t count, int32_t value, int spin_us) {
  pdl_wait();
  pdl_trigger();  // the successor may start now, long before the writes below
  if (threadIdx.x == 0) {
    const long long start = clock64();
    // The SM clock runs at 2 GHz at most: 2000 cycles take at least a microsecond.
    while (clock64() - start < 2000LL * spin_us) {
    }
  }
  __syncthreads();
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) words[i] = value;
}

}  // namespace

Status launch_slow_fill(int32_t* words, size_t count, int32_t value, int spin_us) {
  DSA_CUDA_RETURN_IF_ERROR(launch(LaunchShape{dim3(1), dim3(256), 0, current_stream()},
                                  slow_fill_kernel, words, count, value, spin_us));
  return ok_status();
}

}  // namespace dsa::cuda::test_kernels
