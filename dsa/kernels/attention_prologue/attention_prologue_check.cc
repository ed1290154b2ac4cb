#include "dsa/kernels/attention_prologue/attention_prologue_check.h"

#include <fmt/format.h>

#include <cmath>
#include <string_view>
#include <vector>

#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/layernorm/layernorm.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"
#include "dsa/kernels/rope/rope.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {

constexpr size_t kTail = 64;  // poisoned elements past cq's and k's last rows

std::string_view style_name(RopeStyle s) {
  return s == RopeStyle::kInterleaved ? "interleaved" : "non-interleaved";
}

// Columns [col, col + width) of every row of `in`, as a dense [T, width] buffer.
std::vector<bf16> columns(const AttentionPrologueInputs& in, int64_t col, int64_t width) {
  std::vector<bf16> out(size_t(in.tokens) * size_t(width));
  for (int64_t t = 0; t < in.tokens; ++t) {
    for (int64_t j = 0; j < width; ++j)
      out[size_t(t * width + j)] = in.rows[size_t(t * in.ld + col + j)];
  }
  return out;
}

// The unfused sequence (run_prologue_separately), the CPU ops on dense copies of the three inputs.
struct Expected {
  std::vector<bf16> cq, latent, k;  // [T, q_lora], [T, 576], [T, 128]
};

StatusOr<Expected> expected(const AttentionPrologueInputs& in, RopeStyle style) {
  const int32_t T = in.tokens;
  Expected e;
  const std::vector<bf16> qa = columns(in, in.qa_col(), in.q_lora);
  const std::vector<bf16> k_raw = columns(in, in.k_raw_col(), kIndexHeadDim);
  e.latent = columns(in, in.latent_col(), kQkDim);
  e.cq.assign(size_t(T) * in.q_lora, float_to_bf16(NAN));
  e.k.assign(size_t(T) * kIndexHeadDim, float_to_bf16(NAN));
  AttentionPrologueParams p;
  p.num_tokens = T;
  p.qa = qa.data();
  p.qa_ld = in.q_lora;
  p.q_a_norm_w = in.q_a_norm_w.data();
  p.cq = e.cq.data();
  p.q_lora = in.q_lora;
  p.latent = e.latent.data();
  p.latent_ld = kQkDim;
  p.kv_a_norm_w = in.kv_a_norm_w.data();
  p.k_raw = k_raw.data();
  p.k_raw_ld = kIndexHeadDim;
  p.k_norm_w = in.k_norm_w.data();
  p.k_norm_b = in.k_norm_b.data();
  p.k = e.k.data();
  p.index_rope_style = style;
  p.positions = in.positions.data();
  p.cos = in.cos.data();
  p.sin = in.sin.data();
  p.num_positions = in.num_positions;
  DSA_RETURN_IF_ERROR(
      run_prologue_separately(p, {rmsnorm_ref, rope_ref, layernorm_ref, hadamard_ref}));
  return e;
}

// got within `ulps` of want; 0: the same bits.
bool close(bf16 got, bf16 want, int32_t ulps) {
  return ulps == 0 ? got.bits == want.bits : bf16_ulp_distance(got, want) <= ulps;
}

Status mismatch(RopeStyle style, std::string_view what, int64_t t, int64_t j, bf16 got, bf16 want,
                int32_t ulps) {
  return internal_error(fmt::format(
      "attention_prologue ({}): {}[{}][{}] = {}, expected {} ({})", style_name(style), what, t, j,
      bf16_to_float(got), bf16_to_float(want), ulps == 0 ? "bit equality" : "> 1 bf16 ulp"));
}

// A dense [T, width] output followed by kTail poisoned elements.
Status expect_dense(RopeStyle style, std::string_view what, const std::vector<bf16>& got,
                    const std::vector<bf16>& want, int64_t width, bf16 poison, int32_t ulps) {
  for (size_t i = 0; i < got.size(); ++i) {
    const int64_t t = int64_t(i) / width, j = int64_t(i) % width;
    if (i >= want.size()) {
      if (got[i].bits != poison.bits) {
        return internal_error(
            fmt::format("attention_prologue ({}): {}[{}] past the last row written",
                        style_name(style), what, i));
      }
    } else if (!close(got[i], want[i], ulps)) {
      return mismatch(style, what, t, j, got[i], want[i], ulps);
    }
  }
  return ok_status();
}

}  // namespace

