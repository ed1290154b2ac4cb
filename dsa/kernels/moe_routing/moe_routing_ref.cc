#include <cmath>
#include <limits>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/moe_routing/moe_routing.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "moe_routing";

// Ranking key: NaN (unchecked mode only) ranks below every number.
float rank_key(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

// True when candidate a outranks b: higher key, or an equal key and a lower index.
bool outranks(float key_a, int32_t a, float key_b, int32_t b) {
  return key_a > key_b || (key_a == key_b && a < b);
}

Status check_data(const MoeRoutingParams& p) {
  for (int32_t e = 0; e < p.num_experts; ++e) {
    if (!std::isfinite(p.bias[e])) {
      return out_of_range(fmt::format("{}: bias[{}] = {}: must be finite", kOp, e, p.bias[e]));
    }
  }
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    if (p.row_len != nullptr && p.row_len[t] < 0) {
      return element_error(StatusCode::kOutOfRange, kOp, "row_len", t, p.row_len[t],
                           "must be >= 0 (0 marks a padded row)");
    }
    for (int32_t e = 0; e < p.num_experts; ++e) {
      const float v = p.logits[t * p.num_experts + e];
      if (!std::isfinite(v)) {
        return out_of_range(fmt::format("{}: logits[{}][{}] = {}: must be finite", kOp, t, e, v));
      }
    }
  }
  return ok_status();
}

void route_row(const MoeRoutingParams& p, int64_t t) {
  int32_t* ids = p.expert_ids + t * routing_slots(p);
  float* w = p.weights + t * routing_slots(p);
  if (p.row_len != nullptr && p.row_len[t] <= 0) {  // padded: no dispatch
    for (int32_t j = 0; j < routing_slots(p); ++j) ids[j] = -1, w[j] = 0.f;
    return;
  }
  if (p.shared_expert_id >= 0) ids[p.top_k] = p.shared_expert_id, w[p.top_k] = 1.f;
  const int32_t E = p.num_experts, group_size = E / p.num_groups;
  std::vector<float> s(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
  for (int32_t e = 0; e < E; ++e) {
    const double l = p.logits[t * E + e];
    s[e] = static_cast<float>(1.0 / (1.0 + std::exp(-l)));
    biased[e] = rank_key(s[e] + p.bias[e]);  // one fp32 add
  }
  // Group score: the two best s' of the group, added in fp32.
  std::vector<float> group_score(size_t(p.num_groups));
  for (int32_t g = 0; g < p.num_groups; ++g) {
    int32_t first = g * group_size, second = -1;
    for (int32_t e = first + 1; e < (g + 1) * group_size; ++e)
      if (outranks(biased[e], e, biased[first], first)) first = e;
    for (int32_t e = g * group_size; e < (g + 1) * group_size; ++e)
      if (e != first && (second < 0 || outranks(biased[e], e, biased[second], second))) second = e;
    group_score[g] = rank_key(biased[first] + biased[second]);
  }
  std::vector<bool> group_kept(size_t(p.num_groups), false);
  for (int32_t r = 0; r < p.topk_group; ++r) {
    int32_t best = -1;
    for (int32_t g = 0; g < p.num_groups; ++g)
      if (!group_kept[g] && (best < 0 || outranks(group_score[g], g, group_score[best], best)))
        best = g;
    group_kept[best] = true;
  }
  std::vector<bool> taken(size_t(E), false);
  double sum = 0.0;
  for (int32_t j = 0; j < p.top_k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < E; ++e)
      if (group_kept[e / group_size] && !taken[e] &&
          (best < 0 || outranks(biased[e], e, biased[best], best)))
        best = e;
    taken[best] = true;
    ids[j] = best;
    sum += s[best];
  }
  for (int32_t j = 0; j < p.top_k; ++j) {
    double g = double{s[ids[j]]} * p.routed_scaling_factor;
    if (p.norm_topk_prob) g = sum > 0.0 ? g / sum : 0.0;
    w[j] = static_cast<float>(g);
  }
}
}  // namespace

Status validate(const MoeRoutingParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_experts", p.num_experts, 2, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_groups", p.num_groups, 1, p.num_experts / 2));
  if (p.num_experts % p.num_groups != 0) {
    return field_error(StatusCode::kInvalidArgument, kOp, "num_groups", p.num_groups,
                       fmt::format("must divide num_experts = {}", p.num_experts));
  }
  DSA_RETURN_IF_ERROR(require_in(kOp, "topk_group", p.topk_group, 1, p.num_groups));
  DSA_RETURN_IF_ERROR(
      require_in(kOp, "top_k", p.top_k, 1, int64_t{p.topk_group} * (p.num_experts / p.num_groups)));
  if (!(std::isfinite(p.routed_scaling_factor) && p.routed_scaling_factor > 0.f)) {
    return invalid_argument(fmt::format("{}: routed_scaling_factor = {}: must be finite and > 0",
                                        kOp, p.routed_scaling_factor));
  }
  if (p.shared_expert_id != -1 && p.shared_expert_id != p.num_experts) {
    return field_error(StatusCode::kInvalidArgument, kOp, "shared_expert_id", p.shared_expert_id,
                       fmt::format("must be -1 (none) or num_experts = {}", p.num_experts));
  }
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "logits", p.logits));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "bias", p.bias));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "expert_ids", p.expert_ids));
  return require_pointer(kOp, "weights", p.weights);
}

Status moe_routing_ref(const MoeRoutingParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  if (checked_mode()) DSA_RETURN_IF_ERROR(check_data(p));
  parallel_for(p.num_tokens, [&](int64_t t) { route_row(p, t); });
  return ok_status();
}

}  // namespace dsa::kernels
