#include "dsa/engine/dp_rank_loop.h"

namespace dsa::engine {

StatusOr<int64_t> run_rank_to_completion(Engine& e, const std::function<bool()>& stop,
                                         const std::function<Status()>& after_step) {
  int64_t steps = 0;
  while (true) {
    int64_t work[] = {e.has_work() && !(stop && stop()) ? 1 : 0};
    DSA_RETURN_IF_ERROR(e.group().all_reduce(work, dist::ReduceOp::kMax));
    if (work[0] == 0) return steps;
    DSA_RETURN_IF_ERROR(e.step());
    ++steps;
    if (after_step) DSA_RETURN_IF_ERROR(after_step());
  }
}

}  // namespace dsa::engine
