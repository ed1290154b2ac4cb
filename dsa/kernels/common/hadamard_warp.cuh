// The 128-point Hadamard transform of one row held by a warp (lane l owns values 4l..4l+3): the
// device core of hadamard_kernel, shared with the fused kernels that rotate the indexer's rows
// (attention_prologue, indexer_query), so every caller computes the same bits.
#pragma once

#include <cuda_runtime.h>

namespace dsa::kernels {

inline constexpr float kHadamardScale = 0.0883883476483184405f;  // 128^-1/2, rounded to fp32

// v: this lane's four values in; out: y = 128^-1/2 * H_128 x at the same positions (fp32, before
// the caller's bf16 rounding). Butterflies of width 1 and 2 (index bits 0-1) stay in the lane;
// those of width 4..64 (lane bits 0-4) pair lanes by xor-shuffles. Every lane of the warp calls.
__device__ __forceinline__ void hadamard128_warp(float (&v)[4], int lane) {
  // Width 1 and 2: inside the lane. The lower index gets a + b, the upper a - b.
  const float a0 = v[0] + v[1], a1 = v[0] - v[1], a2 = v[2] + v[3], a3 = v[2] - v[3];
  v[0] = a0 + a2, v[2] = a0 - a2, v[1] = a1 + a3, v[3] = a1 - a3;
  // Width 4..64: the partner lane differs in one bit; the lower lane keeps mine + theirs, the
  // upper lane theirs - mine (= lower - upper).
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {
    const bool upper = (lane & m) != 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float other = __shfl_xor_sync(0xFFFFFFFFu, v[k], m);
      v[k] = upper ? other - v[k] : v[k] + other;
    }
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] *= kHadamardScale;
}

}  // namespace dsa::kernels
