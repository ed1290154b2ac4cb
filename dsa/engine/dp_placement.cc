#include "dsa/engine/dp_placement.h"

#include <fmt/format.h>

namespace dsa::engine {

StatusOr<std::vector<int32_t>> place_requests(std::span<const int64_t> loads,
                                              std::span<const int64_t> costs) {
  if (loads.empty()) return invalid_argument("place_requests: loads is empty (no ranks)");
  for (size_t r = 0; r < loads.size(); ++r) {
    if (loads[r] < 0) {
      return invalid_argument(
          fmt::format("place_requests: loads[{}] = {}: must be >= 0", r, loads[r]));
    }
  }
  std::vector<int64_t> load(loads.begin(), loads.end());
  std::vector<int32_t> out;
  out.reserve(costs.size());
  for (size_t i = 0; i < costs.size(); ++i) {
    if (costs[i] < 0) {
      return invalid_argument(
          fmt::format("place_requests: costs[{}] = {}: must be >= 0", i, costs[i]));
    }
    size_t best = 0;
    for (size_t r = 1; r < load.size(); ++r) {
      if (load[r] < load[best]) best = r;  // strict: ties stay with the lowest rank
    }
    load[best] += costs[i];
    out.push_back(static_cast<int32_t>(best));
  }
  return out;
}

}  // namespace dsa::engine
