#include "dsa/model/model_weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include "dsa/core/check.h"
#include "dsa/core/log.h"
#include "dsa/model/model_tensors.h"

namespace dsa::model {

namespace {

class Reader {
 public:
  // Layout only (model_weight_layout): shapes from the inventory, no data read or made.
  Reader(const Checkpoint& f, const LoadProgressFn& progress, const ModelConfig* layout_of)
      : Reader(f, progress) {
    for (const ExpectedTensor& x : expected_model_tensors(*layout_of)) layout_[x.name] = x;
    layout_fp8_ = layout_of->quantization_config.has_value();
    layout_only_ = true;
  }
  Reader(const Checkpoint& f, const LoadProgressFn& progress) : f_(f), progress_(progress) {
    left_.resize(f.num_files());
    for (size_t i = 0; i < f.num_files(); ++i) {
      left_[i] = f.file(i).data_bytes();
      p_.bytes_total += left_[i];
    }
    p_.shards_total = f.num_files();
    for (size_t i = 0; i < left_.size(); ++i) {
      if (left_[i] == 0) done_.insert(int64_t(i)), ++p_.shards_done;  // nothing to read there
    }
  }

  // Every read goes through here: it counts the bytes each file has left to give.
  StatusOr<TensorInfo> fetch(const std::string& name) {
    DSA_ASSIGN_OR_RETURN(TensorInfo t, f_.get(name));
    if (p_.shards_done == 0 && p_.bytes_done == 0) start_ = std::chrono::steady_clock::now();
    const int64_t i = f_.file_index(name);
    p_.bytes_done += t.nbytes;
    uint64_t& left = left_[size_t(i)];
    left -= std::min<uint64_t>(left, t.nbytes);
    if (left == 0 && !done_.count(i)) {
      done_.insert(i);
      ++p_.shards_done;
      if (progress_) {
        p_.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        progress_(p_);
      }
    }
    return t;
  }

  bool layout_only() const { return layout_only_; }

  StatusOr<std::vector<bf16>> bf16_tensor(const std::string& name) {
    if (layout_only_) return std::vector<bf16>{};
    DSA_ASSIGN_OR_RETURN(TensorInfo t, fetch(name));
    if (t.dtype != DType::kBF16) {
      return invalid_argument(fmt::format("{}: {}: expected bf16", f_.path_of(name), name));
    }
    std::vector<bf16> v(t.nbytes / 2);
    std::memcpy(v.data(), t.data, t.nbytes);
    return v;
  }

  // Norm vectors and biases: bf16 or f32 storage, upcast exactly.
  StatusOr<std::vector<float>> f32_vector(const std::string& name) {
    if (layout_only_) return std::vector<float>{};
    DSA_ASSIGN_OR_RETURN(TensorInfo t, fetch(name));
    std::vector<float> v;
    if (t.dtype == DType::kF32) {
      v.resize(t.nbytes / 4);
      std::memcpy(v.data(), t.data, t.nbytes);
    } else {
      std::vector<bf16> h(t.nbytes / 2);
      std::memcpy(h.data(), t.data, t.nbytes);
      for (bf16 x : h) v.push_back(bf16_to_float(x));
    }
    return v;
  }

  StatusOr<std::vector<bf16>> norm(const std::string& name) {
    DSA_ASSIGN_OR_RETURN(std::vector<float> v, f32_vector(name));
    std::vector<bf16> out;
    for (float x : v) out.push_back(float_to_bf16(x));  // exact for bf16-stored weights
    return out;
  }

  StatusOr<LinearWeight> linear(const std::string& name) {
    if (layout_only_) {
      auto it = layout_.find(name);
      DSA_CHECK(it != layout_.end());
      const ExpectedTensor& x = it->second;
      LinearWeight w;
      w.out = int32_t(x.shape[0]);
      w.in = int32_t(x.shape[1]);
      w.fp8 = layout_fp8_ && x.kind == TensorKind::kLinear;
      return w;
    }
    DSA_ASSIGN_OR_RETURN(TensorInfo t, fetch(name));
    LinearWeight w;
    w.out = static_cast<int32_t>(t.shape[0]);
    w.in = static_cast<int32_t>(t.shape[1]);
    if (t.dtype == DType::kBF16) {
      w.bf16_w.resize(t.nbytes / 2);
      std::memcpy(w.bf16_w.data(), t.data, t.nbytes);
      return w;
    }
    w.fp8_w.resize(t.nbytes);
    std::memcpy(w.fp8_w.data(), t.data, t.nbytes);
    DSA_ASSIGN_OR_RETURN(w.scale_inv, f32_vector(scale_inv_name(name)));
    return w;
  }

