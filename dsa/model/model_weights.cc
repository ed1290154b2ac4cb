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
#include "dsa/model/shard_read_ahead.h"

namespace dsa::model {

namespace {

class Reader {
 public:
  // Layout only (model_weight_layout): shapes from the inventory, no data read or made.
  Reader(const Checkpoint& f, const ModelConfig* layout_of) : Reader(f, {}, {}) {
    for (const ExpectedTensor& x : expected_model_tensors(*layout_of)) layout_[x.name] = x;
    layout_fp8_ = layout_of->quantization_config.has_value();
    layout_only_ = true;
  }
  // `sink` empty: every tensor is copied into its host vector; else each vector's bytes go to the
  // sink (keyed by the vector, which stays empty) straight from the mapping where no conversion
  // is needed, through a host temporary of that one tensor where one is.
  // `read_ahead`: the shards are read into the page cache ahead of the copies (streaming only).
  Reader(const Checkpoint& f, const LoadProgressFn& progress, WeightSink sink,
         bool read_ahead = false)
      : f_(f), progress_(progress), sink_(std::move(sink)), read_ahead_(f, read_ahead && sink_) {
    left_.resize(f.num_files());
    for (size_t i = 0; i < f.num_files(); ++i) {
      left_[i] = f.file(i).data_bytes();
      p_.bytes_total += left_[i];
      p_.tensors_total += f.file(i).size();
    }
    p_.shards_total = f.num_files();
    for (size_t i = 0; i < left_.size(); ++i) {
      if (left_[i] == 0) done_.insert(int64_t(i)), ++p_.shards_done;  // nothing to read there
    }
  }

  bool layout_only() const { return layout_only_; }
  bool streaming() const { return sink_ && !host_; }

  Status bf16_tensor(const std::string& name, std::vector<bf16>& out) {
    if (layout_only_) return ok_status();
    DSA_ASSIGN_OR_RETURN(TensorInfo t, fetch(name));
    if (t.dtype != DType::kBF16) {
      return invalid_argument(fmt::format("{}: {}: expected bf16", f_.path_of(name), name));
    }
    DSA_RETURN_IF_ERROR(take(name, t, out));
    return consumed(name, t);
  }

  // Norm vectors and biases: bf16 or f32 storage, upcast exactly.
  Status f32_vector(const std::string& name, std::vector<float>& out) {
    if (layout_only_) return ok_status();
    DSA_ASSIGN_OR_RETURN(TensorInfo t, fetch(name));
    if (t.dtype == DType::kF32) {
      DSA_RETURN_IF_ERROR(take(name, t, out));
    } else {
      std::vector<float> v = upcast(t);
      DSA_RETURN_IF_ERROR(put(name, out, std::move(v)));
    }
    return consumed(name, t);
  }

  Status norm(const std::string& name, std::vector<bf16>& out) {
    if (layout_only_) return ok_status();
    DSA_ASSIGN_OR_RETURN(TensorInfo t, fetch(name));
    if (t.dtype == DType::kBF16) {
      DSA_RETURN_IF_ERROR(take(name, t, out));  // bf16 -> f32 -> bf16 is the identity
    } else {
      std::vector<float> f(t.nbytes / 4);
      std::memcpy(f.data(), t.data, t.nbytes);
      std::vector<bf16> v;
      for (float x : f) v.push_back(float_to_bf16(x));
      DSA_RETURN_IF_ERROR(put(name, out, std::move(v)));
    }
    return consumed(name, t);
  }

  // `host`: always into w's host vectors, also when streaming (kv_b_proj, which is transformed).
  Status linear(const std::string& name, LinearWeight& w, bool host = false) {
    if (layout_only_) {
      auto it = layout_.find(name);
      DSA_CHECK(it != layout_.end());
      const ExpectedTensor& x = it->second;
      w.out = int32_t(x.shape[0]);
      w.in = int32_t(x.shape[1]);
      w.fp8 = layout_fp8_ && x.kind == TensorKind::kLinear;
      return ok_status();
    }
    DSA_ASSIGN_OR_RETURN(TensorInfo t, fetch(name));
    w.out = static_cast<int32_t>(t.shape[0]);
    w.in = static_cast<int32_t>(t.shape[1]);
    host_ = host;
    Status st = t.dtype == DType::kBF16 ? take(name, t, w.bf16_w) : take(name, t, w.fp8_w);
    if (st.ok()) st = consumed(name, t);
    if (st.ok() && t.dtype != DType::kBF16) {
      w.fp8 = streaming();  // its codes live only in the backend
      st = f32_vector(scale_inv_name(name), w.scale_inv);
    }
    host_ = false;
    return st;
  }

