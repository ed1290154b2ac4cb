#include "dsa/model/glm5_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <vector>

namespace dsa::model {

using nlohmann::json;

namespace {

// Top-level keys read_model_config requires (model_config.cc); a GLM-5 config lacking one would
// fail there anyway, so they are listed up front.
constexpr const char* kRequiredKeys[] = {"architectures",
                                         "bos_token_id",
                                         "eos_token_id",
                                         "first_k_dense_replace",
                                         "hidden_size",
                                         "index_head_dim",
                                         "index_n_heads",
                                         "index_topk",
                                         "intermediate_size",
                                         "kv_lora_rank",
                                         "max_position_embeddings",
                                         "moe_intermediate_size",
                                         "moe_layer_freq",
                                         "n_group",
                                         "n_routed_experts",
                                         "n_shared_experts",
                                         "norm_topk_prob",
                                         "num_attention_heads",
                                         "num_experts_per_tok",
                                         "num_hidden_layers",
                                         "num_key_value_heads",
                                         "num_nextn_predict_layers",
                                         "q_lora_rank",
                                         "qk_nope_head_dim",
                                         "qk_rope_head_dim",
                                         "rms_norm_eps",
                                         "rope_scaling",
                                         "rope_theta",
                                         "routed_scaling_factor",
                                         "scoring_func",
                                         "tie_word_embeddings",
                                         "topk_group",
                                         "topk_method",
                                         "v_head_dim",
                                         "vocab_size"};

// GLM-5 keys with no V3.2 counterpart dsa reads, and what each would need.
struct Extra {
  const char* key;
  const char* why;
};
constexpr Extra kExtraKeys[] = {
    {"rope_parameters",
     "RoPE as {rope_theta, rope_type}; dsa reads rope_theta + yarn rope_scaling"},
    {"mlp_layer_types",
     "a per-layer dense/sparse MLP list; dsa reads first_k_dense_replace + "
     "moe_layer_freq = 1"},
    {"indexer_types",
     "layers that reuse another layer's top-k (\"shared\"); not implemented: "
     "dsa runs every layer's indexer"},
    {"index_topk_pattern", "the shared-indexer schedule as a pattern; not implemented"},
    {"index_topk_freq", "the shared-indexer schedule as a frequency; not implemented"},
    {"index_skip_topk_offset", "the shared-indexer schedule's offset; not implemented"},
};

// Head widths above V3.2's (testdata/deepseek-v3.2/config.json), the widest any dsa test runs
// (the tiny model's are narrower); the config reader would accept them, so they are named here.
struct Width {
  const char* key;
  int64_t v32;
};
constexpr Width kWidths[] = {{"qk_nope_head_dim", 128}, {"v_head_dim", 128}};

}  // namespace

bool is_glm5_config(const JsonReader& r) {
  if (r.has("model_type")) {
    std::string t;
    if (r.get("model_type", &t).ok() && t == "glm_moe_dsa") return true;
  }
  StatusOr<const json*> arch = r.find("architectures");
  if (!arch.ok() || !(*arch)->is_array()) return false;
  for (const json& a : **arch) {
    if (a.is_string() && a.get<std::string>() == "GlmMoeDsaForCausalLM") return true;
  }
  return false;
}

std::string glm5_refusal(const JsonReader& r) {
  std::vector<std::string> found;
  for (const Extra& e : kExtraKeys) {
    if (r.has(e.key)) found.push_back(fmt::format("{} ({})", e.key, e.why));
  }
  if (StatusOr<const json*> eos = r.find("eos_token_id"); eos.ok() && (*eos)->is_array()) {
    found.push_back(
        fmt::format("eos_token_id {} (a list; dsa stops on one id)", json_for_message(**eos)));
  }
  for (const Width& w : kWidths) {
    int64_t v = 0;
    if (r.has(w.key) && r.get(w.key, &v).ok() && v > w.v32) {
      found.push_back(
          fmt::format("{} = {} (above V3.2's {}, the widest dsa is tested with)", w.key, v, w.v32));
    }
  }
  std::vector<std::string> missing;
  for (const char* key : kRequiredKeys) {
    if (!r.has(key)) missing.push_back(key);
  }
  std::string msg = fmt::format(
      "{}: model_type \"glm_moe_dsa\" / GlmMoeDsaForCausalLM (GLM-5) is not supported yet: dsa "
      "serves DeepSeek-V3.2 configs only (architectures [\"DeepseekV32ForCausalLM\"], model_type "
      "\"deepseek_v32\")",
      r.file());
  if (!found.empty()) msg += fmt::format("; this config has: {}", fmt::join(found, "; "));
  if (!missing.empty()) {
    msg += fmt::format("; it lacks keys dsa requires: {}", fmt::join(missing, ", "));
  }
  return msg;
}

}  // namespace dsa::model
