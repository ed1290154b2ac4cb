#include "dsa/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "dsa/model/glm5_config.h"
#include "dsa/model/json_reader.h"
#include "dsa/model/model_limits.h"
#include "dsa/model/rope_reader.h"

namespace dsa::model {

using nlohmann::json;

namespace {

bool one_of(int64_t v, std::initializer_list<int64_t> allowed) {
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

// Reads a width that the grouped expert GEMM loads in 16-byte rows (moe_dispatch: in_features a
// multiple of 8): hidden_size feeds gate/up, moe_intermediate_size feeds down.
Status get_width_of_8(const JsonReader& r, std::string_view key, int64_t hi, int64_t* out) {
  DSA_RETURN_IF_ERROR(r.get_in_range(key, 1, hi, out));
  return r.require(*out % 8 == 0, key, *out,
                   "must be a multiple of 8 (the expert GEMM loads 16-byte rows)");
}

// `a * b` (two validated sizes, so no overflow) must stay within kMaxWidth: it is the row count
// of a stacked projection.
Status require_width(const JsonReader& r, const std::string& what, int64_t a, int64_t b) {
  int64_t product = 0;
  if (!__builtin_mul_overflow(a, b, &product) && product <= kMaxWidth) return ok_status();
  return invalid_argument(r.file() + ": " + what + " = " + std::to_string(a) + " * " +
                          std::to_string(b) + ": must be <= " + std::to_string(kMaxWidth));
}

// A double that the kernels take as fp32 (eps, scaling factors): positive, and finite after the
// conversion, which a finite double above FLT_MAX is not.
Status get_positive_f32(const JsonReader& r, std::string_view key, double* out) {
  DSA_RETURN_IF_ERROR(r.get(key, out));
  return r.require(*out > 0 && *out <= std::numeric_limits<float>::max(), key, *out,
                   "must be > 0 and a finite fp32");
}

// The two families dsa serves: the architecture and model_type must name the same one.
struct Family {
  const char* architecture;
  const char* model_type;
};
constexpr Family kV32{"DeepseekV32ForCausalLM", "deepseek_v32"};
constexpr Family kGlm5{"GlmMoeDsaForCausalLM", "glm_moe_dsa"};

Status read_identity(const JsonReader& r, ModelConfig* c) {
  const Family& f = is_glm5_config(r) ? kGlm5 : kV32;
  DSA_ASSIGN_OR_RETURN(const json* arch, r.find("architectures"));
  bool found = false;
  if (arch->is_array()) {
    for (const json& a : *arch) {
      if (!a.is_string()) return r.bad("architectures", *arch, "must be an array of strings");
      c->architectures.push_back(a.get<std::string>());
      found = found || c->architectures.back() == f.architecture;
    }
  }
  DSA_RETURN_IF_ERROR(r.require(
      found, "architectures", *arch,
      &f == &kGlm5 ? "must be an array containing \"GlmMoeDsaForCausalLM\" (model_type is "
                     "\"glm_moe_dsa\")"
                   : "must be an array containing \"DeepseekV32ForCausalLM\""));
  DSA_RETURN_IF_ERROR(r.get("model_type", &c->model_type));
  return r.require(c->model_type == f.model_type, "model_type", c->model_type,
                   &f == &kGlm5 ? "must be \"glm_moe_dsa\" (architectures names "
                                  "GlmMoeDsaForCausalLM)"
                                : "must be \"deepseek_v32\"");
}

// Every count and width is capped (model_limits.h) before anything is sized from it.
Status read_sizes(const JsonReader& r, ModelConfig* c) {
  DSA_RETURN_IF_ERROR(r.get_in_range("vocab_size", 1, kMaxVocabSize, &c->vocab_size));
  DSA_RETURN_IF_ERROR(get_width_of_8(r, "hidden_size", kMaxHiddenSize, &c->hidden_size));
  DSA_RETURN_IF_ERROR(r.get_in_range("intermediate_size", 1, kMaxWidth, &c->intermediate_size));
  DSA_RETURN_IF_ERROR(
      get_width_of_8(r, "moe_intermediate_size", kMaxWidth, &c->moe_intermediate_size));
  DSA_RETURN_IF_ERROR(r.get_in_range("num_hidden_layers", 1, kMaxLayers, &c->num_hidden_layers));
  DSA_RETURN_IF_ERROR(r.get("num_nextn_predict_layers", &c->num_nextn_predict_layers));
  DSA_RETURN_IF_ERROR(r.require(one_of(c->num_nextn_predict_layers, {0, 1}),
                                "num_nextn_predict_layers", c->num_nextn_predict_layers,
                                "must be 0 or 1 (one MTP layer, SPEC §6.5)"));
  if (r.has("mlp_layer_types")) {
    // GLM-5's per-layer spelling of the same layout (glm5_config.h).
    DSA_RETURN_IF_ERROR(read_mlp_layer_types(r, c));
  } else {
    DSA_RETURN_IF_ERROR(r.get("first_k_dense_replace", &c->first_k_dense_replace));
  }
  DSA_RETURN_IF_ERROR(r.require(
      c->first_k_dense_replace >= 0 && c->first_k_dense_replace <= c->num_hidden_layers,
      "first_k_dense_replace", c->first_k_dense_replace,
      "must be in [0, num_hidden_layers = " + std::to_string(c->num_hidden_layers) + "]"));
  // transformers' GlmMoeDsaConfig has no moe_layer_freq (its mlp_layer_types says it all).
  c->moe_layer_freq = 1;
  if (!c->is_glm5() || r.has("moe_layer_freq")) {
    DSA_RETURN_IF_ERROR(r.get("moe_layer_freq", &c->moe_layer_freq));
  }
  // §8.6: every layer from first_k_dense_replace on is MoE; interleaved dense layers are not a
  // V3.2 shape and would silently change which tensors exist.
  DSA_RETURN_IF_ERROR(r.require(c->moe_layer_freq == 1, "moe_layer_freq", c->moe_layer_freq,
                                "must be 1 (every layer from first_k_dense_replace is MoE)"));
  DSA_RETURN_IF_ERROR(
      r.get_in_range("max_position_embeddings", 1, kMaxPositions, &c->max_position_embeddings));
  return ok_status();
}

// The fixed widths are those the kernels are built for (SPEC.md §8.7: they stay real even in the
// tiny model).
Status read_attention(const JsonReader& r, ModelConfig* c) {
  DSA_RETURN_IF_ERROR(r.get("num_attention_heads", &c->num_attention_heads));
  DSA_RETURN_IF_ERROR(r.require(one_of(c->num_attention_heads, {16, 32, 64, 128}),
                                "num_attention_heads", c->num_attention_heads,
                                "must be 16, 32, 64 or 128"));
  DSA_RETURN_IF_ERROR(r.get("num_key_value_heads", &c->num_key_value_heads));
  DSA_RETURN_IF_ERROR(
      r.require(c->num_key_value_heads == c->num_attention_heads, "num_key_value_heads",
                c->num_key_value_heads,
                "must equal num_attention_heads = " + std::to_string(c->num_attention_heads)));
  DSA_RETURN_IF_ERROR(r.get_in_range("q_lora_rank", 1, kMaxWidth, &c->q_lora_rank));
  DSA_RETURN_IF_ERROR(r.get("kv_lora_rank", &c->kv_lora_rank));
  DSA_RETURN_IF_ERROR(
      r.require(c->kv_lora_rank == 512, "kv_lora_rank", c->kv_lora_rank, "must be 512"));
  DSA_RETURN_IF_ERROR(r.get_in_range("qk_nope_head_dim", 1, kMaxHeadDim, &c->qk_nope_head_dim));
  DSA_RETURN_IF_ERROR(r.get("qk_rope_head_dim", &c->qk_rope_head_dim));
  DSA_RETURN_IF_ERROR(
      r.require(c->qk_rope_head_dim == 64, "qk_rope_head_dim", c->qk_rope_head_dim, "must be 64"));
  DSA_RETURN_IF_ERROR(r.get_in_range("v_head_dim", 1, kMaxHeadDim, &c->v_head_dim));
  return ok_status();
}

// The rows of q_b_proj and kv_b_proj and the columns of o_proj (SPEC.md §8.2) stay within
// kMaxWidth by the caps alone.
static_assert(128 * (kMaxHeadDim + kMaxHeadDim) <= kMaxWidth);

Status read_indexer(const JsonReader& r, ModelConfig* c) {
  DSA_RETURN_IF_ERROR(r.get("index_n_heads", &c->index_n_heads));
  DSA_RETURN_IF_ERROR(r.require(one_of(c->index_n_heads, {16, 32, 64}), "index_n_heads",
                                c->index_n_heads, "must be 16, 32 or 64"));
  DSA_RETURN_IF_ERROR(r.get("index_head_dim", &c->index_head_dim));
  DSA_RETURN_IF_ERROR(
      r.require(c->index_head_dim == 128, "index_head_dim", c->index_head_dim, "must be 128"));
  DSA_RETURN_IF_ERROR(r.get("index_topk", &c->index_topk));
  DSA_RETURN_IF_ERROR(
      r.require(c->index_topk >= 64 && c->index_topk <= 2048 && c->index_topk % 64 == 0,
                "index_topk", c->index_topk, "must be a multiple of 64 in [64, 2048]"));
  c->indexer_rope_interleave = false;  // absent = false (SPEC.md §8.1)
  if (r.has("indexer_rope_interleave")) {
    DSA_RETURN_IF_ERROR(r.get("indexer_rope_interleave", &c->indexer_rope_interleave));
  }
  return ok_status();
}

Status read_moe(const JsonReader& r, ModelConfig* c) {
  // The router needs two experts per group at least (below), so two experts in all.
  DSA_RETURN_IF_ERROR(
      r.get_in_range("n_routed_experts", 2, kMaxRoutedExperts, &c->n_routed_experts));
  DSA_RETURN_IF_ERROR(
      r.get_in_range("n_shared_experts", 0, kMaxSharedExperts, &c->n_shared_experts));
  // HF fuses the shared experts into one MLP n_shared_experts times an expert's width.
  DSA_RETURN_IF_ERROR(require_width(r, "n_shared_experts * moe_intermediate_size",
                                    c->n_shared_experts, c->moe_intermediate_size));
  DSA_RETURN_IF_ERROR(r.get("n_group", &c->n_group));
  DSA_RETURN_IF_ERROR(
      r.require(c->n_group >= 1 && c->n_group <= c->n_routed_experts, "n_group", c->n_group,
                "must be in [1, n_routed_experts = " + std::to_string(c->n_routed_experts) + "]"));
  const std::string groups = "n_group = " + std::to_string(c->n_group);
  // noaux_tc scores a group by the sum of its two largest experts (§8.6).
  DSA_RETURN_IF_ERROR(
      r.require(c->n_routed_experts % c->n_group == 0 && c->n_routed_experts / c->n_group >= 2,
                "n_routed_experts", c->n_routed_experts,
                "must be divisible by " + groups + " with at least 2 experts per group"));
  DSA_RETURN_IF_ERROR(r.get("topk_group", &c->topk_group));
  DSA_RETURN_IF_ERROR(r.require(c->topk_group >= 1 && c->topk_group <= c->n_group, "topk_group",
                                c->topk_group, "must be in [1, " + groups + "]"));
  DSA_RETURN_IF_ERROR(r.get("num_experts_per_tok", &c->num_experts_per_tok));
  // The chosen experts come from the kept groups only, so those must hold enough of them.
  const int64_t selectable = c->topk_group * (c->n_routed_experts / c->n_group);
  DSA_RETURN_IF_ERROR(r.require(c->num_experts_per_tok >= 1 && c->num_experts_per_tok <= selectable,
                                "num_experts_per_tok", c->num_experts_per_tok,
                                "must be in [1, topk_group * n_routed_experts / n_group = " +
                                    std::to_string(selectable) + "] (and so <= n_routed_experts)"));
  // GLM-5's router is V3.2's; transformers' GlmMoeDsaConfig leaves these two keys at those
  // defaults, so a GLM-5 config may omit them.
  c->topk_method = "noaux_tc";
  c->scoring_func = "sigmoid";
  const bool glm = c->is_glm5();
  if (!glm || r.has("topk_method")) DSA_RETURN_IF_ERROR(r.get("topk_method", &c->topk_method));
  DSA_RETURN_IF_ERROR(r.require(c->topk_method == "noaux_tc", "topk_method", c->topk_method,
                                "unsupported; only \"noaux_tc\" is implemented"));
  if (!glm || r.has("scoring_func")) DSA_RETURN_IF_ERROR(r.get("scoring_func", &c->scoring_func));
  DSA_RETURN_IF_ERROR(r.require(c->scoring_func == "sigmoid", "scoring_func", c->scoring_func,
                                "unsupported; only \"sigmoid\" is implemented"));
  DSA_RETURN_IF_ERROR(r.get("norm_topk_prob", &c->norm_topk_prob));
  return get_positive_f32(r, "routed_scaling_factor", &c->routed_scaling_factor);
}

// eos_token_id: one id, or a non-empty list of them (GLM-5), each a token of the vocabulary.
Status read_eos(const JsonReader& r, ModelConfig* c, const std::string& vocab) {
  DSA_ASSIGN_OR_RETURN(const json* eos, r.find("eos_token_id"));
  c->eos_token_ids.clear();
  if (!eos->is_array()) {
    DSA_RETURN_IF_ERROR(r.get("eos_token_id", &c->eos_token_id));
    DSA_RETURN_IF_ERROR(r.require(c->eos_token_id >= 0 && c->eos_token_id < c->vocab_size,
                                  "eos_token_id", c->eos_token_id, vocab));
    c->eos_token_ids.push_back(c->eos_token_id);
    return ok_status();
  }
  const std::string list_rule =
      "must be a token id or a non-empty array of token ids in [0, "
      "vocab_size = " +
      std::to_string(c->vocab_size) + ")";
  DSA_RETURN_IF_ERROR(r.require(!eos->empty() && eos->size() <= 1024, "eos_token_id", *eos,
                                list_rule + " (at most 1024)"));
  for (const json& v : *eos) {
    const bool ok =
        v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < c->vocab_size;
    DSA_RETURN_IF_ERROR(r.require(ok, "eos_token_id", *eos, list_rule));
    c->eos_token_ids.push_back(v.get<int64_t>());
  }
  c->eos_token_id = c->eos_token_ids.front();
  return ok_status();
}

Status read_quantization(const JsonReader& parent, QuantizationConfig* q) {
  DSA_ASSIGN_OR_RETURN(JsonReader r, parent.child("quantization_config"));
  DSA_RETURN_IF_ERROR(r.get("quant_method", &q->quant_method));
  DSA_RETURN_IF_ERROR(r.require(q->quant_method == "fp8", "quant_method", q->quant_method,
                                "unsupported; only \"fp8\" is implemented"));
  DSA_RETURN_IF_ERROR(r.get("fmt", &q->fmt));
  DSA_RETURN_IF_ERROR(r.require(q->fmt == "e4m3", "fmt", q->fmt, "must be \"e4m3\""));
  DSA_ASSIGN_OR_RETURN(const json* block, r.find("weight_block_size"));
  DSA_RETURN_IF_ERROR(r.require(*block == json::array({128, 128}), "weight_block_size", *block,
                                "must be [128, 128]"));
  q->weight_block_size = {128, 128};
  DSA_RETURN_IF_ERROR(r.get("activation_scheme", &q->activation_scheme));
  DSA_RETURN_IF_ERROR(r.require(q->activation_scheme == "dynamic", "activation_scheme",
                                q->activation_scheme, "must be \"dynamic\""));
  q->scale_fmt.clear();
  if (r.has("scale_fmt")) {
    DSA_RETURN_IF_ERROR(r.get("scale_fmt", &q->scale_fmt));
    DSA_RETURN_IF_ERROR(r.require(q->scale_fmt == "ue8m0", "scale_fmt", q->scale_fmt,
                                  "must be \"ue8m0\" when present"));
  }
  return ok_status();
}

Status read_misc(const JsonReader& r, ModelConfig* c) {
  DSA_RETURN_IF_ERROR(r.get("rms_norm_eps", &c->rms_norm_eps));
  // The norms add it in fp32: it must not round to 0 there, and >= 1 is no epsilon.
  DSA_RETURN_IF_ERROR(r.require(
      c->rms_norm_eps >= std::numeric_limits<float>::min() && c->rms_norm_eps < 1, "rms_norm_eps",
      c->rms_norm_eps, "must be in [1.17549435e-38, 1) (a normal fp32 below 1)"));
  DSA_RETURN_IF_ERROR(read_rope(r, c));
  DSA_RETURN_IF_ERROR(r.get("tie_word_embeddings", &c->tie_word_embeddings));
  // §8.2 lists lm_head.weight as its own tensor; a tied checkpoint would not carry it.
  DSA_RETURN_IF_ERROR(r.require(!c->tie_word_embeddings, "tie_word_embeddings",
                                c->tie_word_embeddings, "must be false (SPEC §8.2)"));
  const std::string vocab =
      "must be a token id in [0, vocab_size = " + std::to_string(c->vocab_size) + ")";
  // GLM-5's config.json has no bos_token_id: its prompts begin with the chat template's own
  // "[gMASK]<sop>", and nothing is prepended (-1, ModelConfig::has_bos).
  if (c->is_glm5() && !r.has("bos_token_id")) {
    c->bos_token_id = -1;
  } else {
    DSA_RETURN_IF_ERROR(r.get("bos_token_id", &c->bos_token_id));
    DSA_RETURN_IF_ERROR(r.require(c->bos_token_id >= 0 && c->bos_token_id < c->vocab_size,
                                  "bos_token_id", c->bos_token_id, vocab));
  }
  DSA_RETURN_IF_ERROR(read_eos(r, c, vocab));
  if (r.has("quantization_config")) {
    c->quantization_config.emplace();
    DSA_RETURN_IF_ERROR(read_quantization(r, &*c->quantization_config));
  }
  return ok_status();
}

// The attention kernels take sm_scale as fp32; absurd but finite mscale_all_dim or factor values
// would make it overflow there.
Status check_sm_scale(const JsonReader& r, const ModelConfig& c) {
  const double scale = c.sm_scale();
  if (scale <= std::numeric_limits<float>::max()) return ok_status();
  return invalid_argument(r.file() +
                          ": rope_scaling: sm_scale = (0.1 * mscale_all_dim * ln(factor) + 1)^2 / "
                          "sqrt(qk_nope_head_dim + qk_rope_head_dim) = " +
                          std::to_string(scale) + ": must be a finite fp32");
}

}  // namespace

double ModelConfig::sm_scale() const {
  const double m = 0.1 * rope_scaling.mscale_all_dim * std::log(rope_scaling.factor) + 1.0;
  return m * m / std::sqrt(static_cast<double>(qk_head_dim()));
}

StatusOr<ModelConfig> parse_model_config(std::string_view text, const std::string& file) {
  DSA_ASSIGN_OR_RETURN(json root, parse_json(text, file));
  if (!root.is_object()) return invalid_argument(file + ": top level must be a JSON object");
  JsonReader r(file, root);
  ModelConfig c;
  DSA_RETURN_IF_ERROR(read_identity(r, &c));
  DSA_RETURN_IF_ERROR(read_sizes(r, &c));
  DSA_RETURN_IF_ERROR(read_attention(r, &c));
  if (c.is_glm5()) {
    DSA_RETURN_IF_ERROR(check_glm5_attention_keys(r, c));
    DSA_RETURN_IF_ERROR(check_index_share(r, c));
  }
  DSA_RETURN_IF_ERROR(read_indexer(r, &c));
  DSA_RETURN_IF_ERROR(read_moe(r, &c));
  DSA_RETURN_IF_ERROR(read_misc(r, &c));
  DSA_RETURN_IF_ERROR(check_sm_scale(r, c));
  return c;
}

StatusOr<ModelConfig> load_model_config(const std::filesystem::path& file) {
  DSA_ASSIGN_OR_RETURN(std::string text, read_text_file(file.string(), kMaxConfigFileBytes));
  return parse_model_config(text, file.string());
}

}  // namespace dsa::model
