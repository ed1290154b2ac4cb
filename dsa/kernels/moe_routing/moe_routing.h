// MoE routing, DeepSeek's noaux_tc (SPEC.md §8.6):
//   s = sigmoid(logits); s' = s + bias; group score = sum of the two largest s' of each group;
//   keep the topk_group best groups; pick the top_k experts by s' among them (ties at every stage
//   -> lower index); g_e = s_e / sum_sel s_e * routed_scaling_factor (norm_topk_prob), else
//   s_e * routed_scaling_factor. Padded rows get expert id -1 and weight 0.
#pragma once

#include <cstdint>

#include "dsa/core/host_device.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct MoeRoutingParams {
  const float* logits = nullptr;  // [T, E] fp32 router logits (mlp.gate output)
  const float* bias = nullptr;    // [E] fp32 e_score_correction_bias
  // [T] int32 or null (= every row real): the builder's row_len; 0 marks a padded row (§4.5).
  const int32_t* row_len = nullptr;
  // [T, slots] int32 out (routing_slots): selected experts by s' descending (ties: lower id
  // first); -1 when padded.
  int32_t* expert_ids = nullptr;
  float* weights = nullptr;  // [T, slots] fp32 out: g_e in the order of expert_ids; 0 when padded
  int32_t num_tokens = 0;    // T
  int32_t num_experts = 0;   // E (n_routed_experts)
  int32_t num_groups = 1;    // n_group; E % n_group == 0, E / n_group >= 2
  int32_t topk_group = 1;    // groups kept, in [1, n_group]
  int32_t top_k = 1;         // k (num_experts_per_tok), in [1, topk_group * E / n_group]
  float routed_scaling_factor = 1.0f;
  bool norm_topk_prob = true;
  // -1: rows of k slots. Otherwise E: rows of k + 1 slots, the last the shared expert as expert E
  // with weight exactly 1 (it joins the routed experts' grouped linears,
  // model/fused_projections.h); -1 and 0 there too in a padded row.
  int32_t shared_expert_id = -1;
};

// Slots per row of expert_ids and weights: k, or k + 1 with the shared expert.
DSA_HD int32_t routing_slots(const MoeRoutingParams& p) {
  return p.top_k + (p.shared_expert_id >= 0 ? 1 : 0);
}

// Host checks (InvalidArgument): the shape rules above, routed_scaling_factor finite and > 0,
// shared_expert_id -1 or E, pointers.
Status validate(const MoeRoutingParams& p);

// CPU reference: sigmoid in double rounded to fp32; s' and the group sums in fp32 (one rounding
// each); selection by repeated arg-max with the lower index winning ties; weights in double,
// rounded once (a selection whose s sum is 0 gets weights 0). Checked mode: a non-finite logit or
// bias, or a negative row_len, is OutOfRange (nothing written). Unchecked: NaN scores rank below
// every number, and a negative row_len marks a padded row.
Status moe_routing_ref(const MoeRoutingParams& p);
// CUDA backend (device pointers): one warp per row; ids bit-exact with the reference.
Status moe_routing_cuda(const MoeRoutingParams& p);

}  // namespace dsa::kernels
