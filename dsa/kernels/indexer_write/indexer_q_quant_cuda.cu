// Indexer query quantisation on the GPU (SPEC.md §8.5, §2.1): one warp per block of 128 values;
// the per-warp core (indexer_q_quant_warp.cuh, shared with indexer_query) keeps fp32 arithmetic
// through the _rn intrinsics so nvcc cannot contract what the CPU reference rounds twice.
#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/grid_stride.h"
#include "dsa/kernels/common/indexer_q_quant_warp.cuh"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"

namespace dsa::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kIndexDim = 128;

// One warp per block of 128 values (lane l owns values 4l..4l+3): the §2.1 scale and e4m3 codes
// exactly as quantize_block_pow2 (indexer_q_quant_warp.cuh).
__global__ void indexer_q_quant_kernel(IndexerQuantParams p) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t b = int64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32; b < p.num_blocks;
       b += warps) {
    float x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = bf16_to_float(p.q[b * kIndexDim + lane * 4 + j]);
    uint8_t codes[4];
    const int32_t e = indexer_q_quant_warp(x, codes);
#pragma unroll
    for (int j = 0; j < 4; ++j) p.q8[b * kIndexDim + lane * 4 + j] = codes[j];
    if (lane == 0) p.w[b] = indexer_q_fold_weight(p.w[b], p.fold, e);
  }
}

}  // namespace

Status indexer_q_quant_cuda(const IndexerQuantParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_blocks == 0) return ok_status();
  const unsigned grid = grid_stride_blocks(p.num_blocks, kThreads / 32);  // a warp per block
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(grid), dim3(kThreads), size_t(0), cuda::current_stream()},
                   indexer_q_quant_kernel, p));
  return cuda::launch_error("indexer_q_quant");
}

}  // namespace dsa::kernels
