// The weights of a DeepSeek-V3.2-architecture checkpoint in the layouts the forward pass reads:
// copied out of the safetensors mapping into host vectors (load_model_weights), or streamed into
// backend memory with the vectors left empty as keys (stream_model_weights, weight_stream.h).
// Indexer norms and the MoE score bias are kept as fp32
// (exact upcasts of bf16 or f32 storage); MLA's kv_b_proj is split into the absorbed-form matrices
// W_UK^T and W_UV, every head's in one [H, ...] tensor (SPEC.md §8.4, §8.8).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/model/checkpoint.h"
#include "dsa/model/model_config.h"

namespace dsa::model {

// A linear layer y = x W^T, W [out, in]: bf16, or e4m3 with a [ceil(out/128), ceil(in/128)] fp32
// weight_scale_inv (FP8 checkpoints).
struct LinearWeight {
  int32_t out = 0, in = 0;
  std::vector<bf16> bf16_w;
  std::vector<uint8_t> fp8_w;
  std::vector<float> scale_inv;
  // Set for an FP8 weight whose data lives only in backend memory (model_weight_layout).
  bool fp8 = false;
  bool is_fp8() const { return fp8 || !fp8_w.empty(); }
};

// One bf16 [out, in] matrix per attention head, head after head ([heads, out, in]), so one
// strided-batched linear (kernels/batched_linear) runs every head: the absorbed MLA's W_UK^T and
// W_UV, made at load from kv_b_proj (bf16 even for an FP8 checkpoint, SPEC.md §8.8).
struct HeadLinearWeight {
  int32_t heads = 0, out = 0, in = 0;
  std::vector<bf16> bf16_w;
};

struct IndexerWeights {
  LinearWeight wq_b;                      // [H_i * D_i, q_lora]
  LinearWeight wk;                        // [D_i, hidden]
  std::vector<float> k_norm_w, k_norm_b;  // [D_i]
  LinearWeight weights_proj;              // [H_i, hidden], run with an fp32 output
};

struct AttentionWeights {
  LinearWeight q_a, q_b, kv_a, o_proj;
  std::vector<bf16> q_a_norm, kv_a_norm;  // RMSNorm weights [q_lora], [kv_lora]
  // Absorbed form, per head h: w_uk_t's matrix h is [kv_lora, qk_nope] (so q_abs = q_nope W_UK is
  // a linear with weight W_UK^T), w_uv's is [v_head, kv_lora].
  HeadLinearWeight w_uk_t, w_uv;
  IndexerWeights indexer;
  // Not in a checkpoint: q_a, indexer.wk and kv_a, the three projections of the attention norm's
  // output, as one weight [q_lora + D_i + 576, hidden] (fused_projections.h); out 0 when not fused.
  LinearWeight qkv_a;
  // Not in a checkpoint either: q_b and indexer.wq_b, both of the normed q_a output, as one weight
  // [H * qk + H_i * D_i, q_lora]; out 0 when not fused.
  LinearWeight q_b_fused;
};

struct MlpWeights {
  LinearWeight gate, up, down;
};

struct MoeWeights {
  LinearWeight router;              // mlp.gate.weight [E, hidden], fp32 logits
  std::vector<float> score_bias;    // e_score_correction_bias [E]
  std::vector<MlpWeights> experts;  // routed
  std::optional<MlpWeights> shared;
};

struct DecoderLayerWeights {
  std::vector<bf16> input_norm, post_attention_norm;
  AttentionWeights attn;
  std::optional<MlpWeights> mlp;  // dense layers
  std::optional<MoeWeights> moe;  // MoE layers
};

struct MtpWeights {
  std::vector<bf16> enorm, hnorm, shared_head_norm;
  LinearWeight eh_proj;  // [hidden, 2 * hidden]: input = [enorm(emb) | hnorm(h)]
  DecoderLayerWeights block;
  std::optional<std::vector<bf16>> embed;  // own copy, else the target's (§8.2)
  std::optional<LinearWeight> head;        // own copy, else the target's lm_head
};

struct ModelWeights {
  std::vector<bf16> embed;  // [vocab, hidden]
  std::vector<DecoderLayerWeights> layers;
  std::vector<bf16> final_norm;
  LinearWeight lm_head;
  std::optional<MtpWeights> mtp;

  const std::vector<bf16>& mtp_embed() const { return mtp && mtp->embed ? *mtp->embed : embed; }
  const LinearWeight& mtp_head() const { return mtp && mtp->head ? *mtp->head : lm_head; }
};

// Checks the inventory (check_model_tensors) and copies every tensor out of the mappings into the
// host vectors (tests and tools that read the weights on the host). `progress`, when set, is
// called as LoadProgress says (checkpoint.h).
StatusOr<ModelWeights> load_model_weights(const Checkpoint& checkpoint, const ModelConfig& config,
                                          const LoadProgressFn& progress = {});

// Where stream_model_weights puts each vector's data: `key` is the host vector (at its final
// address, left empty), [src, src + bytes) its contents, valid only during the call (a mapping's
// pages, or a host temporary of one converted tensor).
using WeightSink = std::function<Status(const void* key, const void* src, size_t bytes)>;

// As load_model_weights, but into `out` (a default-constructed struct at the address the model
// keeps it at) with every vector left empty: stored bytes go to `sink` straight from the mapping,
// and the few converted tensors (f32-stored norms, bf16-stored scales and indexer norms, the
// per-head split of kv_b_proj) through a host temporary of that one tensor. So no host copy of
// the checkpoint is made. A sink error is returned with the tensor's file and name. `read_ahead`:
// a thread reads each shard the load reaches into the page cache ahead of it (shard_read_ahead.h).
Status stream_model_weights(const Checkpoint& checkpoint, const ModelConfig& config,
                            ModelWeights& out, const WeightSink& sink,
                            const LoadProgressFn& progress = {}, bool read_ahead = false);

// Every struct load_model_weights makes, with the shapes (LinearWeight out / in / fp8) and no data:
// every vector is empty. For weights made in backend memory (backend_random_weights.h); the MTP
// layer shares the target's embedding and head.
ModelWeights model_weight_layout(const ModelConfig& config);

}  // namespace dsa::model
