// LayerNorm's row code on the device, shared by layernorm_cuda and the fused kernels that
// normalise the indexer's key inside a larger block (attention_prologue): the block size, the fp64
// block reduction, the correctly rounded double -> bf16 and the row body. One copy of the
// arithmetic, so a fused LayerNorm is bit-identical to layernorm_cuda's.
//
// Why the row may run in a block with more threads than layernorm_cuda gives it: element d
// belongs to thread d % threads exactly as there, and every other thread adds +0.0 to the block
// sums. Those threads are whole warps past the row's (threads is a multiple of 32), whose warp
// sums are +0.0, the value the unused slots of the tree over warp sums hold anyway: the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"

namespace dsa::kernels::layernorm_dev {

// layernorm_cuda's block size for a row of `dim`: a multiple of 32, at most 256 (128 for k_norm).
inline int layernorm_threads(int32_t dim) { return dim >= 256 ? 256 : ((dim + 31) / 32) * 32; }

// Same tree for every launch of the same shape (deterministic); every thread gets the total.
// Every thread of the block must call it (it synchronises the block).
__device__ inline double block_sum(double v, double* scratch /* [33] */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read from the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double s = lane < warps ? scratch[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, o);
    if (lane == 0) scratch[32] = s;
  }
  __syncthreads();
  return scratch[32];
}

// The correctly rounded bf16 of a double (device twin of bf16_round.h's double_to_bf16): when the
// fp32 rounding lands exactly on a bf16 tie that the double was not on, the double decides.
__device__ inline bf16 double_to_bf16_rn(double d) {
  const float f = __double2float_rn(d);
  const uint32_t u = float_bits(f);
  if (isfinite(f) && (u & 0xFFFFu) == 0x8000u && static_cast<double>(f) != d) {
    const bool away_from_zero = fabs(d) > fabs(static_cast<double>(f));
    return bf16{static_cast<uint16_t>((u >> 16) + (away_from_zero ? 1u : 0u))};
  }
  return float_to_bf16(f);
}

// The block computes one row: mean and biased variance of x[0:D] (two passes about the mean), then
// y[d] = (x - mu) / sqrt(var + eps) * w[d] + b[d]. Thread i < `threads` reads and writes only
// elements i, i + threads, ..., after both reductions, so y may alias x; threads past `threads`
// own none but must call too (block_sum). layernorm_cuda passes threads = blockDim.x; y may be
// global or shared memory.
__device__ __forceinline__ void layernorm_row(const bf16* xr, const float* __restrict__ w,
                                              const float* __restrict__ b, bf16* yr, int32_t dim,
                                              float eps, int threads, double* scratch /* [33] */) {
  const int32_t first = threadIdx.x < static_cast<unsigned>(threads) ? threadIdx.x : dim;
  // Loops kept rolled, as layernorm_cuda's were over blockDim.x (the same order either way).
  double sum = 0.0;
#pragma unroll 1
  for (int32_t d = first; d < dim; d += threads) sum += bf16_to_float(xr[d]);
  const double mean = block_sum(sum, scratch) / dim;
  double sum_sq = 0.0;
#pragma unroll 1
  for (int32_t d = first; d < dim; d += threads) {
    const double c = static_cast<double>(bf16_to_float(xr[d])) - mean;
    sum_sq += c * c;
  }
  const double inv_std = 1.0 / sqrt(block_sum(sum_sq, scratch) / dim + static_cast<double>(eps));
#pragma unroll 1
  for (int32_t d = first; d < dim; d += threads) {
    const double c = static_cast<double>(bf16_to_float(xr[d])) - mean;
    yr[d] = double_to_bf16_rn(c * inv_std * static_cast<double>(w[d]) + static_cast<double>(b[d]));
  }
}

}  // namespace dsa::kernels::layernorm_dev