 private:
  const Checkpoint& f_;
  const LoadProgressFn& progress_;
  std::vector<uint64_t> left_;  // per file: data bytes not read yet
  std::set<int64_t> done_;
  LoadProgress p_;
  std::chrono::steady_clock::time_point start_;
  bool layout_only_ = false, layout_fp8_ = false;
  std::map<std::string, ExpectedTensor> layout_;
};

// kv_b_proj [H (nope + v), kv_lora] -> per head W_UK^T [kv_lora, nope] and W_UV [v, kv_lora].
// An FP8 weight as bf16 (SPEC.md §8.2): W[i][j] = e4m3(W8[i][j]) * scale_inv[i/128][j/128].
LinearWeight dequantize_fp8(const LinearWeight& w) {
  constexpr size_t kBlock = 128;
  const size_t out = size_t(w.out), in = size_t(w.in), col_blocks = (in + kBlock - 1) / kBlock;
  LinearWeight d{w.out, w.in, std::vector<bf16>(out * in), {}, {}};
  for (size_t i = 0; i < out; ++i) {
    for (size_t j = 0; j < in; ++j) {
      const float s = w.scale_inv[(i / kBlock) * col_blocks + j / kBlock];
      d.bf16_w[i * in + j] = float_to_bf16(e4m3_to_float(e4m3{w.fp8_w[i * in + j]}) * s);
    }
  }
  return d;
}

StatusOr<std::pair<std::vector<LinearWeight>, std::vector<LinearWeight>>> split_kv_b(
    const LinearWeight& kv_b_stored, const ModelConfig& c) {
  // Never run as a linear (SPEC.md §8.8): an FP8 kv_b_proj is dequantised to bf16 here.
  const LinearWeight kv_b = kv_b_stored.is_fp8() ? dequantize_fp8(kv_b_stored) : kv_b_stored;
  const int32_t H = int32_t(c.num_attention_heads), nope = int32_t(c.qk_nope_head_dim);
  const int32_t v = int32_t(c.v_head_dim), r = int32_t(c.kv_lora_rank);
  std::vector<LinearWeight> uk(static_cast<size_t>(H)), uv(static_cast<size_t>(H));
  for (int32_t h = 0; h < H; ++h) {
    const bf16* base = kv_b.bf16_w.data() + size_t(h) * (nope + v) * r;
    uk[size_t(h)] = LinearWeight{r, nope, std::vector<bf16>(size_t(r) * nope), {}, {}};
    for (int32_t t = 0; t < nope; ++t) {
      for (int32_t k = 0; k < r; ++k)
        uk[size_t(h)].bf16_w[size_t(k) * nope + t] = base[size_t(t) * r + k];
    }
    uv[size_t(h)] = LinearWeight{
        v, r, std::vector<bf16>(base + size_t(nope) * r, base + size_t(nope + v) * r), {}, {}};
  }
  return std::make_pair(std::move(uk), std::move(uv));
}

StatusOr<MlpWeights> load_mlp(Reader& rd, const std::string& p) {
  MlpWeights m;
  DSA_ASSIGN_OR_RETURN(m.gate, rd.linear(p + "gate_proj.weight"));
  DSA_ASSIGN_OR_RETURN(m.up, rd.linear(p + "up_proj.weight"));
  DSA_ASSIGN_OR_RETURN(m.down, rd.linear(p + "down_proj.weight"));
  return m;
}

StatusOr<DecoderLayerWeights> load_block(Reader& rd, const ModelConfig& c, int64_t layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  DecoderLayerWeights w;
  DSA_ASSIGN_OR_RETURN(w.input_norm, rd.norm(p + "input_layernorm.weight"));
  DSA_ASSIGN_OR_RETURN(w.post_attention_norm, rd.norm(p + "post_attention_layernorm.weight"));
  const std::string a = p + "self_attn.";
  AttentionWeights& at = w.attn;
  DSA_ASSIGN_OR_RETURN(at.q_a, rd.linear(a + "q_a_proj.weight"));
  DSA_ASSIGN_OR_RETURN(at.q_a_norm, rd.norm(a + "q_a_layernorm.weight"));
  DSA_ASSIGN_OR_RETURN(at.q_b, rd.linear(a + "q_b_proj.weight"));
  DSA_ASSIGN_OR_RETURN(at.kv_a, rd.linear(a + "kv_a_proj_with_mqa.weight"));
  DSA_ASSIGN_OR_RETURN(at.kv_a_norm, rd.norm(a + "kv_a_layernorm.weight"));
  DSA_ASSIGN_OR_RETURN(LinearWeight kv_b, rd.linear(a + "kv_b_proj.weight"));
  if (rd.layout_only()) {  // the per-head shapes, bf16 as split_kv_b makes them
    const int32_t r = int32_t(c.kv_lora_rank);
    at.w_uk_t.assign(size_t(c.num_attention_heads),
                     LinearWeight{r, int32_t(c.qk_nope_head_dim), {}, {}, {}});
    at.w_uv.assign(size_t(c.num_attention_heads),
                   LinearWeight{int32_t(c.v_head_dim), r, {}, {}, {}});
  } else {
    DSA_ASSIGN_OR_RETURN(auto split, split_kv_b(kv_b, c));
    at.w_uk_t = std::move(split.first);
    at.w_uv = std::move(split.second);
  }
  DSA_ASSIGN_OR_RETURN(at.o_proj, rd.linear(a + "o_proj.weight"));
  const std::string ix = a + "indexer.";
  DSA_ASSIGN_OR_RETURN(at.indexer.wq_b, rd.linear(ix + "wq_b.weight"));
  DSA_ASSIGN_OR_RETURN(at.indexer.wk, rd.linear(ix + "wk.weight"));
  DSA_ASSIGN_OR_RETURN(at.indexer.k_norm_w, rd.f32_vector(ix + "k_norm.weight"));
  DSA_ASSIGN_OR_RETURN(at.indexer.k_norm_b, rd.f32_vector(ix + "k_norm.bias"));
  DSA_ASSIGN_OR_RETURN(at.indexer.weights_proj, rd.linear(ix + "weights_proj.weight"));
  if (!c.is_moe_layer(layer)) {
    DSA_ASSIGN_OR_RETURN(w.mlp, load_mlp(rd, p + "mlp."));
    return w;
  }
  MoeWeights moe;
  DSA_ASSIGN_OR_RETURN(moe.router, rd.linear(p + "mlp.gate.weight"));
  DSA_ASSIGN_OR_RETURN(moe.score_bias, rd.f32_vector(p + "mlp.gate.e_score_correction_bias"));
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    DSA_ASSIGN_OR_RETURN(MlpWeights ex, load_mlp(rd, fmt::format("{}mlp.experts.{}.", p, e)));
    moe.experts.push_back(std::move(ex));
  }
  if (c.n_shared_experts > 0) {
    DSA_ASSIGN_OR_RETURN(moe.shared, load_mlp(rd, p + "mlp.shared_experts."));
  }
  w.moe = std::move(moe);
  return w;
}

}  // namespace

