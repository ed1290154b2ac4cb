// The §2.1 quantisation of one block of 128 indexer query values held by a warp (lane l owns
// values 4l..4l+3): the device core of indexer_q_quant_kernel, shared with the fused indexer_query
// kernel, so both compute the same bits as quantize_block_pow2 (the CPU reference).
// fp32 arithmetic through the _rn intrinsics so nvcc cannot contract what the CPU reference
// (built without contraction) rounds twice.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/fp8_quant.h"

namespace dsa::kernels {

// x: this lane's four values; codes: their e4m3 codes under the block's power-of-two scale 2^e,
// which is returned (the same e in every lane). The amax is reduced by xor-shuffles (max is exact
// in any order); every lane of the warp calls.
__device__ __forceinline__ int32_t indexer_q_quant_warp(const float (&x)[4], uint8_t (&codes)[4]) {
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float a = fabsf(x[j]);
    amax = a > amax ? a : amax;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xFFFFFFFFu, amax, o);
    amax = other > amax ? other : amax;
  }
  const int32_t e = pow2_scale_exponent(amax);
  const float inv = pow2_float(-e);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float y = __fmul_rn(x[j], inv);
    y = y > kE4m3Max ? kE4m3Max : (y < -kE4m3Max ? -kE4m3Max : y);
    codes[j] = float_to_e4m3(y).bits;
  }
  return e;
}

// The head weight with the fold and the block's scale 2^e: w * fold * 2^e, each product rounded
// as the CPU reference rounds it (p.w[i] * p.fold * qscale).
__device__ __forceinline__ float indexer_q_fold_weight(float w, float fold, int32_t e) {
  return __fmul_rn(__fmul_rn(w, fold), pow2_float(e));
}

}  // namespace dsa::kernels
