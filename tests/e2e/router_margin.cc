#include "tests/e2e/router_margin.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace dsa::e2e {

namespace {

double g_margin = std::numeric_limits<double>::infinity();

// The margins of one row's selection, in the order the reference decides (§8.6).
double row_margin(const kernels::MoeRoutingParams& p, int32_t r) {
  const int32_t E = p.num_experts, G = p.num_groups, per = E / G;
  std::vector<double> s(static_cast<size_t>(E));
  for (int32_t e = 0; e < E; ++e) {
    const double sig = 1.0 / (1.0 + std::exp(-double(p.logits[int64_t(r) * E + e])));
    s[size_t(e)] = sig + double(p.bias[e]);
  }
  double margin = std::numeric_limits<double>::infinity();
  std::vector<std::pair<double, int32_t>> groups;
  for (int32_t g = 0; g < G; ++g) {
    std::vector<double> v(s.begin() + g * per, s.begin() + (g + 1) * per);
    std::sort(v.begin(), v.end(), std::greater<>());
    groups.push_back({v[0] + (per > 1 ? v[1] : 0.0), g});
  }
  std::sort(groups.begin(), groups.end(), std::greater<>());
  if (G > p.topk_group) {
    margin = std::min(margin,
                      groups[size_t(p.topk_group - 1)].first - groups[size_t(p.topk_group)].first);
  }
  std::vector<double> kept;
  for (int32_t i = 0; i < p.topk_group; ++i) {
    const int32_t g = groups[size_t(i)].second;
    kept.insert(kept.end(), s.begin() + g * per, s.begin() + (g + 1) * per);
  }
  std::sort(kept.begin(), kept.end(), std::greater<>());
  if (int32_t(kept.size()) > p.top_k) {
    margin = std::min(margin, kept[size_t(p.top_k - 1)] - kept[size_t(p.top_k)]);
  }
  return margin;
}

Status probed_routing(const kernels::MoeRoutingParams& p) {
  for (int32_t r = 0; r < p.num_tokens; ++r) {
    if (p.row_len != nullptr && p.row_len[r] <= 0) continue;  // padded rows are not routed
    g_margin = std::min(g_margin, row_margin(p, r));
  }
  return kernels::moe_routing_ref(p);
}

}  // namespace

const kernels::OpTable& probed_cpu_ops() {
  static const kernels::OpTable table = [] {
    kernels::OpTable t = kernels::cpu_ops();
    t.moe_routing = probed_routing;
    return t;
  }();
  return table;
}

void reset_router_margin() { g_margin = std::numeric_limits<double>::infinity(); }
double router_margin() { return g_margin; }

}  // namespace dsa::e2e
