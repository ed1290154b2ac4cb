// One MQA indexer logit (SPEC.md §3b, §3d) and its tolerance bound, shared by the paged and the
// ragged references: the two ops are the same function of (q row, w row, key), only the key
// addressing differs. Accumulation is in double with a fixed order (heads ascending, dims
// ascending), so every row is computed independently of the batch (CPU batch invariance).
#pragma once

#include <cmath>
#include <cstdint>

#include "dsa/core/dtype.h"

namespace dsa::kernels {

// Decodes `count` e4m3 codes exactly (every e4m3 value is exact in double).
inline void decode_e4m3(const uint8_t* codes, int64_t count, double* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = e4m3_to_float(e4m3{codes[i]});
}

// logit = kscale * sum_h w[h] * relu(sum_t q[h, t] k[t]), all in double, rounded once to fp32.
// q: [heads, head_dim] decoded, w: [heads], k: [head_dim] decoded. The inner dot products of e4m3
// values are exact in double (products are multiples of 2^-18 below 2^18).
inline float mqa_logit(const double* q, const float* w, int32_t heads, int32_t head_dim,
                       const double* k, float kscale) {
  double sum = 0.0;
  for (int32_t h = 0; h < heads; ++h) {
    const double* qh = q + int64_t{h} * head_dim;
    double dot = 0.0;
    for (int32_t t = 0; t < head_dim; ++t) dot += qh[t] * k[t];
    sum += double{w[h]} * (dot > 0.0 ? dot : 0.0);
  }
  return static_cast<float>(double{kscale} * sum);
}

// §3b tolerance of one element: 2^-8 * M with M = kscale * sum_h |w[h]| * sum_t |q[h,t] k[t]|.
inline float mqa_logit_bound(const double* q, const float* w, int32_t heads, int32_t head_dim,
                             const double* k, float kscale) {
  double m = 0.0;
  for (int32_t h = 0; h < heads; ++h) {
    double abs_dot = 0.0;
    for (int32_t t = 0; t < head_dim; ++t)
      abs_dot += std::fabs(q[int64_t{h} * head_dim + t] * k[t]);
    m += std::fabs(double{w[h]}) * abs_dot;
  }
  return static_cast<float>(std::fabs(double{kscale}) * m * 0x1p-8);
}

}  // namespace dsa::kernels