Status run_prologue_separately(const AttentionPrologueParams& p, const PrologueConstituents& ops) {
  RmsNormParams qn;
  qn.x = p.qa;
  qn.x_stride = p.qa_ld;
  qn.weight = p.q_a_norm_w;
  qn.y = p.cq;
  qn.num_tokens = p.num_tokens;
  qn.dim = p.q_lora;
  qn.eps = p.rms_eps;
  DSA_RETURN_IF_ERROR(ops.rmsnorm(qn));
  RmsNormParams ln;
  ln.x = p.latent;
  ln.x_stride = p.latent_ld;
  ln.weight = p.kv_a_norm_w;
  ln.y = p.latent;
  ln.y_stride = p.latent_ld;
  ln.num_tokens = p.num_tokens;
  ln.dim = 512;
  ln.eps = p.rms_eps;
  DSA_RETURN_IF_ERROR(ops.rmsnorm(ln));
  RopeParams lr;
  lr.x = p.latent + 512;
  lr.positions = p.positions;
  lr.cos = p.cos;
  lr.sin = p.sin;
  lr.num_tokens = p.num_tokens;
  lr.token_stride = p.latent_ld;
  lr.num_positions = p.num_positions;
  lr.style = RopeStyle::kInterleaved;
  DSA_RETURN_IF_ERROR(ops.rope(lr));
  LayerNormParams kn;
  kn.x = p.k_raw;
  kn.x_stride = p.k_raw_ld;
  kn.weight = p.k_norm_w;
  kn.bias = p.k_norm_b;
  kn.y = p.k;
  kn.num_tokens = p.num_tokens;
  kn.dim = 128;
  kn.eps = p.layernorm_eps;
  DSA_RETURN_IF_ERROR(ops.layernorm(kn));
  RopeParams kr = lr;
  kr.x = p.k;
  kr.token_stride = 128;
  kr.style = p.index_rope_style;
  DSA_RETURN_IF_ERROR(ops.rope(kr));
  return ops.hadamard({p.k, p.k, p.num_tokens});
}

StatusOr<AttentionPrologueInputs> attention_prologue_inputs(int32_t tokens, int32_t q_lora,
                                                            uint64_t seed) {
  if (tokens < 1 || q_lora < 1) {
    return invalid_argument(fmt::format(
        "attention_prologue_inputs: tokens = {}, q_lora = {}: both must be >= 1", tokens, q_lora));
  }
  testing::Rng rng(seed);
  AttentionPrologueInputs in;
  in.tokens = tokens;
  in.q_lora = q_lora;
  in.ld = int64_t{q_lora} + kIndexHeadDim + kQkDim;
  in.rows.resize(size_t(tokens) * size_t(in.ld));
  const auto scale = [&](int lo, int hi) { return std::ldexp(1.f, int(rng.randint(lo, hi))); };
  for (int64_t t = 0; t < tokens; ++t) {
    bf16* row = &in.rows[size_t(t * in.ld)];
    const float sq = scale(-6, 6), sk = scale(-4, 4), sl = scale(-6, 6);
    const float offset = rng.uniform(-8.f, 8.f);
    for (int64_t j = 0; j < q_lora; ++j) row[in.qa_col() + j] = float_to_bf16(rng.normal() * sq);
    for (int64_t j = 0; j < kIndexHeadDim; ++j)
      row[in.k_raw_col() + j] = float_to_bf16(offset + rng.normal() * sk);
    for (int64_t j = 0; j < kLatentDim; ++j)
      row[in.latent_col() + j] = float_to_bf16(rng.normal() * sl);
    for (int64_t j = kLatentDim; j < kQkDim; ++j)
      row[in.latent_col() + j] = float_to_bf16(rng.normal() * 2.f);
  }
  // Edge rows, where there are enough tokens: an all-zero qa row and latent c (a norm of zeros:
  // zeros, not NaN), a constant k_raw row (variance 0: the LayerNorm gives its bias) and a qa row
  // of 2^50s (its fp32 sum of squares near 2^111, within range).
  const auto fill = [&](int64_t t, int64_t col, int64_t width, float v) {
    for (int64_t j = 0; j < width; ++j) in.rows[size_t(t * in.ld + col + j)] = float_to_bf16(v);
  };
  if (tokens >= 4) {
    fill(0, in.qa_col(), q_lora, 0.f);
    fill(1, in.latent_col(), kLatentDim, 0.f);
    fill(2, in.k_raw_col(), kIndexHeadDim, 3.25f);
    fill(3, in.qa_col(), q_lora, 0x1p50f);
  }
  in.q_a_norm_w = rng.bf16_vector(size_t(q_lora), 0.5f);
  in.kv_a_norm_w = rng.bf16_vector(size_t(kLatentDim), 0.5f);
  in.k_norm_w = rng.normal_vector(size_t(kIndexHeadDim));
  in.k_norm_b = rng.normal_vector(size_t(kIndexHeadDim), 0.3f);
  in.num_positions = 4096 + tokens;
  in.positions.resize(size_t(tokens));
  for (auto& p : in.positions) p = int32_t(rng.randint(0, in.num_positions - 1));
  in.positions[0] = 0;
  if (tokens > 1) in.positions[size_t(tokens) - 1] = in.num_positions - 1;
  in.cos.resize(size_t(in.num_positions) * kRopePairs);
  in.sin.resize(in.cos.size());
  DSA_RETURN_IF_ERROR(
      rope_table_ref({RopeConfig{}, in.num_positions, in.cos.data(), in.sin.data()}));
  return in;
}

