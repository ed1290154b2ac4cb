#include "dsa/kernels/batched_linear/batched_linear_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dsa/kernels/common/bf16_round.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
constexpr int32_t kXPad = 3, kYPad = 5;  // odd, so no stride is the width or a power of two
}  // namespace

Status check_batched_linear(BatchedLinearFn op, int32_t batch, int32_t tokens, int32_t in_features,
                            int32_t out_features, uint64_t seed) {
  if (batch < 1 || tokens < 1 || in_features < 1 || out_features < 1) {
    return invalid_argument(fmt::format(
        "check_batched_linear: batch = {}, tokens = {}, in_features = {}, out_features = {}: all "
        "must be >= 1",
        batch, tokens, in_features, out_features));
  }
  testing::Rng rng(seed);
  const int64_t xs = in_features + kXPad, ys = out_features + kYPad;
  const int64_t x_ld = xs * batch, y_ld = ys * batch, wn = int64_t{out_features} * in_features;
  std::vector<bf16> x(size_t(x_ld) * tokens);
  for (int32_t t = 0; t < tokens; ++t) {
    const float scale = std::ldexp(1.f, int(rng.randint(-6, 6)));
    for (int64_t k = 0; k < x_ld; ++k)
      x[size_t(t * x_ld + k)] = float_to_bf16(rng.normal() * scale);
  }
  const std::vector<bf16> w = rng.bf16_vector(size_t(wn) * batch, 0.05f);
  std::vector<bf16> y(size_t(y_ld) * tokens, float_to_bf16(NAN));

  BatchedLinearParams p;
  p.x = x.data();
  p.weight = w.data();
  p.y = y.data();
  p.batch = batch;
  p.num_tokens = tokens;
  p.in_features = in_features;
  p.out_features = out_features;
  p.x_ld = x_ld;
  p.x_batch_stride = xs;
  p.w_batch_stride = wn;
  p.y_ld = y_ld;
  p.y_batch_stride = ys;
  DSA_RETURN_IF_ERROR(op(p));

  std::vector<long double> want(static_cast<size_t>(out_features));
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t t = 0; t < tokens; ++t) {
      std::fill(want.begin(), want.end(), 0.0L);
      for (int32_t j = 0; j < in_features; ++j) {  // j outer: another order than the reference's
        const long double xj = bf16_to_float(x[size_t(t * x_ld + b * xs + j)]);
        for (int32_t i = 0; i < out_features; ++i)
          want[size_t(i)] += xj * bf16_to_float(w[size_t(b * wn + int64_t{i} * in_features + j)]);
      }
      const bf16* row = &y[size_t(t * y_ld + b * ys)];
      for (int32_t i = 0; i < out_features; ++i) {
        const bf16 ref = double_to_bf16(static_cast<double>(want[size_t(i)]));
        if (bf16_ulp_distance(row[i], ref) > 1) {
          return internal_error(fmt::format("batched_linear: y[b={}][t={}][{}] = {}, expected {}",
                                            b, t, i, bf16_to_float(row[i]), bf16_to_float(ref)));
        }
      }
      for (int32_t i = out_features; i < ys; ++i) {
        if (!std::isnan(bf16_to_float(row[i]))) {
          return internal_error(
              fmt::format("batched_linear: padding y[b={}][t={}][{}] was written (= {})", b, t, i,
                          bf16_to_float(row[i])));
        }
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
