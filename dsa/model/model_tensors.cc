#include "dsa/model/model_tensors.h"

#include <set>

#include "dsa/model/json_reader.h"

namespace dsa::model {

namespace {

// Shapes below multiply config sizes that load_model_config capped (model_limits.h: each <= 2^20,
// n_shared_experts * moe_intermediate_size <= kMaxWidth), so no int64 product here can overflow.

// FP8 block size of §8.2 (the config validator pins weight_block_size to [128, 128]).
constexpr int64_t kScaleBlock = 128;

class Inventory {
 public:
  explicit Inventory(std::vector<ExpectedTensor>* out) : out_(out) {}
  void add(std::string name, Shape shape, TensorKind kind, bool optional = false) {
    out_->push_back({std::move(name), std::move(shape), kind, optional});
  }

 private:
  std::vector<ExpectedTensor>* out_;
};

void add_attention(Inventory& inv, const std::string& p, const ModelConfig& c) {
  const int64_t h = c.hidden_size, nh = c.num_attention_heads;
  const std::string a = p + "self_attn.";
  inv.add(a + "q_a_proj.weight", {c.q_lora_rank, h}, TensorKind::kLinear);
  inv.add(a + "q_a_layernorm.weight", {c.q_lora_rank}, TensorKind::kVector);
  inv.add(a + "q_b_proj.weight", {nh * c.qk_head_dim(), c.q_lora_rank}, TensorKind::kLinear);
  inv.add(a + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, h},
          TensorKind::kLinear);
  inv.add(a + "kv_a_layernorm.weight", {c.kv_lora_rank}, TensorKind::kVector);
  inv.add(a + "kv_b_proj.weight", {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
          TensorKind::kLinear);
  inv.add(a + "o_proj.weight", {h, nh * c.v_head_dim}, TensorKind::kLinear);
  const std::string ix = a + "indexer.";
  inv.add(ix + "wq_b.weight", {c.index_n_heads * c.index_head_dim, c.q_lora_rank},
          TensorKind::kLinear);
  inv.add(ix + "wk.weight", {c.index_head_dim, h}, TensorKind::kLinear);
  inv.add(ix + "k_norm.weight", {c.index_head_dim}, TensorKind::kVector);
  inv.add(ix + "k_norm.bias", {c.index_head_dim}, TensorKind::kVector);
  inv.add(ix + "weights_proj.weight", {c.index_n_heads, h}, TensorKind::kMatrix);
}

// gate/up [width, hidden], down [hidden, width]: one expert, the shared experts or the dense MLP.
void add_mlp(Inventory& inv, const std::string& p, int64_t width, int64_t hidden) {
  inv.add(p + "gate_proj.weight", {width, hidden}, TensorKind::kLinear);
  inv.add(p + "up_proj.weight", {width, hidden}, TensorKind::kLinear);
  inv.add(p + "down_proj.weight", {hidden, width}, TensorKind::kLinear);
}

void add_moe(Inventory& inv, const std::string& p, const ModelConfig& c) {
  const std::string m = p + "mlp.";
  inv.add(m + "gate.weight", {c.n_routed_experts, c.hidden_size}, TensorKind::kMatrix);
  inv.add(m + "gate.e_score_correction_bias", {c.n_routed_experts}, TensorKind::kF32);
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    add_mlp(inv, m + "experts." + std::to_string(e) + ".", c.moe_intermediate_size, c.hidden_size);
  }
  // HF fuses the shared experts into one MLP of n_shared x the expert width.
  if (c.n_shared_experts > 0) {
    add_mlp(inv, m + "shared_experts.", c.n_shared_experts * c.moe_intermediate_size,
            c.hidden_size);
  }
}

void add_layer(Inventory& inv, int64_t layer, const ModelConfig& c) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  inv.add(p + "input_layernorm.weight", {c.hidden_size}, TensorKind::kVector);
  inv.add(p + "post_attention_layernorm.weight", {c.hidden_size}, TensorKind::kVector);
  add_attention(inv, p, c);
  if (c.is_moe_layer(layer)) {
    add_moe(inv, p, c);
  } else {
    add_mlp(inv, p + "mlp.", c.intermediate_size, c.hidden_size);
  }
}