Status check_attention_prologue(AttentionPrologueFn op, int32_t tokens, int32_t q_lora,
                                uint64_t seed) {
  DSA_ASSIGN_OR_RETURN(const AttentionPrologueInputs in,
                       attention_prologue_inputs(tokens, q_lora, seed));
  // The reference promises the unfused CPU ops' bits; another backend their class-T allowance.
  const int32_t ulps = op == attention_prologue_ref ? 0 : 1;
  const bf16 poison = float_to_bf16(NAN);
  const int64_t T = tokens;
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved}) {
    std::vector<bf16> rows = in.rows;
    std::vector<bf16> cq(size_t(T) * q_lora + kTail, poison);
    std::vector<bf16> k(size_t(T) * kIndexHeadDim + kTail, poison);
    AttentionPrologueParams p;
    p.num_tokens = tokens;
    p.qa = rows.data() + in.qa_col();
    p.qa_ld = in.ld;
    p.q_a_norm_w = in.q_a_norm_w.data();
    p.cq = cq.data();
    p.q_lora = q_lora;
    p.latent = rows.data() + in.latent_col();
    p.latent_ld = in.ld;
    p.kv_a_norm_w = in.kv_a_norm_w.data();
    p.k_raw = rows.data() + in.k_raw_col();
    p.k_raw_ld = in.ld;
    p.k_norm_w = in.k_norm_w.data();
    p.k_norm_b = in.k_norm_b.data();
    p.k = k.data();
    p.index_rope_style = style;
    p.positions = in.positions.data();
    p.cos = in.cos.data();
    p.sin = in.sin.data();
    p.num_positions = in.num_positions;
    DSA_RETURN_IF_ERROR(op(p));

    DSA_ASSIGN_OR_RETURN(const Expected e, expected(in, style));
    DSA_RETURN_IF_ERROR(expect_dense(style, "cq", cq, e.cq, q_lora, poison, ulps));
    DSA_RETURN_IF_ERROR(expect_dense(style, "k", k, e.k, kIndexHeadDim, poison, ulps));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < in.ld; ++j) {
        const size_t i = size_t(t * in.ld + j);
        const int64_t l = j - in.latent_col();
        if (l < 0) {  // qa and k_raw: only read
          if (rows[i].bits != in.rows[i].bits) {
            return internal_error(fmt::format(
                "attention_prologue ({}): input row {} column {} (qa | k_raw) was written",
                style_name(style), t, j));
          }
        } else if (!close(rows[i], e.latent[size_t(t * kQkDim + l)], ulps)) {
          return mismatch(style, "latent", t, l, rows[i], e.latent[size_t(t * kQkDim + l)], ulps);
        }
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
