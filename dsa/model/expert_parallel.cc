#include "dsa/model/expert_parallel.h"

#include <fmt/format.h>

namespace dsa::model {

ExpertParallelTables expert_parallel_tables(int32_t num_experts, int32_t hidden, int32_t rank,
                                            int32_t size) {
  ExpertParallelTables t;
  const int32_t per = num_experts / size, lo = rank * per, hi = lo + per;
  for (int32_t e = 0; e < num_experts; ++e) {
    const bool mine = e >= lo && e < hi;
    t.owned.push_back(mine ? e : -1);
    t.foreign.push_back(mine ? -1 : 0);
  }
  t.negative_zero.assign(size_t(hidden), float_to_bf16(-0.0f));
  return t;
}

Status validate_expert_parallel(int32_t rank, int32_t size, const dist::DeviceCollective* group,
                                const ModelConfig& config) {
  if (size < 1) return invalid_argument(fmt::format("ep_size = {}: must be >= 1", size));
  if (rank < 0 || rank >= size) {
    return invalid_argument(fmt::format("ep_rank = {}: must be in [0, ep_size = {})", rank, size));
  }
  if (size == 1) return ok_status();
  const int64_t experts = config.n_routed_experts;
  if (experts <= 0) {
    return invalid_argument(
        fmt::format("ep_size = {}: the model has no routed experts to split", size));
  }
  if (experts % size != 0) {
    return invalid_argument(fmt::format(
        "ep_size = {}: must divide the {} routed experts (n_routed_experts)", size, experts));
  }
  if (group == nullptr) {
    return invalid_argument(
        fmt::format("ep_size = {}: ep_group is null (the ranks' device collective)", size));
  }
  if (group->world_size() != size || group->rank() != rank) {
    return invalid_argument(
        fmt::format("ep_group is rank {} of {}, the options say ep_rank = {} of ep_size = {}",
                    group->rank(), group->world_size(), rank, size));
  }
  return ok_status();
}

}  // namespace dsa::model
