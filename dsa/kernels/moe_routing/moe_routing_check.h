// `dsa check` entry for MoE routing (SPEC.md §8.6). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/moe_routing/moe_routing.h"

namespace dsa::kernels {

using MoeRoutingFn = Status (*)(const MoeRoutingParams&);

// Runs `op` on `tokens` rows (every fifth row padded through row_len = 0) whose logits and bias
// come from small discrete sets, so ties occur at every stage, and on continuous rows; routing
// factor 2.5. The independent formulation picks the group set and the expert set as the unique
// subsets that outrank everything left out (brute force over all subsets when E <= 16, full
// sorts otherwise), with sigmoid and weights in long double. Ids must match exactly, weights
// within 1e-6 relative. OK on pass; the first mismatch otherwise.
Status check_moe_routing(MoeRoutingFn op, int32_t tokens, int32_t experts, int32_t groups,
                         int32_t topk_group, int32_t top_k, uint64_t seed);

}  // namespace dsa::kernels
