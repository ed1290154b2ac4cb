// The rotation of one RoPE pair on the device, the core of rope_kernel, shared with the fused
// kernels that rope the indexer's and the latent's rows (attention_prologue, indexer_query).
// __fmul_rn / __fadd_rn / __fsub_rn keep nvcc from contracting it into FMAs: each product and the
// sum are rounded as rope_ref rounds them, so every caller is bit-identical to the CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/dtype.h"

namespace dsa::kernels {

// The two members of rope pair i (< 32) in a row of 64 rope values: (2i, 2i + 1) interleaved,
// (i, i + 32) not (SPEC.md §8.3's two styles).
__device__ __forceinline__ int32_t rope_pair_first(bool interleaved, int i) {
  return interleaved ? 2 * i : i;
}
__device__ __forceinline__ int32_t rope_pair_second(bool interleaved, int i) {
  return interleaved ? 2 * i + 1 : i + 32;
}

// (a, b) -> (a c - b s, a s + b c), each rounded once to bf16.
__device__ __forceinline__ void rope_rotate_pair(bf16& a, bf16& b, float c, float s) {
  const float fa = bf16_to_float(a), fb = bf16_to_float(b);
  a = float_to_bf16(__fsub_rn(__fmul_rn(fa, c), __fmul_rn(fb, s)));
  b = float_to_bf16(__fadd_rn(__fmul_rn(fa, s), __fmul_rn(fb, c)));
}

}  // namespace dsa::kernels
