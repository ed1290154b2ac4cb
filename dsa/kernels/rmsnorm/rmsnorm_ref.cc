#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "rmsnorm";
constexpr std::string_view kAddOp = "residual_add";
constexpr std::string_view kFusedOp = "add_rmsnorm";

int64_t stride_or_dim(int64_t stride, int32_t dim) { return stride == 0 ? dim : stride; }

// Whether the bf16 spans [a, a + a_elems) and [b, b + b_elems) share a byte. Compared as
// integers (the pointers usually come from different allocations), ends saturated (a stride
// near INT64_MAX passes the validation).
bool overlaps(const bf16* a, int64_t a_elems, const bf16* b, int64_t b_elems) {
  const auto end = [](uintptr_t p, int64_t elems) {
    const uintptr_t bytes = uintptr_t(elems) * sizeof(bf16);
    return bytes > UINTPTR_MAX - p ? UINTPTR_MAX : p + bytes;
  };
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < end(b0, b_elems) && b0 < end(a0, a_elems);
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
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "x", p.x));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "weight", p.weight));
  return require_pointer(kOp, "y", p.y);
}

Status rmsnorm_ref(const RmsNormParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const int64_t xs = stride_or_dim(p.x_stride, p.dim), ys = stride_or_dim(p.y_stride, p.dim);
  parallel_for(p.num_tokens, [&](int64_t t) {
    const bf16* x = p.x + t * xs;
    std::vector<double> row(static_cast<size_t>(p.dim));  // copied first: y may alias x
    double sum_sq = 0.0;
    for (int32_t d = 0; d < p.dim; ++d) {
      row[d] = bf16_to_float(x[d]);
      sum_sq += row[d] * row[d];
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / p.dim + double{p.eps});
    bf16* y = p.y + t * ys;
    for (int32_t d = 0; d < p.dim; ++d) {
      y[d] = double_to_bf16(row[d] * inv_rms * double{bf16_to_float(p.weight[d])});
    }
  });
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
