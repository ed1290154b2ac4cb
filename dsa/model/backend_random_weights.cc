#include "dsa/model/backend_random_weights.h"

#include <cmath>

#include "dsa/core/random_fill.h"

namespace dsa::model {

namespace {

constexpr int64_t kBlock = 128;  // FP8 scale block (SPEC.md §8.2)

class Generator {
 public:
  Generator(WeightStore& s, const ModelConfig& c, uint64_t seed)
      : s_(s),
        c_(c),
        seed_(seed),
        pow2_(c.quantization_config && c.quantization_config->scale_fmt == "ue8m0") {}

  Status constant(const std::vector<bf16>& v, int64_t n, float value) {
    return s_.generate(v, size_t(n), next(FillKind::kBf16Const, value));
  }
  Status constant(const std::vector<float>& v, int64_t n, float value) {
    return s_.generate(v, size_t(n), next(FillKind::kF32Const, value));
  }
  Status uniform(const std::vector<bf16>& v, int64_t n, float amplitude) {
    return s_.generate(v, size_t(n), next(FillKind::kBf16Uniform, amplitude));
  }

  Status linear(const LinearWeight& w) {
    const int64_t n = int64_t(w.out) * w.in;
    const float a = std::sqrt(3.0f / float(w.in));
    if (!w.fp8) return uniform(w.bf16_w, n, a);
    float scale = a / kE4m3Max;  // a block's amax / 448, as the host quantiser sets it
    if (pow2_) scale = std::exp2(std::ceil(std::log2(scale)));
    DSA_RETURN_IF_ERROR(s_.generate(w.fp8_w, size_t(n), next(FillKind::kE4m3Uniform, a / scale)));
    const int64_t blocks = ((w.out + kBlock - 1) / kBlock) * ((w.in + kBlock - 1) / kBlock);
    return constant(w.scale_inv, blocks, scale);
  }

  Status mlp(const MlpWeights& m) {
    DSA_RETURN_IF_ERROR(linear(m.gate));
    DSA_RETURN_IF_ERROR(linear(m.up));
    return linear(m.down);
  }

  Status block(const DecoderLayerWeights& b) {
    const int64_t D = c_.hidden_size;
    DSA_RETURN_IF_ERROR(constant(b.input_norm, D, 1.0f));
    DSA_RETURN_IF_ERROR(constant(b.post_attention_norm, D, 1.0f));
    const AttentionWeights& a = b.attn;
    for (const LinearWeight* w : {&a.q_a, &a.q_b, &a.kv_a, &a.o_proj, &a.indexer.wq_b,
                                  &a.indexer.wk, &a.indexer.weights_proj}) {
      DSA_RETURN_IF_ERROR(linear(*w));
    }
    // W_UK^T and W_UV come from kv_b_proj [H (nope + v), kv_lora]: its amplitude sqrt(3 / kv_lora).
    const float kv_b = std::sqrt(3.0f / float(c_.kv_lora_rank));
    for (const HeadLinearWeight* w : {&a.w_uk_t, &a.w_uv})
      DSA_RETURN_IF_ERROR(uniform(w->bf16_w, int64_t(w->heads) * w->out * w->in, kv_b));
    DSA_RETURN_IF_ERROR(constant(a.q_a_norm, c_.q_lora_rank, 1.0f));
    DSA_RETURN_IF_ERROR(constant(a.kv_a_norm, c_.kv_lora_rank, 1.0f));
    DSA_RETURN_IF_ERROR(constant(a.indexer.k_norm_w, c_.index_head_dim, 1.0f));
    DSA_RETURN_IF_ERROR(constant(a.indexer.k_norm_b, c_.index_head_dim, 0.0f));
    if (b.mlp) DSA_RETURN_IF_ERROR(mlp(*b.mlp));
    if (b.moe) {
      DSA_RETURN_IF_ERROR(linear(b.moe->router));
      DSA_RETURN_IF_ERROR(constant(b.moe->score_bias, c_.n_routed_experts, 0.0f));
      for (const MlpWeights& e : b.moe->experts) DSA_RETURN_IF_ERROR(mlp(e));
      if (b.moe->shared) DSA_RETURN_IF_ERROR(mlp(*b.moe->shared));
      DSA_RETURN_IF_ERROR(s_.add_expert_tables(*b.moe));
    }
    return ok_status();
  }

 private:
  // The next vector's stream: (seed, its index in the walk), mixed so neighbours are unrelated.
  FillSpec next(FillKind kind, float value) {
    return FillSpec{kind, mix64(seed_ ^ mix64(++count_)), value};
  }

  WeightStore& s_;
  const ModelConfig& c_;
  uint64_t seed_;
  bool pow2_;
  uint64_t count_ = 0;
};

}  // namespace

Status generate_backend_weights(WeightStore& store, const ModelWeights& w, const ModelConfig& c,
                                uint64_t seed) {
  Generator g(store, c, seed);
  DSA_RETURN_IF_ERROR(g.uniform(w.embed, c.vocab_size * c.hidden_size, 1.0f));
  for (const DecoderLayerWeights& b : w.layers) DSA_RETURN_IF_ERROR(g.block(b));
  DSA_RETURN_IF_ERROR(g.constant(w.final_norm, c.hidden_size, 1.0f));
  DSA_RETURN_IF_ERROR(g.linear(w.lm_head));
  if (!w.mtp) return ok_status();
  const MtpWeights& m = *w.mtp;
  DSA_RETURN_IF_ERROR(g.constant(m.enorm, c.hidden_size, 1.0f));
  DSA_RETURN_IF_ERROR(g.constant(m.hnorm, c.hidden_size, 1.0f));
  DSA_RETURN_IF_ERROR(g.constant(m.shared_head_norm, c.hidden_size, 1.0f));
  DSA_RETURN_IF_ERROR(g.linear(m.eh_proj));
  return g.block(m.block);
}

}  // namespace dsa::model
