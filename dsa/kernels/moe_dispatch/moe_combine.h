// MoE combine (SPEC.md §8.6), the inverse of the dispatch: each token's routed expert outputs,
// weighted by its routing weights, plus the shared expert, so the MoE output stays in the
// backend's memory:
//   y = bf16(sum_j g_j * routed_j + shared), fp32 in selection order, then the shared expert, one
//   rounding.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct MoeCombineParams {
  const bf16* routed = nullptr;  // [T * k, D] bf16: row r * k + j = row r's j-th expert output
  const int32_t* expert_ids = nullptr;  // [T, k] int32, -1 = no expert (padded rows)
  const float* weights = nullptr;       // [T, k] fp32 routing weights g
  const bf16* shared = nullptr;         // [T, D] bf16 shared expert output, nullptr = none
  bf16* y = nullptr;                    // [T, D] bf16
  int32_t num_tokens = 0;               // T
  int32_t top_k = 0;                    // k
  int32_t dim = 0;                      // D
};
Status validate(const MoeCombineParams& p);
// CPU reference: acc = 0; acc += g_j * float(routed_j) for each selected j in order (separate
// multiply and add); acc += float(shared); y = bf16(acc). CUDA: bit-identical (no contraction).
Status moe_combine_ref(const MoeCombineParams& p);
Status moe_combine_cuda(const MoeCombineParams& p);

}  // namespace dsa::kernels
