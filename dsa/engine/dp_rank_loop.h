// One DP rank's run to the end (docs/multi_gpu.md): the loop every rank takes, whether the ranks
// are threads of one process (dp_engine_group.h) or processes of their own (one per GPU, `dsa
// generate --dp-processes`). "Does any rank have work?" is itself a collective, taken by every rank
// before every step, so an idle rank keeps stepping (with padded forwards) while another works,
// and all ranks leave after the same step (SPEC.md §9 bug class 10: no rank skips a collective).
#pragma once

#include <cstdint>
#include <functional>

#include "dsa/core/status.h"
#include "dsa/engine/engine.h"

namespace dsa::engine {

// Steps `e` over its group (Engine::group()) until no rank has work; returns the steps taken.
// stop (may be empty): once it returns true this rank votes "no work", so the ranks leave together
// after the first step in which every rank saw it; a stop seen by some ranks only is outvoted by
// the others' work, never acted on alone. after_step (may be empty) runs after each step on this
// rank (releasing the requests written since the last step). The first error ends the loop.
StatusOr<int64_t> run_rank_to_completion(Engine& e, const std::function<bool()>& stop,
                                         const std::function<Status()>& after_step = {});

}  // namespace dsa::engine