void add_mtp_extras(Inventory& inv, const ModelConfig& c) {
  const std::string p = "model.layers." + std::to_string(c.mtp_layer_index()) + ".";
  const int64_t h = c.hidden_size;
  inv.add(p + "enorm.weight", {h}, TensorKind::kVector);
  inv.add(p + "hnorm.weight", {h}, TensorKind::kVector);
  inv.add(p + "eh_proj.weight", {h, 2 * h}, TensorKind::kLinear);
  inv.add(p + "shared_head.norm.weight", {h}, TensorKind::kVector);
  inv.add(p + "shared_head.head.weight", {c.vocab_size, h}, TensorKind::kMatrix, true);
  inv.add(p + "embed_tokens.weight", {c.vocab_size, h}, TensorKind::kMatrix, true);
}

std::string_view kind_dtypes(TensorKind kind, bool quantized) {
  switch (kind) {
    case TensorKind::kLinear:
      return quantized ? "bf16, or e4m3 with weight_scale_inv," : "bf16";
    case TensorKind::kMatrix:
      return "bf16";
    case TensorKind::kVector:
      return "bf16 or f32";
    case TensorKind::kF32:
      return "f32";
  }
  return "?";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Checks one present tensor; records the names it accounts for in `used`.
Status check_one(const Checkpoint& f, const ExpectedTensor& x, bool quantized,
                 std::set<std::string>* used) {
  DSA_ASSIGN_OR_RETURN(TensorInfo t, f.get(x.name));
  used->insert(x.name);
  const std::string where = f.path_of(x.name) + ": " + x.name + ": ";
  const bool fp8 = x.kind == TensorKind::kLinear && quantized && t.dtype == DType::kE4M3;
  bool dtype_ok = false;
  switch (x.kind) {
    case TensorKind::kLinear:
      dtype_ok = t.dtype == DType::kBF16 || fp8;
      break;
    case TensorKind::kMatrix:
      dtype_ok = t.dtype == DType::kBF16;
      break;
    case TensorKind::kVector:
      dtype_ok = t.dtype == DType::kBF16 || t.dtype == DType::kF32;
      break;
    case TensorKind::kF32:
      dtype_ok = t.dtype == DType::kF32;
      break;
  }
  if (!dtype_ok || t.shape != x.shape) {
    return invalid_argument(where + "expected " + std::string(kind_dtypes(x.kind, quantized)) +
                            " " + shape_string(x.shape) + ", got " +
                            std::string(dtype_name(t.dtype)) + " " + shape_string(t.shape));
  }
  if (!fp8) return ok_status();
  const std::string scale = scale_inv_name(x.name);
  if (!f.contains(scale)) return invalid_argument(where + "e4m3 weight without " + scale);
  used->insert(scale);
  const Shape scale_shape = {ceil_div(x.shape[0], kScaleBlock), ceil_div(x.shape[1], kScaleBlock)};
  return f.expect(scale, DType::kF32, scale_shape);
}

}  // namespace

std::string scale_inv_name(const std::string& weight_name) { return weight_name + "_scale_inv"; }

std::vector<ExpectedTensor> expected_model_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  Inventory inv(&out);
  inv.add("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, TensorKind::kMatrix);
  inv.add("lm_head.weight", {c.vocab_size, c.hidden_size}, TensorKind::kMatrix);
  inv.add("model.norm.weight", {c.hidden_size}, TensorKind::kVector);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) add_layer(inv, i, c);
  if (c.has_mtp()) {
    add_mtp_extras(inv, c);
    add_layer(inv, c.mtp_layer_index(), c);
  }
  return out;
}

Status check_model_tensors(const Checkpoint& f, const ModelConfig& c) {
  const bool quantized = c.quantization_config.has_value();
  std::set<std::string> used;
  for (const ExpectedTensor& x : expected_model_tensors(c)) {
    if (x.optional && !f.contains(x.name)) continue;
    DSA_RETURN_IF_ERROR(check_one(f, x, quantized, &used));
  }
  // A tensor nobody expects means the config and the checkpoint disagree (an extra layer or
  // expert, a scale on a bf16 config), which shapes alone would not reveal.
  for (const std::string& name : f.names()) {
    if (used.count(name) == 0) {
      return invalid_argument(f.path_of(name) + ": " + clip_for_message(name) +
                              ": unexpected tensor (not in SPEC §8.2 for this config.json)");
    }
  }
  return ok_status();
}

}  // namespace dsa::model