  // Hands a vector built on the host (a split of kv_b_proj) to the sink, leaving it empty.
  template <typename T>
  Status sink_host(const std::string& name, std::vector<T>& v) {
    if (!streaming() || v.empty()) return ok_status();
    DSA_RETURN_IF_ERROR(send(name, &v, v.data(), v.size() * sizeof(T)));
    std::vector<T>().swap(v);
    return ok_status();
  }

 private:
  // Before a tensor is read, its shard must still be the file that was mapped (issue 16: one
  // shrunk since would raise SIGBUS on the read; MappingGuard catches a shrink during it). An
  // fstat costs about a microsecond against the milliseconds a tensor's copy takes.
  StatusOr<TensorInfo> fetch(const std::string& name) {
    DSA_ASSIGN_OR_RETURN(TensorInfo t, f_.get(name));
    DSA_RETURN_IF_ERROR(f_.check_intact(name));
    read_ahead_.touch(size_t(f_.file_index(name)));
    if (p_.tensors_done == 0) start_ = std::chrono::steady_clock::now();
    return t;
  }

  // The tensor's bytes as stored: to the sink from the mapping, or copied into `out`.
  template <typename T>
  Status take(const std::string& name, const TensorInfo& t, std::vector<T>& out) {
    if (streaming()) return send(name, &out, t.data, t.nbytes);
    out.resize(t.nbytes / sizeof(T));
    std::memcpy(out.data(), t.data, t.nbytes);
    return ok_status();
  }
  // A converted host temporary: to the sink (then freed), or moved into `out`.
  template <typename T>
  Status put(const std::string& name, std::vector<T>& out, std::vector<T> v) {
    if (!streaming()) {
      out = std::move(v);
      return ok_status();
    }
    return send(name, &out, v.data(), v.size() * sizeof(T));
  }
  Status send(const std::string& name, const void* key, const void* src, size_t bytes) {
    Status s = sink_(key, src, bytes);
    if (!s.ok()) return s.with_context(fmt::format("{}: {}", f_.path_of(name), name));
    return ok_status();
  }
  static std::vector<float> upcast(const TensorInfo& t) {
    std::vector<bf16> h(t.nbytes / 2);
    std::memcpy(h.data(), t.data, t.nbytes);
    std::vector<float> v;
    v.reserve(h.size());
    for (bf16 x : h) v.push_back(bf16_to_float(x));
    return v;
  }

  // Every read ends here once its bytes are where they go: checks the shard did not change or
  // fault while they were read (the bytes are then not the file's), counts what each file has
  // left to give, drops the tensor's pages, and reports progress.
  Status consumed(const std::string& name, const TensorInfo& t) {
    DSA_RETURN_IF_ERROR(f_.check_intact(name));
    const int64_t i = f_.file_index(name);
    f_.file(size_t(i)).drop_pages(t);
    p_.bytes_done += t.nbytes;
    ++p_.tensors_done;
    uint64_t& left = left_[size_t(i)];
    left -= std::min<uint64_t>(left, t.nbytes);
    bool report = p_.bytes_done - reported_bytes_ >= kLoadProgressBytes;
    if (left == 0 && !done_.count(i)) {
      done_.insert(i);
      ++p_.shards_done;
      report = true;
    }
    p_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (report && progress_) {
      reported_bytes_ = p_.bytes_done;
      progress_(p_);
    }
    return ok_status();
  }

