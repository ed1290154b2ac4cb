// The GLM-5 family's config.json (zai-org/GLM-5, GLM-5.1: model_type "glm_moe_dsa", architectures
// ["GlmMoeDsaForCausalLM"]): the same DSA + MLA + MoE model as DeepSeek-V3.2 (SPEC.md §8.1: "GLM-5
// family differences are config-driven"), spelled partly differently. model_config.cc reads the
// shared keys; this file reads the keys only GLM-5 has, and refuses what dsa does not run.
// docs/glm5.md lists the keys, their sources and each mapping.
//
// Read here:
//   - mlp_layer_types ("dense"/"sparse" per layer) -> first_k_dense_replace: dsa runs k dense
//     layers, then MoE, so only lists of that shape are accepted (the refusal names the index);
//   - IndexShare (GLM-5.2 on: indexer_types "full"/"shared", index_topk_pattern "F"/"S",
//     index_topk_freq + index_skip_topk_offset, index_share_for_mtp_iteration): out of SPEC's
//     scope (§8.1); accepted only when it makes every layer "full", which is what dsa runs;
//   - attention_bias, rope_interleave, qk_head_dim: checked against what dsa implements.
// rope_parameters (rope_reader.h) and an eos_token_id list (model_config.cc) are read for any
// config.
#pragma once

#include "dsa/core/status.h"
#include "dsa/model/json_reader.h"
#include "dsa/model/model_config.h"

namespace dsa::model {

// True for model_type "glm_moe_dsa" or "GlmMoeDsaForCausalLM" in architectures.
bool is_glm5_config(const JsonReader& r);

// mlp_layer_types, when present: must have num_hidden_layers entries, each "dense" or "sparse",
// "dense" exactly for layers [0, k); sets c->first_k_dense_replace = k. When first_k_dense_replace
// is present too it must equal k. Requires c->num_hidden_layers.
Status read_mlp_layer_types(const JsonReader& r, ModelConfig* c);

// The IndexShare keys, resolved as transformers' GlmMoeDsaConfig does (indexer_types, else
// index_topk_pattern, else index_topk_freq from index_skip_topk_offset); kUnimplemented naming
// the key and the first "shared" layer unless every layer is "full". index_share_for_mtp_iteration
// must be absent or false. Requires c->num_hidden_layers.
Status check_index_share(const JsonReader& r, const ModelConfig& c);

// attention_bias (dsa's projections have no bias) must be absent or false; rope_interleave (MLA
// q_pe/k_pe pairs, SPEC.md §8.3) absent or true; qk_head_dim, when present, qk_nope_head_dim +
// qk_rope_head_dim. Requires the attention widths.
Status check_glm5_attention_keys(const JsonReader& r, const ModelConfig& c);

}  // namespace dsa::model
