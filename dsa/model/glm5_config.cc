#include "dsa/model/glm5_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dsa::model {

using nlohmann::json;

namespace {

// A well-formed config asking for something dsa does not run: the same text as r.bad, but
// kUnimplemented, so a caller can tell "this file is broken" from "this model is out of scope".
Status unsupported(const JsonReader& r, std::string_view key, const json& value,
                   std::string_view why) {
  return unimplemented(r.bad(key, value, why).message());
}

// A per-layer list of strings with num_hidden_layers entries, each one of `a` or `b`.
StatusOr<std::vector<std::string>> read_layer_list(const JsonReader& r, std::string_view key,
                                                   int64_t layers, const char* a, const char* b) {
  DSA_ASSIGN_OR_RETURN(const json* list, r.find(key));
  const std::string shape = fmt::format(
      "must be an array of num_hidden_layers = {} strings, each \"{}\" or \"{}\"", layers, a, b);
  if (!list->is_array() || int64_t(list->size()) != layers) return r.bad(key, *list, shape);
  std::vector<std::string> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const json& v = (*list)[i];
    if (!v.is_string() || (v.get<std::string>() != a && v.get<std::string>() != b)) {
      return r.bad(fmt::format("{}[{}]", key, i), v, fmt::format("must be \"{}\" or \"{}\"", a, b));
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

const char* const kShareWhy =
    "this layer reuses another layer's top-k (IndexShare, GLM-5.2 on), which is outside SPEC.md's "
    "scope (§8.1) and not implemented: dsa runs every layer's indexer, so it serves only configs "
    "whose layers are all \"full\"";

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

Status read_mlp_layer_types(const JsonReader& r, ModelConfig* c) {
  const int64_t layers = c->num_hidden_layers;
  DSA_ASSIGN_OR_RETURN(std::vector<std::string> types,
                       read_layer_list(r, "mlp_layer_types", layers, "dense", "sparse"));
  int64_t k = 0;
  while (k < layers && types[size_t(k)] == "dense") ++k;
  for (int64_t i = k; i < layers; ++i) {
    if (types[size_t(i)] == "dense") {
      // A dense layer after a MoE one: §8.6's layout (first k dense, then MoE) does not hold,
      // and the tensors of such a checkpoint are not the ones dsa expects.
      return unsupported(r, fmt::format("mlp_layer_types[{}]", i), "dense",
                         fmt::format("a dense layer after the MoE layer {}: dsa runs the first k "
                                     "layers dense and every later one MoE (SPEC.md §8.6)",
                                     k));
    }
  }
  if (r.has("first_k_dense_replace")) {
    int64_t given = 0;
    DSA_RETURN_IF_ERROR(r.get("first_k_dense_replace", &given));
    DSA_RETURN_IF_ERROR(r.require(given == k, "first_k_dense_replace", given,
                                  fmt::format("must equal the {} leading \"dense\" entries of "
                                              "mlp_layer_types",
                                              k)));
  }
  c->first_k_dense_replace = k;
  return ok_status();
}

Status check_index_share(const JsonReader& r, const ModelConfig& c) {
  const int64_t layers = c.num_hidden_layers;
  if (r.has("index_share_for_mtp_iteration")) {
    bool share = false;
    DSA_RETURN_IF_ERROR(r.get("index_share_for_mtp_iteration", &share));
    if (share) {
      return unsupported(r, "index_share_for_mtp_iteration", true,
                         "the MTP layer's draft steps would reuse the first step's top-k "
                         "(IndexShare), which is not implemented: dsa runs the MTP layer's "
                         "indexer on every draft step");
    }
  }
  // transformers' precedence: an explicit list, else the pattern, else the frequency.
  bool null_pattern = false;
  if (r.has("index_topk_pattern")) {
    DSA_ASSIGN_OR_RETURN(const json* p, r.find("index_topk_pattern"));
    null_pattern = p->is_null();
  }
  if (r.has("indexer_types")) {
    DSA_ASSIGN_OR_RETURN(std::vector<std::string> types,
                         read_layer_list(r, "indexer_types", layers, "full", "shared"));
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "shared") {
        return unsupported(r, fmt::format("indexer_types[{}]", i), "shared", kShareWhy);
      }
    }
    return ok_status();
  }
  if (r.has("index_topk_pattern") && !null_pattern) {
    DSA_ASSIGN_OR_RETURN(const json* p, r.find("index_topk_pattern"));
    const std::string shape = fmt::format(
        "must be null or a string of num_hidden_layers = {} letters, each 'F' or 'S'", layers);
    if (!p->is_string() || int64_t(p->get<std::string>().size()) != layers) {
      return r.bad("index_topk_pattern", *p, shape);
    }
    const std::string s = p->get<std::string>();
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == 'F') continue;
      if (s[i] != 'S') return r.bad("index_topk_pattern", *p, shape);
      return unsupported(r, "index_topk_pattern", *p,
                         fmt::format("layer {} is 'S': {}", i, kShareWhy));
    }
    return ok_status();
  }
  int64_t freq = 1;
  if (r.has("index_topk_freq")) DSA_RETURN_IF_ERROR(r.get("index_topk_freq", &freq));
  DSA_RETURN_IF_ERROR(r.require(freq >= 1, "index_topk_freq", freq, "must be >= 1"));
  int64_t offset = 2;  // transformers' default
  if (r.has("index_skip_topk_offset")) {
    DSA_RETURN_IF_ERROR(r.get_in_range("index_skip_topk_offset", 0, layers, &offset));
  }
  // Layer i runs its own indexer when max(i - offset + 1, 0) is a multiple of freq.
  for (int64_t i = 0; i < layers; ++i) {
    if (std::max<int64_t>(i - offset + 1, 0) % freq == 0) continue;
    return unsupported(r, "index_topk_freq", freq,
                       fmt::format("with index_skip_topk_offset = {}, layer {} is \"shared\": {}",
                                   offset, i, kShareWhy));
  }
  return ok_status();
}

Status check_glm5_attention_keys(const JsonReader& r, const ModelConfig& c) {
  if (r.has("attention_bias")) {
    bool bias = false;
    DSA_RETURN_IF_ERROR(r.get("attention_bias", &bias));
    if (bias) {
      return unsupported(r, "attention_bias", true,
                         "dsa's attention projections have no bias (SPEC.md §8.2)");
    }
  }
  if (r.has("rope_interleave")) {
    bool interleave = true;
    DSA_RETURN_IF_ERROR(r.get("rope_interleave", &interleave));
    if (!interleave) {
      return unsupported(r, "rope_interleave", false,
                         "dsa's MLA RoPE pairs (x[2i], x[2i+1]) (SPEC.md §8.3)");
    }
  }
  if (r.has("qk_head_dim")) {
    int64_t v = 0;
    DSA_RETURN_IF_ERROR(r.get("qk_head_dim", &v));
    DSA_RETURN_IF_ERROR(r.require(
        v == c.qk_head_dim(), "qk_head_dim", v,
        fmt::format("must equal qk_nope_head_dim + qk_rope_head_dim = {}", c.qk_head_dim())));
  }
  return ok_status();
}

}  // namespace dsa::model
