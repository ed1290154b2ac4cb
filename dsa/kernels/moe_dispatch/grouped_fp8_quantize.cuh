// The FP8 grouped linear's activation quantiser, one warp per (row, 128-column block), shared by
// the tile path's quantize_rows_kernel (grouped_linear_fp8_kernel.cuh) and the prefill form's
// gather (grouped_linear_fp8_lt.cu). Inline device code only: both translation units include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/fp8_quant.h"

namespace dsa::kernels::grouped_fp8 {

inline constexpr int kQuantWarps = 8;  // warps per quantiser CTA
inline constexpr unsigned kFull = 0xFFFFFFFFu;

// This warp's item of a quantiser grid of kQuantWarps warps a CTA over rows x nkb (row t, block
// k); false past the last one (warp-uniform).
__device__ __forceinline__ bool quant_item(int32_t rows, int32_t nkb, int32_t* t, int32_t* k) {
  const int64_t item = int64_t{blockIdx.x} * kQuantWarps + threadIdx.x / 32;
  if (item >= int64_t{rows} * nkb) return false;
  *t = static_cast<int32_t>(item / nkb);
  *k = static_cast<int32_t>(item % nkb);
  return true;
}

// One warp quantises one block of one row with §2.1's power-of-two rule, through the same DSA_HD
// helpers as the CPU reference, so codes and scales are bit-identical to linear_ref's: src holds
// the block's m values (m % 16 == 0; null: a zero row), the codes go to dst; returns the scale.
__device__ __forceinline__ float quantize_block_warp(const bf16* src, int32_t m, uint8_t* dst,
                                                     int lane) {
  const int c = lane * 4;
  float v[4] = {};
  float amax = 0.f;
  if (src != nullptr && c < m) {
    const uint2 raw = *reinterpret_cast<const uint2*>(src + c);
    const bf16* h = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[e] = bf16_to_float(h[e]);
      const float a = fabsf(v[e]);
      amax = a > amax ? a : amax;
    }
  }
  for (int s = 16; s > 0; s >>= 1) {
    const float other = __shfl_xor_sync(kFull, amax, s);
    amax = other > amax ? other : amax;
  }
  const int32_t e = pow2_scale_exponent(amax);
  const float inv = pow2_float(-e);
  if (c < m) {
    uint32_t packed = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float y = v[q] * inv;  // exact: a power of two
      y = y > kE4m3Max ? kE4m3Max : (y < -kE4m3Max ? -kE4m3Max : y);
      packed |= uint32_t{float_to_e4m3(y).bits} << (8 * q);
    }
    *reinterpret_cast<uint32_t*>(dst + c) = packed;
  }
  return pow2_float(e);
}

}  // namespace dsa::kernels::grouped_fp8
