#include <cmath>
#include <vector>

#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/layernorm/layernorm.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "layernorm";

int64_t stride_or_dim(int64_t stride, int32_t dim) { return stride == 0 ? dim : stride; }
}  // namespace

Status validate(const LayerNormParams& p) {
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
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "bias", p.bias));
  return require_pointer(kOp, "y", p.y);
}

Status layernorm_ref(const LayerNormParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const int64_t xs = stride_or_dim(p.x_stride, p.dim), ys = stride_or_dim(p.y_stride, p.dim);
  parallel_for(p.num_tokens, [&](int64_t t) {
    std::vector<double> row(static_cast<size_t>(p.dim));  // copied first: y may alias x
    double sum = 0.0;
    for (int32_t d = 0; d < p.dim; ++d) {
      row[d] = bf16_to_float(p.x[t * xs + d]);
      sum += row[d];
    }
    const double mean = sum / p.dim;
    double sum_sq = 0.0;  // second pass about the mean: no cancellation of E[x^2] - mu^2
    for (int32_t d = 0; d < p.dim; ++d) sum_sq += (row[d] - mean) * (row[d] - mean);
    const double inv_std = 1.0 / std::sqrt(sum_sq / p.dim + double{p.eps});
    bf16* y = p.y + t * ys;
    for (int32_t d = 0; d < p.dim; ++d) {
      y[d] = double_to_bf16((row[d] - mean) * inv_std * double{p.weight[d]} + double{p.bias[d]});
    }
  });
  return ok_status();
}

}  // namespace dsa::kernels