namespace {

// The weights through `rd` (a checkpoint's data, or the layout alone).
StatusOr<ModelWeights> build_weights(Reader& rd, const Checkpoint& file, const ModelConfig& c) {
  ModelWeights w;
  DSA_ASSIGN_OR_RETURN(w.embed, rd.bf16_tensor("model.embed_tokens.weight"));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DSA_ASSIGN_OR_RETURN(DecoderLayerWeights b, load_block(rd, c, l));
    w.layers.push_back(std::move(b));
  }
  DSA_ASSIGN_OR_RETURN(w.final_norm, rd.norm("model.norm.weight"));
  DSA_ASSIGN_OR_RETURN(w.lm_head, rd.linear("lm_head.weight"));
  if (!c.has_mtp()) return w;
  const int64_t L = c.mtp_layer_index();
  const std::string p = fmt::format("model.layers.{}.", L);
  MtpWeights m;
  DSA_ASSIGN_OR_RETURN(m.enorm, rd.norm(p + "enorm.weight"));
  DSA_ASSIGN_OR_RETURN(m.hnorm, rd.norm(p + "hnorm.weight"));
  DSA_ASSIGN_OR_RETURN(m.eh_proj, rd.linear(p + "eh_proj.weight"));
  DSA_ASSIGN_OR_RETURN(m.shared_head_norm, rd.norm(p + "shared_head.norm.weight"));
  DSA_ASSIGN_OR_RETURN(m.block, load_block(rd, c, L));
  if (!rd.layout_only() && file.contains(p + "embed_tokens.weight")) {
    DSA_ASSIGN_OR_RETURN(m.embed, rd.bf16_tensor(p + "embed_tokens.weight"));
    if (std::memcmp(m.embed->data(), w.embed.data(), w.embed.size() * 2) != 0) {
      DSA_LOG_WARN("{}: the MTP layer's embed_tokens differs from model.embed_tokens",
                   file.path_of(p + "embed_tokens.weight"));
    }
  }
  if (!rd.layout_only() && file.contains(p + "shared_head.head.weight")) {
    DSA_ASSIGN_OR_RETURN(m.head, rd.linear(p + "shared_head.head.weight"));
  }
  w.mtp = std::move(m);
  return w;
}

}  // namespace

StatusOr<ModelWeights> load_model_weights(const Checkpoint& file, const ModelConfig& c,
                                          const LoadProgressFn& progress) {
  DSA_RETURN_IF_ERROR(check_model_tensors(file, c));
  Reader rd(file, progress);
  return build_weights(rd, file, c);
}

ModelWeights model_weight_layout(const ModelConfig& c) {
  const Checkpoint empty = Checkpoint::empty();
  Reader rd(empty, {}, &c);
  StatusOr<ModelWeights> w = build_weights(rd, empty, c);
  DSA_CHECK(w.ok());  // nothing is read: it cannot fail
  return std::move(*w);
}

}  // namespace dsa::model
