#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/spans.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "rmsnorm";
constexpr std::string_view kAddOp = "residual_add";
constexpr std::string_view kFusedOp = "add_rmsnorm";

int64_t stride_or_dim(int64_t stride, int32_t dim) { return stride == 0 ? dim : stride; }

// Whether the bf16 spans [a, a + a_elems) and [b, b + b_elems) share a byte.
bool overlaps(const bf16* a, int64_t a_elems, const bf16* b, int64_t b_elems) {
  return elems_overlap(a, a_elems, b, b_elems);
}
}  // namespace

Status validate(const RmsNormParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "dim", p.dim, 1, INT32_MAX));
  if (!(std::isfinite(p.eps) && p.eps > 0.f)) {
    return invalid_argument(fmt::format("{}: eps = {}: must be finite and > 0", kOp, p.eps));
  }
  DSA_RETURN_IF_ERROR(
      require_in(kOp, "x_stride", stride_or_dim(p.x_stride, p.dim), p.dim, INT64_MAX));
  DSA_RETURN_IF_ERROR(
      require_in(kOp, "y_stride", stride_or_dim(p.y_stride, p.dim), p.dim, INT64_MAX));
  if (p.x_rows != nullptr) {
    DSA_RETURN_IF_ERROR(require_in(kOp, "x_row_bound", p.x_row_bound, 1, INT32_MAX));
  }
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "x", p.x));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "weight", p.weight));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "y", p.y));
  if (p.x_rows == nullptr) {
    if (p.x_copy != nullptr) {
      return invalid_argument(fmt::format("{}: x_copy is set without x_rows", kOp));
    }
    return ok_status();
  }
  // Gathered: other rows' blocks read x while a row's y (and x_copy) is written.
  const int64_t xs = stride_or_dim(p.x_stride, p.dim), ys = stride_or_dim(p.y_stride, p.dim);
  const int64_t x_elems = rows_span(p.x_row_bound, xs, p.dim);
  const int64_t y_elems = rows_span(p.num_tokens, ys, p.dim);
  const int64_t copy_elems = int64_t{p.num_tokens} * p.dim;
  if (overlaps(p.y, y_elems, p.x, x_elems)) {
    return invalid_argument(fmt::format("{}: y overlaps the gathered x", kOp));
  }
  if (p.x_copy != nullptr && (overlaps(p.x_copy, copy_elems, p.x, x_elems) ||
                              overlaps(p.x_copy, copy_elems, p.y, y_elems))) {
    return invalid_argument(fmt::format("{}: x_copy overlaps x or y", kOp));
  }
  return ok_status();
}

Status rmsnorm_ref(const RmsNormParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const int64_t xs = stride_or_dim(p.x_stride, p.dim), ys = stride_or_dim(p.y_stride, p.dim);
  const auto in_bound = [&](int32_t r) { return r >= 0 && r < p.x_row_bound; };
  if (p.x_rows != nullptr && checked_mode()) {
    for (int32_t t = 0; t < p.num_tokens; ++t) {
      const int32_t r = p.x_rows[t];
      if (!in_bound(r) && !(p.skip_minus_one && r == -1)) {
        return element_error(StatusCode::kOutOfRange, kOp, "x_rows", t, r,
                             fmt::format("must be in [0, x_row_bound = {}){}", p.x_row_bound,
                                         p.skip_minus_one ? " or -1" : ""));
      }
    }
  }
  parallel_for(p.num_tokens, [&](int64_t t) {
    // The input row; nullptr: a gathered entry out of range, read as zeros.
    const bf16* x = p.x + t * xs;
    if (p.x_rows != nullptr) x = in_bound(p.x_rows[t]) ? p.x + p.x_rows[t] * xs : nullptr;
    std::vector<double> row(static_cast<size_t>(p.dim));  // copied first: y may alias x
    double sum_sq = 0.0;
    for (int32_t d = 0; d < p.dim; ++d) {
      row[d] = x != nullptr ? bf16_to_float(x[d]) : 0.0;
      sum_sq += row[d] * row[d];
    }
    if (p.x_copy != nullptr) {
      bf16* c = p.x_copy + t * p.dim;
      for (int32_t d = 0; d < p.dim; ++d) c[d] = x != nullptr ? x[d] : bf16{};
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / p.dim + double{p.eps});
    bf16* y = p.y + t * ys;
    for (int32_t d = 0; d < p.dim; ++d) {
      y[d] = double_to_bf16(row[d] * inv_rms * double{bf16_to_float(p.weight[d])});
    }
  });
  return ok_status();
}

