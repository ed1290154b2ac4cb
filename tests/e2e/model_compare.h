// Shared by the CUDA end-to-end tests: loading the tiny model on a backend, one-shot last-row
// logits, greedy generation through the engine, and the near-tie rule for divergences between two
// runs (SPEC.md §6.2): a divergence is legal only where the reference's top-two gap is below tau.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dsa/engine/engine.h"
#include "dsa/kernels/op_table.h"
#include "dsa/model/dsa_model.h"
#include "tests/e2e/golden.h"

namespace dsa::e2e {

constexpr double kNearTieTau = 0.05;  // near-tie threshold of the tiny model (SPEC.md §6.2)

const Golden& golden();
const kernels::OpTable* cuda_table();  // nullptr without a device

struct LoadOptions {
  int32_t d = 0;
  int32_t max_requests = 4;
  int32_t max_context = 1024;
  bool buckets = false;  // SPEC.md §5 default buckets up to max_requests
  bool graphs = false;
  bool poison = false;  // ModelOptions::poison_workspace
  bool row_ops = true;  // FuseOptions::row_ops (the attention's fused row-transform launches)
};
// DSA_POISON_WORKSPACE=1 in the environment: the GPU whole-model tests poison the workspace of
// every model they load on a device (ModelOptions::poison_workspace), so their CUDA-vs-CPU and
// replay-vs-eager comparisons also show a device buffer some consumer reads unwritten.
bool poison_workspace_from_env();
// The tiny checkpoint on `ops`; poisoned when o.poison, or on a device when
// poison_workspace_from_env().
std::unique_ptr<model::DsaModel> load_tiny(const kernels::OpTable& ops, const LoadOptions& o);

// Logits of the last `count` rows of `ids` from one EXTEND forward of a fresh request.
std::vector<float> last_rows(model::DsaModel& m, const std::vector<int32_t>& ids, int32_t count);
// Greedy outputs of `prompts`, run concurrently through the engine.
std::vector<std::vector<int32_t>> generate(model::DsaModel& m,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           int32_t new_tokens, engine::EngineOptions options = {});
std::vector<std::vector<int32_t>> golden_prompt_ids();

// Compares `got` with `want` (greedy outputs of `prompts`) prompt by prompt: identical, or
// diverging first at a near-tie of `reference`: its top-two logit gap below tau, or — when
// `reference` runs probed_cpu_ops() — a router decision of its forward over the shared prefix
// within kRouterTieMargin (tests/e2e/router_margin.h). Printed with both gaps under `label`.
// Returns the divergences without a near-tie.
int32_t divergences_without_near_tie(const std::string& label, model::DsaModel& reference,
                                     model::DsaModel& other,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const std::vector<std::vector<int32_t>>& want,
                                     const std::vector<std::vector<int32_t>>& got);

}  // namespace dsa::e2e