  const Checkpoint& f_;
  LoadProgressFn progress_;
  WeightSink sink_;
  ShardReadAhead read_ahead_;
  bool host_ = false;           // this linear into host vectors even when streaming (kv_b_proj)
  std::vector<uint64_t> left_;  // per file: data bytes not read yet
  std::set<int64_t> done_;
  LoadProgress p_;
  uint64_t reported_bytes_ = 0;
  std::chrono::steady_clock::time_point start_;
  bool layout_only_ = false, layout_fp8_ = false;
  std::map<std::string, ExpectedTensor> layout_;
};

// kv_b_proj [H (nope + v), kv_lora] -> W_UK^T [H, kv_lora, nope] and W_UV [H, v, kv_lora].
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

StatusOr<std::pair<HeadLinearWeight, HeadLinearWeight>> split_kv_b(const LinearWeight& kv_b_stored,
                                                                   const ModelConfig& c) {
  // Never run as a linear (SPEC.md §8.8): an FP8 kv_b_proj is dequantised to bf16 here.
  const LinearWeight kv_b = kv_b_stored.is_fp8() ? dequantize_fp8(kv_b_stored) : kv_b_stored;
  const int32_t H = int32_t(c.num_attention_heads), nope = int32_t(c.qk_nope_head_dim);
  const int32_t v = int32_t(c.v_head_dim), r = int32_t(c.kv_lora_rank);
  HeadLinearWeight uk{H, r, nope, std::vector<bf16>(size_t(H) * r * nope)};
  HeadLinearWeight uv{H, v, r, std::vector<bf16>(size_t(H) * v * r)};
  for (int32_t h = 0; h < H; ++h) {
    const bf16* base = kv_b.bf16_w.data() + size_t(h) * (nope + v) * r;
    bf16* uk_h = uk.bf16_w.data() + size_t(h) * r * nope;
    for (int32_t t = 0; t < nope; ++t) {
      for (int32_t k = 0; k < r; ++k) uk_h[size_t(k) * nope + t] = base[size_t(t) * r + k];
    }
    std::copy(base + size_t(nope) * r, base + size_t(nope + v) * r,
              uv.bf16_w.begin() + ptrdiff_t(size_t(h) * v * r));
  }
  return std::make_pair(std::move(uk), std::move(uv));
}

// Everything below fills the weight structs in place: a streamed vector is keyed by its address
// (weight_store.h), so each one must already sit where the model will hold it.
Status load_mlp(Reader& rd, const std::string& p, MlpWeights& m) {
  DSA_RETURN_IF_ERROR(rd.linear(p + "gate_proj.weight", m.gate));
  DSA_RETURN_IF_ERROR(rd.linear(p + "up_proj.weight", m.up));
  return rd.linear(p + "down_proj.weight", m.down);
}

// kv_b_proj, read into host memory whatever the mode, as W_UK^T and W_UV (every head in one).
Status load_kv_b(Reader& rd, const ModelConfig& c, const std::string& name, AttentionWeights& at) {
  LinearWeight kv_b;
  DSA_RETURN_IF_ERROR(rd.linear(name, kv_b, /*host=*/true));
  if (rd.layout_only()) {  // the shapes, bf16 as split_kv_b makes them
    const int32_t H = int32_t(c.num_attention_heads), r = int32_t(c.kv_lora_rank);
    at.w_uk_t = HeadLinearWeight{H, r, int32_t(c.qk_nope_head_dim), {}};
    at.w_uv = HeadLinearWeight{H, int32_t(c.v_head_dim), r, {}};
    return ok_status();
  }
  DSA_ASSIGN_OR_RETURN(auto split, split_kv_b(kv_b, c));
  at.w_uk_t = std::move(split.first);
  at.w_uv = std::move(split.second);
  DSA_RETURN_IF_ERROR(rd.sink_host(name, at.w_uk_t.bf16_w));
  return rd.sink_host(name, at.w_uv.bf16_w);
}

Status load_block(Reader& rd, const ModelConfig& c, int64_t layer, DecoderLayerWeights& w) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  DSA_RETURN_IF_ERROR(rd.norm(p + "input_layernorm.weight", w.input_norm));
  DSA_RETURN_IF_ERROR(rd.norm(p + "post_attention_layernorm.weight", w.post_attention_norm));
  const std::string a = p + "self_attn.";
  AttentionWeights& at = w.attn;
  DSA_RETURN_IF_ERROR(rd.linear(a + "q_a_proj.weight", at.q_a));
  DSA_RETURN_IF_ERROR(rd.norm(a + "q_a_layernorm.weight", at.q_a_norm));
  DSA_RETURN_IF_ERROR(rd.linear(a + "q_b_proj.weight", at.q_b));
  DSA_RETURN_IF_ERROR(rd.linear(a + "kv_a_proj_with_mqa.weight", at.kv_a));
  DSA_RETURN_IF_ERROR(rd.norm(a + "kv_a_layernorm.weight", at.kv_a_norm));
  DSA_RETURN_IF_ERROR(load_kv_b(rd, c, a + "kv_b_proj.weight", at));
  DSA_RETURN_IF_ERROR(rd.linear(a + "o_proj.weight", at.o_proj));
  const std::string ix = a + "indexer.";
  DSA_RETURN_IF_ERROR(rd.linear(ix + "wq_b.weight", at.indexer.wq_b));
  DSA_RETURN_IF_ERROR(rd.linear(ix + "wk.weight", at.indexer.wk));
  DSA_RETURN_IF_ERROR(rd.f32_vector(ix + "k_norm.weight", at.indexer.k_norm_w));
  DSA_RETURN_IF_ERROR(rd.f32_vector(ix + "k_norm.bias", at.indexer.k_norm_b));
  DSA_RETURN_IF_ERROR(rd.linear(ix + "weights_proj.weight", at.indexer.weights_proj));
  if (!c.is_moe_layer(layer)) return load_mlp(rd, p + "mlp.", w.mlp.emplace());
  MoeWeights& moe = w.moe.emplace();
  DSA_RETURN_IF_ERROR(rd.linear(p + "mlp.gate.weight", moe.router));
  DSA_RETURN_IF_ERROR(rd.f32_vector(p + "mlp.gate.e_score_correction_bias", moe.score_bias));
  moe.experts.resize(size_t(c.n_routed_experts));
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    DSA_RETURN_IF_ERROR(
        load_mlp(rd, fmt::format("{}mlp.experts.{}.", p, e), moe.experts[size_t(e)]));
  }
  if (c.n_shared_experts > 0) {
    DSA_RETURN_IF_ERROR(load_mlp(rd, p + "mlp.shared_experts.", moe.shared.emplace()));
  }
  return ok_status();
}

