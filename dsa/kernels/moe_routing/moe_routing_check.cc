#include "dsa/kernels/moe_routing/moe_routing_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <vector>

#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
// a before b in the ranking: higher score, then lower index.
bool before(const std::vector<float>& score, int32_t a, int32_t b) {
  return score[a] > score[b] || (score[a] == score[b] && a < b);
}

// The `count` best of `candidates` under `before`. Brute force: the one subset of size count
// whose every member ranks before every non-member. Otherwise: a full sort.
std::vector<int32_t> best_subset(const std::vector<float>& score,
                                 const std::vector<int32_t>& candidates, int32_t count) {
  const int32_t n = static_cast<int32_t>(candidates.size());
  std::vector<int32_t> chosen;
  if (n <= 16) {
    for (uint32_t mask = 0; mask < (1u << n); ++mask) {
      if (std::popcount(mask) != count) continue;
      bool dominant = true;
      for (int32_t i = 0; i < n && dominant; ++i)
        for (int32_t j = 0; j < n && dominant; ++j)
          if ((mask >> i & 1u) && !(mask >> j & 1u))
            dominant = before(score, candidates[i], candidates[j]);
      if (!dominant) continue;
      for (int32_t i = 0; i < n; ++i)
        if (mask >> i & 1u) chosen.push_back(candidates[i]);
      break;
    }
  } else {
    chosen = candidates;
    std::sort(chosen.begin(), chosen.end(),
              [&](int32_t a, int32_t b) { return before(score, a, b); });
    chosen.resize(static_cast<size_t>(count));
  }
  std::sort(chosen.begin(), chosen.end(),
            [&](int32_t a, int32_t b) { return before(score, a, b); });
  return chosen;
}
}  // namespace

Status check_moe_routing(MoeRoutingFn op, int32_t tokens, int32_t experts, int32_t groups,
                         int32_t topk_group, int32_t top_k, uint64_t seed) {
  if (tokens < 1) return invalid_argument(fmt::format("check_moe_routing: tokens = {}", tokens));
  testing::Rng rng(seed);
  const size_t n = size_t(tokens) * experts;
  std::vector<float> logits(n), bias(static_cast<size_t>(experts));
  for (auto& b : bias) b = 0.125f * float(rng.randint(-1, 1));
  for (int32_t t = 0; t < tokens; ++t) {
    const bool discrete = t % 2 == 0;  // half the rows are tie-heavy
    for (int32_t e = 0; e < experts; ++e)
      logits[size_t(t) * experts + e] =
          discrete ? 0.5f * float(rng.randint(-3, 3)) : rng.normal(0.f, 2.f);
  }
  std::vector<int32_t> row_len(static_cast<size_t>(tokens));
  for (int32_t t = 0; t < tokens; ++t) row_len[t] = t % 5 == 4 ? 0 : int32_t(rng.randint(1, 999));
  std::vector<int32_t> ids(size_t(tokens) * top_k, INT32_MIN);
  std::vector<float> weights(ids.size(), NAN);

  MoeRoutingParams p;
  p.logits = logits.data();
  p.bias = bias.data();
  p.row_len = row_len.data();
  p.expert_ids = ids.data();
  p.weights = weights.data();
  p.num_tokens = tokens;
  p.num_experts = experts;
  p.num_groups = groups;
  p.topk_group = topk_group;
  p.top_k = top_k;
  p.routed_scaling_factor = 2.5f;
  DSA_RETURN_IF_ERROR(op(p));

  const int32_t group_size = experts / groups;
  for (int32_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> want_ids(size_t(top_k), -1);
    std::vector<long double> want_w(size_t(top_k), 0);
    if (row_len[t] != 0) {
      std::vector<float> s(static_cast<size_t>(experts)), biased(static_cast<size_t>(experts));
      for (int32_t e = 0; e < experts; ++e) {
        const long double l = logits[size_t(t) * experts + e];
        s[e] = static_cast<float>(1.0L / (1.0L + std::exp(-l)));
        biased[e] = s[e] + bias[e];
      }
      std::vector<float> group_score(static_cast<size_t>(groups));
      for (int32_t g = 0; g < groups; ++g) {
        std::vector<float> v(biased.begin() + g * group_size,
                             biased.begin() + (g + 1) * group_size);
        std::sort(v.begin(), v.end(), std::greater<float>());
        group_score[g] = v[0] + v[1];
      }
      std::vector<int32_t> all_groups(static_cast<size_t>(groups));
      std::iota(all_groups.begin(), all_groups.end(), 0);
      std::vector<int32_t> allowed;
      for (int32_t g : best_subset(group_score, all_groups, topk_group))
        for (int32_t e = g * group_size; e < (g + 1) * group_size; ++e) allowed.push_back(e);
      std::sort(allowed.begin(), allowed.end());
      want_ids = best_subset(biased, allowed, top_k);
      long double sum = 0;
      for (int32_t e : want_ids) sum += s[e];
      for (int32_t j = 0; j < top_k; ++j) want_w[j] = s[want_ids[j]] / sum * 2.5L;
    }
    for (int32_t j = 0; j < top_k; ++j) {
      const size_t k = size_t(t) * top_k + j;
      const double ww = static_cast<double>(want_w[j]);
      if (ids[k] != want_ids[j] || !(std::fabs(weights[k] - ww) <= 1e-6 * std::fabs(ww))) {
        return internal_error(fmt::format(
            "moe_routing: row {} slot {}: expert {} weight {}, expected expert {} weight {}", t, j,
            ids[k], weights[k], want_ids[j], ww));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
