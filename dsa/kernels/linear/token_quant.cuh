// The FP8 linear's token quantisation on the device (SPEC.md §2.1, §8.8), shared by the
// quantiser kernel and the few-token kernel that quantises its own tokens: half a warp takes one
// (token, 128-column block), 8 values per lane, with quantize_block_pow2's power-of-two rule (the
// same DSA_HD helpers as the CPU reference, so the codes are the reference's bit for bit).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/fp8_quant.h"

namespace dsa::kernels::linear_fp8 {

struct Quant8 {
  uint2 codes;  // the lane's 8 e4m3 codes, value q in byte q
  float scale;  // the block's power-of-two scale (the same on all 16 lanes)
};

// Lane `threadIdx.x % 16` of a half warp holds `raw`, 8 bf16 values of the block, or nothing
// (`has` false: past the block's end, or a padding token; its codes are 0). Every lane of the warp
// must call it: the block's amax is reduced over the half warp by full-mask shuffles.
__device__ __forceinline__ Quant8 quantize_half_warp8(const uint4& raw, bool has) {
  float v[8];
  float amax = 0.f;
  const bf16* h = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    v[e] = has ? bf16_to_float(h[e]) : 0.f;
    const float a = fabsf(v[e]);
    amax = a > amax ? a : amax;
  }
  for (int s = 8; s > 0; s >>= 1) {  // within the half warp
    const float other = __shfl_xor_sync(0xFFFFFFFFu, amax, s);
    amax = other > amax ? other : amax;
  }
  const int32_t e = pow2_scale_exponent(amax);
  const float inv = pow2_float(-e);
  uint32_t packed[2] = {0, 0};
  if (has) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      float y = v[q] * inv;  // exact: a power of two
      y = y > kE4m3Max ? kE4m3Max : (y < -kE4m3Max ? -kE4m3Max : y);
      packed[q / 4] |= uint32_t{float_to_e4m3(y).bits} << (8 * (q % 4));
    }
  }
  return {make_uint2(packed[0], packed[1]), pow2_float(e)};
}

}  // namespace dsa::kernels::linear_fp8