// The weights through `rd` (a checkpoint's data, or the layout alone) into `w`, a fresh struct.
Status build_weights(Reader& rd, const Checkpoint& file, const ModelConfig& c, ModelWeights& w) {
  DSA_RETURN_IF_ERROR(rd.bf16_tensor("model.embed_tokens.weight", w.embed));
  w.layers.resize(size_t(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DSA_RETURN_IF_ERROR(load_block(rd, c, l, w.layers[size_t(l)]));
  }
  DSA_RETURN_IF_ERROR(rd.norm("model.norm.weight", w.final_norm));
  DSA_RETURN_IF_ERROR(rd.linear("lm_head.weight", w.lm_head));
  if (!c.has_mtp()) return ok_status();
  const int64_t L = c.mtp_layer_index();
  const std::string p = fmt::format("model.layers.{}.", L);
  MtpWeights& m = w.mtp.emplace();
  DSA_RETURN_IF_ERROR(rd.norm(p + "enorm.weight", m.enorm));
  DSA_RETURN_IF_ERROR(rd.norm(p + "hnorm.weight", m.hnorm));
  DSA_RETURN_IF_ERROR(rd.linear(p + "eh_proj.weight", m.eh_proj));
  DSA_RETURN_IF_ERROR(rd.norm(p + "shared_head.norm.weight", m.shared_head_norm));
  DSA_RETURN_IF_ERROR(load_block(rd, c, L, m.block));
  const std::string embed = p + "embed_tokens.weight";
  if (!rd.layout_only() && file.contains(embed)) {
    // Compared in the mappings (check_model_tensors has matched the shapes): when streaming,
    // neither copy is on the host.
    DSA_ASSIGN_OR_RETURN(TensorInfo own, file.get(embed));
    DSA_ASSIGN_OR_RETURN(TensorInfo target, file.get("model.embed_tokens.weight"));
    if (own.nbytes != target.nbytes || std::memcmp(own.data, target.data, own.nbytes) != 0) {
      DSA_LOG_WARN("{}: the MTP layer's embed_tokens differs from model.embed_tokens",
                   file.path_of(embed));
    }
    DSA_RETURN_IF_ERROR(rd.bf16_tensor(embed, m.embed.emplace()));
  }
  if (!rd.layout_only() && file.contains(p + "shared_head.head.weight")) {
    DSA_RETURN_IF_ERROR(rd.linear(p + "shared_head.head.weight", m.head.emplace()));
  }
  return ok_status();
}

}  // namespace

StatusOr<ModelWeights> load_model_weights(const Checkpoint& file, const ModelConfig& c,
                                          const LoadProgressFn& progress) {
  DSA_RETURN_IF_ERROR(check_model_tensors(file, c));
  Reader rd(file, progress, {});
  ModelWeights w;
  DSA_RETURN_IF_ERROR(build_weights(rd, file, c, w));
  return w;
}

Status stream_model_weights(const Checkpoint& file, const ModelConfig& c, ModelWeights& out,
                            const WeightSink& sink, const LoadProgressFn& progress,
                            bool read_ahead) {
  DSA_CHECK(sink);
  DSA_RETURN_IF_ERROR(check_model_tensors(file, c));
  Reader rd(file, progress, sink, read_ahead);
  return build_weights(rd, file, c, out);
}

ModelWeights model_weight_layout(const ModelConfig& c) {
  const Checkpoint empty = Checkpoint::empty();
  Reader rd(empty, &c);
  ModelWeights w;
  const Status s = build_weights(rd, empty, c, w);
  DSA_CHECK(s.ok());  // nothing is read: it cannot fail
  return w;
}

}  // namespace dsa::model
