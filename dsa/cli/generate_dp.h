// `dsa generate --dp-size N` on the CPU: the prompts of the run over N data-parallel ranks in this
// process (engine/dp_engine_group.h, the documented stand-in for one process per GPU,
// docs/multi_gpu.md). Each prompt goes to the least-loaded rank as it is added; every rank then
// steps on its own thread, idle ranks with padded forwards, until none has work. Results are
// written after the run in prompt order: the ranks finish requests concurrently, and request ids
// are per rank, so writing them as they finish would need the callbacks to know their rank.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "dsa/cli/generate_report.h"
#include "dsa/core/status.h"
#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"

namespace dsa::cli {

// What the summary needs of the run, every rank merged.
struct DpRunResult {
  engine::EngineMetrics metrics;
  model::ForwardTiming timing;  // summed over the ranks' models
  runtime::GraphStats graphs;   // summed over the ranks' models
  DpSummary dp;
};

// One rank per model (same weights, same options). Request i is requests[i]; refused ones and
// finished ones are written to `report` (finished ones after the run, in prompt order). stop:
// polled by every rank's thread (a signal's flag); the ranks then leave after the same step and
// what finished is written. An error concerns the whole run (a rank's failed step, rank named).
StatusOr<DpRunResult> run_dp(const std::vector<std::unique_ptr<model::DsaModel>>& models,
                             const engine::EngineOptions& options,
                             std::vector<engine::GenerationRequest> requests,
                             GenerateReport& report, const std::function<bool()>& stop);

// "--dp-size 2: 2 model instances on the CPU, 2 x 12.3 MiB (weights 10.0 MiB, KV cache 2.0 MiB,
// outputs 0.3 MiB) = 24.6 MiB": what the copies cost, from each model's cache plan.
std::string describe_dp_memory(const std::vector<std::unique_ptr<model::DsaModel>>& models);

}  // namespace dsa::cli
