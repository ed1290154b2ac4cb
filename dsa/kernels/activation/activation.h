// The MLP activation (SPEC.md §8.6), between the gate/up GEMMs and the down GEMM of every dense
// MLP, routed expert and shared expert, so the activation stays in the backend's memory:
//   swiglu: act = bf16(silu(g) * u), silu(g) = g / (1 + exp(-g)), fp32 math.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct SwigluParams {
  const bf16* gate = nullptr;  // [n] bf16 gate projection
  const bf16* up = nullptr;    // [n] bf16 up projection
  bf16* out = nullptr;         // [n] bf16 activation; may equal gate or up
  int64_t n = 0;
};
Status validate(const SwigluParams& p);
// CPU reference: float_to_bf16(g / (1 + std::exp(-g)) * u) with the fp32 std::exp.
Status swiglu_ref(const SwigluParams& p);
// CUDA backend (device pointers): exp through fp64 rounded to fp32, IEEE fp32 divide and
// multiply; equal to the reference wherever std::exp(float) is correctly rounded.
Status swiglu_cuda(const SwigluParams& p);

}  // namespace dsa::kernels
