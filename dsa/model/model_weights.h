// The weights of a DeepSeek-V3.2-architecture checkpoint, copied out of the safetensors mapping
// into aligned, owned buffers in the layouts the forward pass reads. Norm vectors are kept as fp32
// (exact upcasts of bf16 or f32 storage); MLA's kv_b_proj is split into the absorbed-form matrices
// W_UK^T and W_UV per head (SPEC.md §8.4, §8.8).
#pragma once

#include <cstdint>
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

struct IndexerWeights {
  LinearWeight wq_b;                      // [H_i * D_i, q_lora]
  LinearWeight wk;                        // [D_i, hidden]
  std::vector<float> k_norm_w, k_norm_b;  // [D_i]
  LinearWeight weights_proj;              // [H_i, hidden], run with an fp32 output
};

struct AttentionWeights {
  LinearWeight q_a, q_b, kv_a, o_proj;
  std::vector<bf16> q_a_norm, kv_a_norm;  // RMSNorm weights [q_lora], [kv_lora]
  // Absorbed form, per head h: w_uk_t[h] is [kv_lora, qk_nope] (so q_abs = q_nope W_UK is a linear
  // with weight W_UK^T), w_uv[h] is [v_head, kv_lora].
  std::vector<LinearWeight> w_uk_t, w_uv;
  IndexerWeights indexer;
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

// Checks the inventory (check_model_tensors) and copies every tensor out of the mappings.
// `progress`, when set, is called each time every tensor of one more file has been read.
StatusOr<ModelWeights> load_model_weights(const Checkpoint& checkpoint, const ModelConfig& config,
                                          const LoadProgressFn& progress = {});

// Every struct load_model_weights makes, with the shapes (LinearWeight out / in / fp8) and no data:
// every vector is empty. For weights made in backend memory (backend_random_weights.h); the MTP
// layer shares the target's embedding and head.
ModelWeights model_weight_layout(const ModelConfig& config);

}  // namespace dsa::model
