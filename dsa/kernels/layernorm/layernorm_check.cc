#include "dsa/kernels/layernorm/layernorm_check.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "dsa/kernels/common/bf16_round.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
// Independent formulation: long double, sums back to front, variance as E[(x - mu)^2] written
// with a division per term, then (x - mu) / sigma * w + b.
std::vector<bf16> expected_row(const bf16* x, const float* w, const float* b, int32_t dim,
                               float eps) {
  long double mean = 0;
  for (int32_t j = dim - 1; j >= 0; --j) mean += static_cast<long double>(bf16_to_float(x[j]));
  mean /= dim;
  long double var = 0;
  for (int32_t j = dim - 1; j >= 0; --j) {
    long double c = bf16_to_float(x[j]) - mean;
    var += c * c / dim;
  }
  long double sigma = std::sqrt(var + eps);
  std::vector<bf16> y(static_cast<size_t>(dim));
  for (int32_t j = 0; j < dim; ++j) {
    long double v = (bf16_to_float(x[j]) - mean) / sigma * w[j] + b[j];
    y[j] = double_to_bf16(static_cast<double>(v));
  }
  return y;
}
}  // namespace

Status check_layernorm(LayerNormFn op, int32_t tokens, int32_t dim, uint64_t seed) {
  if (tokens < 1 || dim < 1) {
    return invalid_argument(
        fmt::format("check_layernorm: tokens = {}, dim = {}: both must be >= 1", tokens, dim));
  }
  testing::Rng rng(seed);
  const int64_t x_stride = dim + 5;
  std::vector<bf16> x(size_t(tokens) * x_stride);
  for (int32_t t = 0; t < tokens; ++t) {
    const float offset = rng.uniform(-40.f, 40.f), scale = std::ldexp(1.f, int(rng.randint(-4, 4)));
    for (int64_t j = 0; j < x_stride; ++j)
      x[t * x_stride + j] = float_to_bf16(offset + rng.normal() * scale);
  }
  std::vector<float> w = rng.normal_vector(size_t(dim)), b = rng.normal_vector(size_t(dim), 0.3f);
  std::vector<bf16> y(size_t(tokens) * dim, float_to_bf16(NAN));

  LayerNormParams p;
  p.x = x.data();
  p.weight = w.data();
  p.bias = b.data();
  p.y = y.data();
  p.num_tokens = tokens;
  p.dim = dim;
  p.x_stride = x_stride;
  DSA_RETURN_IF_ERROR(op(p));

  for (int32_t t = 0; t < tokens; ++t) {
    std::vector<bf16> want = expected_row(&x[t * x_stride], w.data(), b.data(), dim, p.eps);
    for (int32_t d = 0; d < dim; ++d) {
      bf16 got = y[size_t(t) * dim + d];
      if (bf16_ulp_distance(got, want[d]) > 1) {
        return internal_error(fmt::format("layernorm: y[{}][{}] = {}, expected {} (> 1 bf16 ulp)",
                                          t, d, bf16_to_float(got), bf16_to_float(want[d])));
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
