#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "dsa/core/thread_pool.h"
#include "dsa/kernels/batched_linear/batched_linear.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/validate.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "batched_linear";
constexpr int32_t kOutChunk = 64;  // outputs per task: parallel even when B * T is small

// n * stride + extent <= limit for n, stride, extent >= 0, without forming the product (it can
// pass int64 for B near 2^31 and strides near the cap).
bool fits(int64_t n, int64_t stride, int64_t extent, int64_t limit) {
  if (extent > limit) return false;
  if (n == 0 || stride == 0) return true;
  return n <= (limit - extent) / stride;
}

Status require_stride(std::string_view field, int64_t value, int64_t lo) {
  return require_in(kOp, field, value, lo, kBatchedLinearMaxStride);
}

// Calls fn(b, t, i, dot, abs_dot) for every output with dot = sum_j x_j w_j accumulated as
// linear_ref does for a bf16 weight: exact products in double, four interleaved partial sums,
// then (s0 + s1) + (s2 + s3).
template <typename Fn>
void for_each_output(const BatchedLinearParams& p, Fn fn) {
  const int64_t chunks = (p.out_features + kOutChunk - 1) / kOutChunk;
  const int64_t T = p.num_tokens;
  parallel_for(int64_t{p.batch} * T * chunks, [&](int64_t task) {
    const int64_t bt = task / chunks, b = bt / T, t = bt % T;
    const int32_t i0 = int32_t(task % chunks) * kOutChunk;
    const bf16* xr = p.x + b * p.x_batch_stride + t * p.x_ld;
    std::vector<float> x(size_t(p.in_features));
    std::vector<double> w(size_t(p.in_features));
    for (int32_t j = 0; j < p.in_features; ++j) x[size_t(j)] = bf16_to_float(xr[j]);
    for (int32_t i = i0; i < std::min(i0 + kOutChunk, p.out_features); ++i) {
      const bf16* wr = p.weight + b * p.w_batch_stride + int64_t{i} * p.in_features;
      for (int32_t j = 0; j < p.in_features; ++j) w[size_t(j)] = bf16_to_float(wr[j]);
      double s[4] = {0, 0, 0, 0}, a[4] = {0, 0, 0, 0};
      for (int32_t j = 0; j < p.in_features; ++j) {
        const double prod = double{x[size_t(j)]} * w[size_t(j)];  // exact
        s[j & 3] += prod;
        a[j & 3] += std::fabs(prod);
      }
      fn(b, t, i, (s[0] + s[1]) + (s[2] + s[3]), (a[0] + a[1]) + (a[2] + a[3]));
    }
  });
}
}  // namespace

Status validate(const BatchedLinearParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "batch", p.batch, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "in_features", p.in_features, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "out_features", p.out_features, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_stride("x_ld", p.x_ld, p.in_features));
  DSA_RETURN_IF_ERROR(require_stride("x_batch_stride", p.x_batch_stride, 0));
  DSA_RETURN_IF_ERROR(
      require_stride("w_batch_stride", p.w_batch_stride, int64_t{p.out_features} * p.in_features));
  DSA_RETURN_IF_ERROR(require_stride("y_ld", p.y_ld, p.out_features));
  DSA_RETURN_IF_ERROR(require_stride("y_batch_stride", p.y_batch_stride, 0));
  if (p.num_tokens == 0) return ok_status();
  if (p.batch > 1) {
    const bool side_by_side = p.y_batch_stride >= p.out_features &&
                              fits(p.batch - 1, p.y_batch_stride, p.out_features, p.y_ld);
    const bool one_after = fits(p.num_tokens - 1, p.y_ld, p.out_features, p.y_batch_stride);
    if (!side_by_side && !one_after) {
      return invalid_argument(fmt::format(
          "{}: y_batch_stride = {} with y_ld = {}: outputs of different batches overlap (batch = "
          "{}, num_tokens = {}, out_features = {}); need (batch - 1) * y_batch_stride + "
          "out_features <= y_ld with y_batch_stride >= out_features, or (num_tokens - 1) * y_ld + "
          "out_features <= y_batch_stride",
          kOp, p.y_batch_stride, p.y_ld, p.batch, p.num_tokens, p.out_features));
    }
  }
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "x", p.x));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "weight", p.weight));
  return require_pointer(kOp, "y", p.y);
}

Status batched_linear_ref(const BatchedLinearParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  for_each_output(p, [&](int64_t b, int64_t t, int32_t i, double dot, double) {
    p.y[b * p.y_batch_stride + t * p.y_ld + i] = double_to_bf16(dot);
  });
  return ok_status();
}

Status batched_linear_tolerance_bounds(const BatchedLinearParams& p, const float* ref,
                                       float* bound) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "ref", ref));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "bound", bound));
  for_each_output(p, [&](int64_t b, int64_t t, int32_t i, double, double abs_dot) {
    const int64_t k = (b * p.num_tokens + t) * p.out_features + i;
    bound[k] = static_cast<float>(0x1p-12 * abs_dot + 0x1p-7 * std::fabs(double{ref[k]}));
  });
  return ok_status();
}

}  // namespace dsa::kernels
