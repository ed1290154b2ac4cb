// ModelConfig: the config.json of a DeepSeek-V3.2 or GLM-5 checkpoint (SPEC.md §8.1; GLM-5's
// spellings in docs/glm5.md), parsed and validated once at load so the rest of the runtime can
// trust every field. A rejected file yields a Status naming the file, the key and the value
// ("config.json: index_topk = 100: must be ...").
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dsa/core/status.h"

namespace dsa::model {

// rope_scaling (SPEC.md §8.3), or rope_parameters (GLM-5, newer transformers): YaRN, or plain
// RoPE ("default", GLM-5), which is YaRN's formula with factor 1 (no ramp, no mscale). For
// "default" the other fields hold neutral values (L0 = max_position_embeddings, betas 32 and 1,
// mscales 1) so the RoPE kernels' one validation covers both.
struct RopeScaling {
  std::string type;  // "yarn" or "default"
  double factor = 0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 0;
  double beta_slow = 0;
  double mscale = 0;
  double mscale_all_dim = 0;
};

// quantization_config (SPEC.md §8.1, §8.8): block-scaled FP8 weights.
struct QuantizationConfig {
  std::string quant_method;                    // "fp8"
  std::string fmt;                             // "e4m3"
  std::array<int64_t, 2> weight_block_size{};  // {128, 128}
  std::string activation_scheme;               // "dynamic"
  std::string scale_fmt;                       // "ue8m0", or "" when the key is absent
};

struct ModelConfig {
  // Contains "DeepseekV32ForCausalLM" (model_type "deepseek_v32") or "GlmMoeDsaForCausalLM"
  // (model_type "glm_moe_dsa", the GLM-5 family).
  std::vector<std::string> architectures;
  std::string model_type;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP
  int64_t moe_intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_nextn_predict_layers = 0;  // 0 or 1 (the MTP layer, SPEC.md §6.5)
  // From first_k_dense_replace, or from GLM-5's mlp_layer_types ("dense" x k, then "sparse").
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 0;  // 1 (absent in a GLM-5 config = 1)

  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // == num_attention_heads
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;  // 512
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;  // 64
  int64_t v_head_dim = 0;

  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 0;
  int64_t topk_group = 0;
  std::string topk_method;   // "noaux_tc"
  std::string scoring_func;  // "sigmoid"
  bool norm_topk_prob = false;
  double routed_scaling_factor = 0;

  int64_t index_n_heads = 0;   // 16, 32 or 64
  int64_t index_head_dim = 0;  // 128
  int64_t index_topk = 0;      // multiple of 64 in [64, 2048]
  bool indexer_rope_interleave = false;

  double rms_norm_eps = 0;
  double rope_theta = 0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  // -1 when the config has none (GLM-5: its prompts start with the chat template's own
  // "[gMASK]<sop>"); nothing is prepended then.
  int64_t bos_token_id = 0;
  // The first of eos_token_ids: the one the tokenizer calls its EOS.
  int64_t eos_token_id = 0;
  // Every id that ends a generation: eos_token_id as one integer or as a list (GLM-5:
  // [154820, 154827, 154829]); SGLang and vLLM stop on each of them, and so does the engine.
  std::vector<int64_t> eos_token_ids;
  std::optional<QuantizationConfig> quantization_config;

  // Layers < first_k_dense_replace use the dense MLP; every later one, and the MTP layer, is MoE
  // (SPEC.md §8.6, §6.5).
  bool is_moe_layer(int64_t layer) const { return layer >= first_k_dense_replace; }
  // Index of the MTP layer in the checkpoint (SPEC.md §6.5); only meaningful when has_mtp().
  int64_t mtp_layer_index() const { return num_hidden_layers; }
  bool has_mtp() const { return num_nextn_predict_layers > 0; }
  bool has_bos() const { return bos_token_id >= 0; }
  bool is_glm5() const { return model_type == "glm_moe_dsa"; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // SPEC.md §8.3: (qk_nope + qk_rope)^-1/2 * (0.1 * mscale_all_dim * ln(factor) + 1)^2.
  double sm_scale() const;
};

// Reads and validates `file`. Errors: kNotFound when the file cannot be opened, kInvalidArgument
// for a parse error (with the parser's position) or any key of the wrong type, out of range or
// missing.
StatusOr<ModelConfig> load_model_config(const std::filesystem::path& file);

// Same, on text already in memory; `file` only names the source in messages.
StatusOr<ModelConfig> parse_model_config(std::string_view text, const std::string& file);

}  // namespace dsa::model
