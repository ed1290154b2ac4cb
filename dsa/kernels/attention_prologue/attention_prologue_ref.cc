// The attention prologue's validation, its unfused parts, and the CPU reference (SPEC.md §8.4,
// §8.5): the six CPU ops in the model's unfused order.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "dsa/kernels/attention_prologue/attention_prologue.h"
#include "dsa/kernels/attention_prologue/attention_prologue_parts.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/common/spans.h"
#include "dsa/kernels/common/validate.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "attention_prologue";

// A buffer's bf16 elements [p, p + elems), for the overlap checks.
struct Span {
  std::string_view name;
  const bf16* p;
  int64_t elems;
};

bool overlaps(const Span& a, const Span& b) { return elems_overlap(a.p, a.elems, b.p, b.elems); }

// Rows of `a` (written) and of `b` (read): apart when their row spans miss each other, or when they
// are column ranges of one buffer: the same row stride, and b's columns outside a's in every row.
Status require_columns_apart(int64_t rows, std::string_view a_name, const bf16* a, int64_t a_ld,
                             int64_t a_width, std::string_view b_name, const bf16* b, int64_t b_ld,
                             int64_t b_width) {
  if (!overlaps({a_name, a, rows_span(rows, a_ld, a_width)},
                {b_name, b, rows_span(rows, b_ld, b_width)})) {
    return ok_status();
  }
  // Same buffer: b starts `col` elements into a row of a's stride (bytes apart a whole number of
  // elements, or the two cannot be column ranges).
  const intptr_t bytes = reinterpret_cast<intptr_t>(b) - reinterpret_cast<intptr_t>(a);
  if (a_ld == b_ld && bytes % intptr_t(sizeof(bf16)) == 0) {
    const int64_t col = ((int64_t(bytes / intptr_t(sizeof(bf16))) % a_ld) + a_ld) % a_ld;
    if (col >= a_width && col + b_width <= a_ld) return ok_status();
  }
  return invalid_argument(fmt::format(
      "{}: {} = {} (row stride {}) and {} = {} (row stride {}) share elements: as column ranges "
      "of one buffer they need one row stride and {}'s {} columns clear of {}'s {}",
      kOp, a_name, fmt::ptr(a), a_ld, b_name, fmt::ptr(b), b_ld, a_name, a_width, b_name, b_width));
}

Status require_eps(std::string_view field, float eps) {
  if (std::isfinite(eps) && eps > 0.f) return ok_status();
  return invalid_argument(fmt::format("{}: {} = {}: must be finite and > 0", kOp, field, eps));
}
}  // namespace

Status validate(const AttentionPrologueParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "q_lora", p.q_lora, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "qa_ld", p.qa_ld, p.q_lora, INT64_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "latent_ld", p.latent_ld, kQkDim, INT64_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "k_raw_ld", p.k_raw_ld, kIndexHeadDim, INT64_MAX));
  if (p.index_rope_style != RopeStyle::kInterleaved &&
      p.index_rope_style != RopeStyle::kNonInterleaved) {
    return field_error(StatusCode::kInvalidArgument, kOp, "index_rope_style",
                       static_cast<int64_t>(p.index_rope_style),
                       "must be kInterleaved or kNonInterleaved");
  }
  DSA_RETURN_IF_ERROR(require_eps("rms_eps", p.rms_eps));
  DSA_RETURN_IF_ERROR(require_eps("layernorm_eps", p.layernorm_eps));
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_positions", p.num_positions, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "qa", p.qa));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "q_a_norm_w", p.q_a_norm_w));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "cq", p.cq));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "latent", p.latent));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "kv_a_norm_w", p.kv_a_norm_w));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "k_raw", p.k_raw));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "k_norm_w", p.k_norm_w));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "k_norm_b", p.k_norm_b));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "k", p.k));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "positions", p.positions));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "cos", p.cos));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "sin", p.sin));
  // cq and k are written while other tokens' (and parts') blocks still read qa, k_raw and latent,
  // so each is a buffer of its own. qa, k_raw and latent may be column ranges of one buffer (the
  // fused linear's output), whose row spans interleave: then the latent, written in place, must
  // share their row stride and its columns must miss theirs.
  const int64_t T = p.num_tokens;
  DSA_RETURN_IF_ERROR(require_columns_apart(T, "latent", p.latent, p.latent_ld, kQkDim, "qa", p.qa,
                                            p.qa_ld, p.q_lora));
  DSA_RETURN_IF_ERROR(require_columns_apart(T, "latent", p.latent, p.latent_ld, kQkDim, "k_raw",
                                            p.k_raw, p.k_raw_ld, kIndexHeadDim));
  const Span qa{"qa", p.qa, rows_span(T, p.qa_ld, p.q_lora)};
  const Span k_raw{"k_raw", p.k_raw, rows_span(T, p.k_raw_ld, kIndexHeadDim)};
  const Span latent{"latent", p.latent, rows_span(T, p.latent_ld, kQkDim)};
  const Span cq{"cq", p.cq, rows_span(T, p.q_lora, p.q_lora)};
  const Span k{"k", p.k, rows_span(T, kIndexHeadDim, kIndexHeadDim)};
  for (const Span& out : {cq, k}) {
    for (const Span& other : {qa, k_raw, latent, cq, k}) {
      if (other.name == out.name) continue;
      if (overlaps(out, other)) {
        return invalid_argument(
            fmt::format("{}: {} = {} overlaps {}'s rows at {}: {} must be a buffer of its own", kOp,
                        out.name, fmt::ptr(out.p), other.name, fmt::ptr(other.p), out.name));
      }
    }
  }
  return ok_status();
}

