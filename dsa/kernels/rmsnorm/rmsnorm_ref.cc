#include <cmath>
#include <vector>

#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "rmsnorm";
constexpr std::string_view kAddOp = "residual_add";

int64_t stride_or_dim(int64_t stride, int32_t dim) { return stride == 0 ? dim : stride; }
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

}  // namespace dsa::kernels
