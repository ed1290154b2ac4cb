// Request placement across DP ranks by load (docs/multi_gpu.md). Each new request goes to the rank
// with the least outstanding tokens, ties to the lowest rank, and its cost is charged there at
// once, so a burst of arrivals spreads over the ranks instead of piling onto the idlest one.
// Pure and deterministic: every rank computes the same placement from the same agreed loads
// (StepPlan::loads) and the same arrivals, so no further message is needed to agree on owners.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsa/core/status.h"

namespace dsa::engine {

// A request's cost: prompt tokens to prefill plus the new tokens it may emit.
inline int64_t placement_cost(int64_t prompt_tokens, int64_t max_new_tokens) {
  return prompt_tokens + max_new_tokens;
}

// The rank of each request, in arrival order. InvalidArgument naming the entry for no ranks, a
// negative load or a negative cost.
StatusOr<std::vector<int32_t>> place_requests(std::span<const int64_t> loads,
                                              std::span<const int64_t> costs);

}  // namespace dsa::engine
