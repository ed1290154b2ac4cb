// The indexer's 128-point Hadamard transform on the GPU (SPEC.md §8.5 step 3), Sylvester order.
//
// One warp per row, lane l holding x[4l .. 4l+3] in registers: the butterflies of width 1 and 2
// (index bits 0-1) stay inside a lane, those of width 4..64 (bits 2-6 = lane bits 0-4) pair lanes
// through xor-shuffles. fp32 math; sums of bf16 inputs are exact in fp32 unless a row spans more
// than ~2^16 in magnitude, and the final scale and bf16 rounding keep the result within 1 bf16 ulp
// of the correctly rounded value. No shared memory, one 8-byte load and store per lane.
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/hadamard_warp.cuh"
#include "dsa/kernels/hadamard/hadamard.h"

namespace dsa::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;

// One warp computes row r: y[r, 0:128] = 128^-1/2 * H_128 x[r, 0:128]. `vec` = both pointers
// 8-byte aligned (then each lane moves its 4 values with one 8-byte access). y may alias x: every
// lane has loaded its values before the first shuffle and stores after the last one.
__global__ void hadamard_kernel(const bf16* x, bf16* y, int64_t rows, bool vec) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t r = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // whole warps exit together: rows are warp-uniform
  const int64_t base = r * kHadamardDim + 4 * lane;
  bf16 in[4];
  if (vec) {
    *reinterpret_cast<uint2*>(in) = *reinterpret_cast<const uint2*>(x + base);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) in[k] = x[base + k];
  }
  float v[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = bf16_to_float(in[k]);
  hadamard128_warp(v, lane);
  bf16 out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) out[k] = float_to_bf16(v[k]);
  if (vec) {
    *reinterpret_cast<uint2*>(y + base) = *reinterpret_cast<const uint2*>(out);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) y[base + k] = out[k];
  }
}

}  // namespace

Status hadamard_cuda(const HadamardParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_rows == 0) return ok_status();
  const bool vec = cuda::is_aligned(p.x, 8) && cuda::is_aligned(p.y, 8);
  const int64_t blocks = (int64_t{p.num_rows} + kWarpsPerBlock - 1) / kWarpsPerBlock;
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(kWarpsPerBlock * 32),
                                     size_t(0), cuda::current_stream()},
                   hadamard_kernel, p.x, p.y, p.num_rows, vec));
  return cuda::launch_error("hadamard");
}

}  // namespace dsa::kernels
