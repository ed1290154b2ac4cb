// The rotation of one RoPE pair on the device, the core of rope_kernel, shared with the fused
// kernels that rope the indexer's and the latent's rows (attention_prologue, indexer_query).
// __fmul_rn / __fadd_rn / __fsub_rn keep nvcc from contracting it into FMAs: each product and the
// sum are rounded as rope_ref rounds them, so every caller is bit-identical to the CPU.
#pragma once

#include <cuda_runtime.h>

#include "dsa/core/dtype.h"

namespace dsa::kernels {

// (a, b) -> (a c - b s, a s + b c), each rounded once to bf16.
__device__ __forceinline__ void rope_rotate_pair(bf16& a, bf16& b, float c, float s) {
  const float fa = bf16_to_float(a), fb = bf16_to_float(b);
  a = float_to_bf16(__fsub_rn(__fmul_rn(fa, c), __fmul_rn(fb, s)));
  b = float_to_bf16(__fadd_rn(__fmul_rn(fa, s), __fmul_rn(fb, c)));
}

}  // namespace dsa::kernels
