// LayerNorm with bias, the indexer's k_norm (SPEC.md §8.3, §8.5 step 2):
//   y = (x - mu) * (var + eps)^-1/2 * w + b, biased variance (divide by D), bf16 in and out,
//   class T (<= 1 bf16 ulp from the correctly rounded value; the reference IS that value).
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct LayerNormParams {
  const bf16* x = nullptr;  // [T, D] bf16 input rows, row stride x_stride
  // [D] fp32. DeepSeek's reference keeps k_norm's parameters in fp32; a bf16 checkpoint tensor
  // upcasts to fp32 exactly, so one fp32 interface serves both.
  const float* weight = nullptr;
  const float* bias = nullptr;  // [D] fp32
  bf16* y = nullptr;            // [T, D] bf16 output rows, row stride y_stride; may equal x
  int32_t num_tokens = 0;       // T
  int32_t dim = 0;              // D (128 for k_norm)
  int64_t x_stride = 0;         // elements between rows; 0 = dim
  int64_t y_stride = 0;         // elements between rows; 0 = dim
  float eps = 1e-6f;
};

// Host checks (InvalidArgument): T >= 0, D >= 1, pointers, strides >= D, eps finite and > 0.
Status validate(const LayerNormParams& p);

// CPU reference: two-pass mean and biased variance in double, the affine map in double, rounded
// once to bf16. Rows are independent; y == x is allowed. Non-finite inputs propagate.
Status layernorm_ref(const LayerNormParams& p);
// CUDA backend (params hold device pointers).
Status layernorm_cuda(const LayerNormParams& p);

}  // namespace dsa::kernels