AttentionPrologueParts attention_prologue_parts(const AttentionPrologueParams& p) {
  AttentionPrologueParts s;
  s.q_norm.x = p.qa;
  s.q_norm.x_stride = p.qa_ld;
  s.q_norm.weight = p.q_a_norm_w;
  s.q_norm.y = p.cq;
  s.q_norm.num_tokens = p.num_tokens;
  s.q_norm.dim = p.q_lora;
  s.q_norm.eps = p.rms_eps;

  s.latent_norm.x = p.latent;
  s.latent_norm.x_stride = p.latent_ld;
  s.latent_norm.weight = p.kv_a_norm_w;
  s.latent_norm.y = p.latent;
  s.latent_norm.y_stride = p.latent_ld;
  s.latent_norm.num_tokens = p.num_tokens;
  s.latent_norm.dim = kLatentDim;
  s.latent_norm.eps = p.rms_eps;

  const auto rope = [&](bf16* x, int64_t stride, RopeStyle style) {
    RopeParams r;
    r.x = x;
    r.positions = p.positions;
    r.cos = p.cos;
    r.sin = p.sin;
    r.num_tokens = p.num_tokens;
    r.num_heads = 1;
    r.token_stride = stride;
    r.head_stride = stride;
    r.num_positions = p.num_positions;
    r.style = style;
    return r;
  };
  s.latent_rope = rope(p.latent + kLatentDim, p.latent_ld, RopeStyle::kInterleaved);

  s.k_norm.x = p.k_raw;
  s.k_norm.x_stride = p.k_raw_ld;
  s.k_norm.weight = p.k_norm_w;
  s.k_norm.bias = p.k_norm_b;
  s.k_norm.y = p.k;
  s.k_norm.num_tokens = p.num_tokens;
  s.k_norm.dim = kIndexHeadDim;
  s.k_norm.eps = p.layernorm_eps;

  s.k_rope = rope(p.k, kIndexHeadDim, p.index_rope_style);
  s.k_hadamard = HadamardParams{p.k, p.k, p.num_tokens};
  return s;
}

Status attention_prologue_ref(const AttentionPrologueParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  // Literally the unfused sequence (model/mla_attention.cc's order), so the two never drift apart.
  const AttentionPrologueParts s = attention_prologue_parts(p);
  DSA_RETURN_IF_ERROR(rmsnorm_ref(s.q_norm));
  DSA_RETURN_IF_ERROR(rmsnorm_ref(s.latent_norm));
  DSA_RETURN_IF_ERROR(rope_ref(s.latent_rope));
  DSA_RETURN_IF_ERROR(layernorm_ref(s.k_norm));
  DSA_RETURN_IF_ERROR(rope_ref(s.k_rope));
  return hadamard_ref(s.k_hadamard);
}

}  // namespace dsa::kernels
