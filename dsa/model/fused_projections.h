// Projections fused at load, so a forward reads their shared input once and launches once where
// it launched several (SGLang's fused_qkv_a_proj_with_mqa and shared-experts fusion):
//  - qkv_a: q_a, the indexer's wk and kv_a, the three linears of the attention norm's output, as
//    one weight of their rows in that order (AttentionWeights::qkv_a). q_a (q_lora rows) and wk
//    (D_i = 128 rows) first keep every FP8 scale block inside one part; kv_a's 576 rows, which end
//    inside a block, come last. The forward reads each part's columns of the one output.
//  - q_b: q_b and the indexer's wq_b, the two linears of the normed q_a output, as one weight
//    (AttentionWeights::q_b_fused; q_b's H x 192 rows end on a scale block). The absorbed query's
//    RoPE reads q_pe from its columns and the indexer's queries are copied out of the others.
//  - the shared expert as entry E of the routed experts' grouped tables, routed to every real row
//    with weight exactly 1 (MoeRoutingParams::shared_expert_id), so the grouped linears run it
//    and the combine adds it where it added the separate MLP's output. Only where the shared
//    expert has the routed experts' shapes (n_shared_experts = 1) and form, and not under expert
//    parallelism (each rank would run it).
// Each output value is the same dot product either way; on CUDA the GEMM tiling differs (class T).
#pragma once

#include <string>

#include "dsa/core/status.h"
#include "dsa/model/model_weights.h"
#include "dsa/model/weight_store.h"

namespace dsa::model {

struct FuseOptions {
  bool qkv_a = true;           // --disable-fused-qkv-a turns it off
  bool q_b = true;             // --disable-fused-q-b turns it off
  bool shared_experts = true;  // --disable-shared-experts-fusion turns it off
  // Not a load-time fusion: the forward's attention row transforms as two fused launches
  // (BlockContext::fused_row_ops); --disable-fused-row-ops turns it off.
  bool row_ops = true;
};

// Fuses every layer's (and the MTP block's) projections where the rules above allow, after the
// weights are in `store` (its expert tables built). Skipped silently where a layer does not
// qualify (mixed weight forms, another shared expert width). Returns how many layers fused each.
struct FuseCounts {
  int32_t qkv_a = 0, q_b = 0, shared_experts = 0;
};
// "fused at load: ..." for the load summary.
std::string describe_fusion(const FuseCounts& counts);

StatusOr<FuseCounts> fuse_projections(const FuseOptions& options, bool expert_parallel,
                                      ModelWeights& w, WeightStore& store);

}  // namespace dsa::model
