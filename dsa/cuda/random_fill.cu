#include <cuda_runtime.h>

#include <algorithm>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/random_fill.h"
#include "dsa/cuda/stream.h"

namespace dsa::cuda {

namespace {

// Grid-stride over the elements: each is a pure function of (spec.key, i), so any grid and any
// order write the same bytes as the host loop (runtime/random_fill.cc).
__global__ void random_fill_kernel(void* dst, uint64_t count, FillSpec spec) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    fill_element(spec, dst, i);
  }
}

}  // namespace

Status random_fill_async(void* dst, size_t count, const FillSpec& spec) {
  if (count == 0) return ok_status();
  if (dst == nullptr) return invalid_argument("random_fill: null destination");
  constexpr int kThreads = 256;
  // Enough blocks to fill the GPU a few times over; the grid-stride loop covers the rest.
  const uint64_t blocks = std::min<uint64_t>((count + kThreads - 1) / kThreads, 132 * 32);
  DSA_CUDA_RETURN_IF_ERROR(cuda::launch(
      cuda::LaunchShape{dim3(unsigned(blocks)), dim3(kThreads), size_t(0), current_stream()},
      random_fill_kernel, dst, count, spec));
  DSA_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

}  // namespace dsa::cuda
