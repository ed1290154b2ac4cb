#include "dsa/kernels/ragged_logits/ragged_logits_check.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/kernels/ragged_logits/ragged_logits.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
int64_t e4m3_times_512(uint8_t code) {  // exact: e4m3 values are multiples of 2^-9
  return static_cast<int64_t>(e4m3_to_float(e4m3{code}) * 512.0f);
}

// Independent formulation: exact integer dots, heads descending, long double; returns the logit
// and M of §3b.
std::pair<double, double> independent_logit(const uint8_t* q, const float* w, int32_t heads,
                                            const uint8_t* k, float kscale) {
  long double sum = 0, mag = 0;
  for (int32_t h = heads - 1; h >= 0; --h) {
    int64_t dot = 0, abs_dot = 0;
    for (int32_t t = 0; t < 128; ++t) {
      const int64_t prod = e4m3_times_512(q[h * 128 + t]) * e4m3_times_512(k[t]);
      dot += prod;
      abs_dot += prod < 0 ? -prod : prod;
    }
    sum += static_cast<long double>(w[h]) * static_cast<long double>(dot > 0 ? dot : 0);
    mag += std::fabs(static_cast<long double>(w[h])) * static_cast<long double>(abs_dot);
  }
  const long double scale = static_cast<long double>(kscale) / 262144.0L;
  return {static_cast<double>(sum * scale), static_cast<double>(mag * std::fabs(scale))};
}
}  // namespace

Status check_ragged_logits(RaggedLogitsFn op, int32_t tokens, int32_t heads, int32_t context_len,
                           uint64_t seed) {
  if (tokens < 1 || context_len < tokens) {
    return invalid_argument(fmt::format(
        "check_ragged_logits: tokens = {}, context_len = {}: need 1 <= tokens <= context_len",
        tokens, context_len));
  }
  ScopedCheckedMode checked(true);
  testing::Rng rng(seed);
  const int32_t S = 2 * context_len;
  std::vector<uint8_t> k8 = rng.e4m3_vector(size_t(S) * 128);
  std::vector<float> kscale(static_cast<size_t>(S));
  for (auto& s : kscale) s = pow2_float(static_cast<int32_t>(rng.randint(-12, 2)));
  std::vector<uint8_t> q = rng.e4m3_vector(size_t(tokens) * heads * 128);
  std::vector<float> w(size_t(tokens) * heads);
  for (auto& v : w) v = rng.normal(0.f, 0.05f);
  // Request 0 takes the first tokens / 2 rows, request 1 the rest; both hold context_len keys.
  std::vector<int32_t> ks(static_cast<size_t>(tokens)), ke(static_cast<size_t>(tokens));
  const int32_t rows0 = tokens / 2;
  for (int32_t t = 0; t < tokens; ++t) {
    const bool first = t < rows0;
    const int32_t m = first ? rows0 : tokens - rows0, i = first ? t : t - rows0;
    ks[size_t(t)] = first ? 0 : context_len;
    ke[size_t(t)] = ks[size_t(t)] + context_len - m + i + 1;
  }
  const int64_t ld = (int64_t{context_len} + 3) / 4 * 4;
  std::vector<float> logits(size_t(tokens) * ld, 0.f);
  RaggedLogitsParams p{q.data(),
                       w.data(),
                       k8.data(),
                       kscale.data(),
                       ks.data(),
                       ke.data(),
                       tokens,
                       S,
                       heads,
                       128,
                       logits.data(),
                       ld,
                       int64_t{tokens} * ld * 4};
  DSA_RETURN_IF_ERROR(op(p));

  for (int32_t t = 0; t < tokens; ++t) {
    const int32_t len = ke[size_t(t)] - ks[size_t(t)];
    const bool subset = int64_t{len} * heads * 128 > (int64_t{1} << 22);
    for (int32_t j = 0; j < ld; ++j) {
      const float got = logits[size_t(t) * ld + j];
      if (j >= len) {
        if (!std::isnan(got)) {
          return internal_error(fmt::format(
              "check_ragged_logits: logits[{}][{}] = {}: column >= ke - ks = {} must be NaN "
              "(seed {})",
              t, j, got, len, seed));
        }
        continue;
      }
      if (subset && j >= 64 && j < len - 64 && j % 13 != 0) continue;
      const int32_t c = ks[size_t(t)] + j;
      const auto [ref, m] = independent_logit(&q[size_t(t) * heads * 128], &w[size_t(t) * heads],
                                              heads, &k8[size_t(c) * 128], kscale[size_t(c)]);
      if (!(std::fabs(double{got} - ref) <= std::ldexp(m, -21) + 1e-30)) {
        return internal_error(fmt::format(
            "check_ragged_logits: logits[{}][{}] = {}, independent {} (M = {}, seed {})", t, j, got,
            ref, m, seed));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
