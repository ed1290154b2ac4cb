#include "dsa/kernels/sparse_mla/sparse_mla_dense_check.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "dsa/kernels/common/paged_cache.h"
#include "dsa/testing/compare.h"

namespace dsa::kernels {

DenseMlaResult dense_mla_attention(const bf16* q, int32_t rows, int32_t heads,
                                   const std::vector<float>& kv, const std::vector<int32_t>& begin,
                                   const std::vector<int32_t>& end, float sm_scale) {
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t S = static_cast<int64_t>(kv.size()) / kQkDim;
  DenseMlaResult res;
  res.rows = rows, res.heads = heads;
  res.out.assign(size_t(rows) * heads * kVDim, 0.f);
  res.lse.assign(size_t(rows) * heads, 0.f);
  res.max_logit.assign(size_t(rows) * heads, 0.f);
  res.v_max.assign(rows, 0.f);
  std::vector<double> score(S), prob(S);
  for (int32_t r = 0; r < rows; ++r) {
    for (int32_t s = begin[r]; s < end[r]; ++s)
      for (int c = 0; c < kVDim; ++c)
        res.v_max[r] = std::max(res.v_max[r], std::fabs(kv[size_t(s) * kQkDim + c]));
    for (int32_t h = 0; h < heads; ++h) {
      const bf16* qh = q + (int64_t{r} * heads + h) * kQkDim;
      // Scores over every key, masked outside the row's range; the absorbed form's two parts
      // (latent and rope) are summed separately.
      double m = -inf;
      for (int64_t s = 0; s < S; ++s) {
        if (s < begin[r] || s >= end[r]) {
          score[s] = -inf;
          continue;
        }
        const float* k = kv.data() + s * kQkDim;
        double nope = 0, rope = 0;
        for (int t = 0; t < kLatentDim; ++t) nope += double{bf16_to_float(qh[t])} * k[t];
        for (int t = kLatentDim; t < kQkDim; ++t) rope += double{bf16_to_float(qh[t])} * k[t];
        score[s] = (nope + rope) * sm_scale;
        m = std::max(m, score[s]);
      }
      const size_t rh = size_t(r) * heads + h;
      res.max_logit[rh] = static_cast<float>(m);
      if (m == -inf) {  // nothing visible
        res.lse[rh] = static_cast<float>(inf);
        continue;
      }
      double denom = 0;
      for (int64_t s = 0; s < S; ++s) denom += (prob[s] = std::exp(score[s] - m));
      std::vector<double> o(kVDim, 0.0);
      for (int64_t s = begin[r]; s < end[r]; ++s) {
        const double p = prob[s] / denom;
        for (int c = 0; c < kVDim; ++c) o[c] += p * kv[s * kQkDim + c];
      }
      for (int c = 0; c < kVDim; ++c) res.out[rh * kVDim + c] = static_cast<float>(o[c]);
      res.lse[rh] = static_cast<float>(m + std::log(denom));
    }
  }
  return res;
}

Status compare_with_dense(const DenseMlaResult& dense, const bf16* out, const float* lse,
                          const float* max_logit) {
  const size_t rh_count = size_t(dense.rows) * dense.heads;
  std::vector<float> got(rh_count * kVDim), bound(rh_count * kVDim);
  std::vector<float> lse_bound(rh_count), max_bound(rh_count);
  for (size_t i = 0; i < got.size(); ++i) {
    got[i] = bf16_to_float(out[i]);
    const size_t r = i / (size_t(dense.heads) * kVDim);
    bound[i] = std::ldexp(std::fabs(dense.out[i]), -8) + 1e-9f * dense.v_max[r];
  }
  for (size_t i = 0; i < rh_count; ++i) {
    lse_bound[i] =
        std::isfinite(dense.lse[i]) ? std::ldexp(std::fabs(dense.lse[i]), -22) + 1e-9f : 0.f;
    max_bound[i] = std::isfinite(dense.max_logit[i])
                       ? std::ldexp(std::fabs(dense.max_logit[i]), -22) + 1e-9f
                       : 0.f;
  }
  auto res = testing::within_bound(got, dense.out, bound);
  if (!res) return internal_error("sparse MLA out differs from dense attention: " + res.message);
  res = testing::within_bound({lse, rh_count}, dense.lse, lse_bound);
  if (!res) return internal_error("sparse MLA lse differs from dense attention: " + res.message);
  if (max_logit != nullptr) {
    res = testing::within_bound({max_logit, rh_count}, dense.max_logit, max_bound);
    if (!res) return internal_error("sparse MLA max_logit differs from dense: " + res.message);
  }
  return ok_status();
}

}  // namespace dsa::kernels
