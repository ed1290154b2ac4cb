// Expert parallelism of the routed experts (docs/multi_gpu.md, SPEC.md §8.6): ep_size ranks —
// the DP ranks — split the E routed experts, rank r owning [r E / ep_size, (r + 1) E / ep_size).
// The MoE of a forward (ffn.cc) then runs, on every rank, with the same collective calls:
//   1. route this rank's rows (row-local: the single-rank model's ids and weights);
//   2. all-gather every rank's rows and their expert ids (rows_pad rows each: the ranks agree on
//      it per forward, an idle rank's rows are padding with ids -1);
//   3. compute the slots (row, choice) of the gathered rows whose expert this rank owns, the
//      others masked to id -1 so the dispatch skips them, into slot order; a slot of another
//      rank's expert holds -0.0 (the additive identity: -0 + x == x for every x, +0 included);
//   4. reduce-scatter (sum) the slot outputs back to the rows' owners: each slot has one
//      computing rank, so its sum is that rank's value bit for bit, in any summation order;
//   5. the owner combines the slots with its routing weights exactly as one rank would.
// Each slot output is what the single-rank model computes for that slot (the grouped linear is
// row-local: batch-invariant), so the whole forward is bit-identical to the single-rank model's.
// The shared experts and the gate stay on each rank, over its own rows.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/dist/device_collective.h"
#include "dsa/model/model_config.h"

namespace dsa::model {

// What a block's MoE needs to run expert-parallel (BlockContext::ep); size 1 = every expert here.
struct ExpertParallel {
  int32_t rank = 0, size = 1;
  dist::DeviceCollective* group = nullptr;
  // Backend memory, made once at load (ExpertParallelTables):
  const int32_t* owned = nullptr;       // [E] e where this rank owns expert e, else -1
  const int32_t* foreign = nullptr;     // [E] 0 where another rank owns expert e, else -1
  const bf16* negative_zero = nullptr;  // [hidden] -0.0: the value of another rank's slot
  bool enabled() const { return size > 1; }
  int32_t first_expert(int32_t num_experts) const { return rank * (num_experts / size); }
};

// The host copies of the tables (the model keeps them; the weight store uploads them).
struct ExpertParallelTables {
  std::vector<int32_t> owned, foreign;
  std::vector<bf16> negative_zero;
};
ExpertParallelTables expert_parallel_tables(int32_t num_experts, int32_t hidden, int32_t rank,
                                            int32_t size);

// InvalidArgument naming the option (ModelOptions::ep_*) for what cannot run: size < 1, a rank
// outside [0, size), size > 1 with a model without routed experts or whose routed experts size
// does not divide, without a group, or with a group of another world size or rank.
Status validate_expert_parallel(int32_t rank, int32_t size, const dist::DeviceCollective* group,
                                const ModelConfig& config);

}  // namespace dsa::model