Status validate_pair(const RmsNormParams& first, const RmsNormParams& second) {
  const RmsNormParams* norms[] = {&first, &second};
  for (int i = 0; i < 2; ++i) {
    Status st = validate(*norms[i]);
    if (!st.ok()) return st.with_context(fmt::format("rmsnorm_pair: norm {}", i));
  }
  if (first.num_tokens != second.num_tokens || first.dim != second.dim) {
    return invalid_argument(fmt::format(
        "rmsnorm_pair: num_tokens {} and {}, dim {} and {}: the two norms must have the same "
        "shape",
        first.num_tokens, second.num_tokens, first.dim, second.dim));
  }
  if (first.num_tokens == 0) return ok_status();
  // Each norm's x as read (its gathered rows' span, or its dense rows), against the other's
  // outputs: the CUDA launch runs both at once.
  const auto x_elems = [](const RmsNormParams& p) {
    const int64_t xs = stride_or_dim(p.x_stride, p.dim);
    return rows_span(p.x_rows != nullptr ? p.x_row_bound : p.num_tokens, xs, p.dim);
  };
  // The two norms' outputs may not share an element either (the CUDA launch writes both at
  // once). Rows of one stride interleave (the MTP layer's halves of one concatenated row): there
  // they collide only where one's row offset modulo the stride comes within dim of the other's.
  const int64_t ys0 = stride_or_dim(first.y_stride, first.dim);
  const int64_t ys1 = stride_or_dim(second.y_stride, second.dim);
  const int64_t rows_elems0 = rows_span(first.num_tokens, ys0, first.dim);
  const int64_t rows_elems1 = rows_span(second.num_tokens, ys1, second.dim);
  if (overlaps(first.y, rows_elems0, second.y, rows_elems1)) {
    bool collide = true;
    if (ys0 == ys1) {
      const int64_t delta = second.y - first.y;
      const int64_t m = ((delta % ys0) + ys0) % ys0;  // second's row offset within first's rows
      collide = m < first.dim || ys0 - m < first.dim;
    }
    if (collide) {
      return invalid_argument("rmsnorm_pair: the two norms' y share elements");
    }
  }
  const int64_t copy_elems = int64_t{first.num_tokens} * first.dim;
  const bf16* outs[2][2] = {{first.y, first.x_copy}, {second.y, second.x_copy}};
  const int64_t out_elems[2][2] = {{rows_elems0, copy_elems}, {rows_elems1, copy_elems}};
  for (int i = 0; i < 2; ++i) {  // an x_copy against every output of the other norm
    const bf16* copy = outs[i][1];
    if (copy == nullptr) continue;
    for (int k = 0; k < 2; ++k) {
      const bf16* other = outs[1 - i][k];
      if (other != nullptr && overlaps(copy, copy_elems, other, out_elems[1 - i][k])) {
        return invalid_argument(fmt::format("rmsnorm_pair: norm {}'s x_copy overlaps norm {}'s {}",
                                            i, 1 - i, k ? "x_copy" : "y"));
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    const RmsNormParams& w = *norms[i];
    const RmsNormParams& r = *norms[1 - i];
    const int64_t y_elems = rows_span(w.num_tokens, stride_or_dim(w.y_stride, w.dim), w.dim);
    const bool y_hits = overlaps(w.y, y_elems, r.x, x_elems(r));
    const bool copy_hits =
        w.x_copy != nullptr && overlaps(w.x_copy, int64_t{w.num_tokens} * w.dim, r.x, x_elems(r));
    if (y_hits || copy_hits) {
      return invalid_argument(fmt::format("rmsnorm_pair: norm {}'s {} overlaps norm {}'s x", i,
                                          y_hits ? "y" : "x_copy", 1 - i));
    }
  }
  return ok_status();
}

Status rmsnorm_pair_ref(const RmsNormParams& first, const RmsNormParams& second) {
  DSA_RETURN_IF_ERROR(validate_pair(first, second));
  const RmsNormParams* norms[] = {&first, &second};
  for (int i = 0; i < 2; ++i) {
    Status st = rmsnorm_ref(*norms[i]);
    if (!st.ok()) return st.with_context(fmt::format("rmsnorm_pair: norm {}", i));
  }
  return ok_status();
}

Status validate(const ResidualAddParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kAddOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kAddOp, "dim", p.dim, 1, INT32_MAX));
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kAddOp, "h", p.h));
  return require_pointer(kAddOp, "x", p.x);
}

