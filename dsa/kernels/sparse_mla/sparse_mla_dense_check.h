// The independent formulation of sparse MLA used by its tests and by `dsa check`: plain dense
// softmax attention of each query row over a contiguous range of exact kv rows, written with a
// mask and normalised probabilities rather than index lists and exp(z - lse).
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct DenseMlaResult {
  int32_t rows = 0, heads = 0;
  std::vector<float> out;        // [R, H, 512] fp32 (not rounded to bf16)
  std::vector<float> lse;        // [R, H]; +inf for an empty range
  std::vector<float> max_logit;  // [R, H]; -inf for an empty range
  std::vector<float> v_max;      // [R] max |kv[s][c]| over the row's range, c < 512
};

// q: [R, H, 576] bf16; kv: [S, 576] floats (dequantised rows); row r attends kv rows
// [begin[r], end[r]) -- a causal mask when begin = 0 and end = position + 1.
DenseMlaResult dense_mla_attention(const bf16* q, int32_t rows, int32_t heads,
                                   const std::vector<float>& kv, const std::vector<int32_t>& begin,
                                   const std::vector<int32_t>& end, float sm_scale);

// Compares a reference result with the dense one. Both are exact up to double rounding, so:
// out within half a bf16 ulp of the dense value (2^-8 |dense|) + 1e-9 V_r; lse and max_logit
// within 2^-22 |dense| + 1e-9; empty rows exactly (out 0, lse +inf, max_logit -inf).
// max_logit may be nullptr. Internal error naming the first mismatches otherwise.
Status compare_with_dense(const DenseMlaResult& dense, const bf16* out, const float* lse,
                          const float* max_logit);

}  // namespace dsa::kernels
