// GLM-5 (zai-org/GLM-5: model_type "glm_moe_dsa", architectures ["GlmMoeDsaForCausalLM"]) is the
// same DSA + MLA + MoE family as DeepSeek-V3.2, but its config.json is spelled differently and it
// has one feature dsa does not implement. Until those are mapped and tested it is refused; this
// says precisely why, from the config at hand, instead of a bare "unsupported model_type".
//
// What differs (from Hugging Face transformers' GlmMoeDsaConfig, the public reference for the
// format; no GLM-5 checkpoint was available to check against):
//   - RoPE: `rope_parameters` {rope_theta, rope_type} instead of V3.2's `rope_theta` and a yarn
//     `rope_scaling`;
//   - the MLP pattern: `mlp_layer_types` ("dense"/"sparse" per layer) may replace
//     `moe_layer_freq`;
//   - the indexer: `indexer_types` ("full"/"shared" per layer, or `index_topk_pattern` /
//     `index_topk_freq`) lets a layer reuse another layer's top-k; dsa runs every layer's indexer;
//   - `eos_token_id` may be a list (dsa stops on one id);
//   - other widths: qk_nope_head_dim 192, v_head_dim 256, q_lora_rank 2048, index_n_heads 32,
//     hidden_size 6144, num_attention_heads 64 (V3.2: 128, 128, 1536, 64, 7168, 128);
//   - routing keys V3.2 spells out (`scoring_func`, `topk_method`) are defaults there.
#pragma once

#include <string>

#include "dsa/model/json_reader.h"

namespace dsa::model {

// True for model_type "glm_moe_dsa" or "GlmMoeDsaForCausalLM" in architectures.
bool is_glm5_config(const JsonReader& r);

// The refusal: names model_type, what dsa supports, and each difference found in this config
// (keys it has that dsa does not read, keys dsa needs that it lacks, head widths above V3.2's).
std::string glm5_refusal(const JsonReader& r);

}  // namespace dsa::model