Status residual_add_ref(const ResidualAddParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const int64_t n = int64_t{p.num_tokens} * p.dim;
  for (int64_t i = 0; i < n; ++i) {
    const float sum = bf16_to_float(p.h[i]) + bf16_to_float(p.x[i]);  // one fp32 add
    p.h[i] = float_to_bf16(sum);
  }
  return ok_status();
}

Status validate(const AddRmsNormParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kFusedOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kFusedOp, "dim", p.dim, 1, INT32_MAX));
  if (!(std::isfinite(p.eps) && p.eps > 0.f)) {
    return invalid_argument(fmt::format("{}: eps = {}: must be finite and > 0", kFusedOp, p.eps));
  }
  const int64_t ys = stride_or_dim(p.y_stride, p.dim);
  DSA_RETURN_IF_ERROR(require_in(kFusedOp, "y_stride", ys, p.dim, INT64_MAX));
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kFusedOp, "h", p.h));
  DSA_RETURN_IF_ERROR(require_pointer(kFusedOp, "add", p.add));
  DSA_RETURN_IF_ERROR(require_pointer(kFusedOp, "weight", p.weight));
  DSA_RETURN_IF_ERROR(require_pointer(kFusedOp, "y", p.y));
  // Unlike rmsnorm, y may not be the input: one block's y row could be another's h row still
  // being read, and y == h would leave h holding the norm instead of the residual stream. y's
  // span runs from its first row to the end of its last (conservative: the gaps count).
  const int64_t hn = int64_t{p.num_tokens} * p.dim;
  int64_t yn = 0;
  if (__builtin_mul_overflow(int64_t{p.num_tokens} - 1, ys, &yn) ||
      __builtin_add_overflow(yn, int64_t{p.dim}, &yn)) {
    yn = INT64_MAX;
  }
  // add may be h itself (each element reads only its own), not a shifted part of it: the CUDA
  // kernel's block t writes row t of h while block t + 1 may still read it through add.
  if (p.add != p.h && overlaps(p.h, hn, p.add, hn)) {
    return invalid_argument(
        fmt::format("{}: add = {} partly overlaps h = {}: it must be h or a buffer of its own",
                    kFusedOp, fmt::ptr(p.add), fmt::ptr(p.h)));
  }
  for (auto [name, buf] : {std::pair<std::string_view, const bf16*>{"h", p.h}, {"add", p.add}}) {
    if (overlaps(p.y, yn, buf, hn)) {
      return invalid_argument(
          fmt::format("{}: y = {} overlaps {} = {}: y must be a buffer of its own", kFusedOp,
                      fmt::ptr(p.y), name, fmt::ptr(buf)));
    }
  }
  return ok_status();
}

Status add_rmsnorm_ref(const AddRmsNormParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  // Literally the unfused sequence, so the two can never drift apart.
  DSA_RETURN_IF_ERROR(residual_add_ref({p.h, p.add, p.num_tokens, p.dim}));
  RmsNormParams n;
  n.x = p.h;
  n.weight = p.weight;
  n.y = p.y;
  n.num_tokens = p.num_tokens;
  n.dim = p.dim;
  n.y_stride = p.y_stride;
  n.eps = p.eps;
  return rmsnorm_ref(n);
}

}  // namespace dsa::kernels
