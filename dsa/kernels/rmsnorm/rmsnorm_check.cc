#include "dsa/kernels/rmsnorm/rmsnorm_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
Status require_shape(std::string_view what, int32_t tokens, int32_t dim) {
  if (tokens >= 1 && dim >= 1) return ok_status();
  return invalid_argument(
      fmt::format("{}: tokens = {}, dim = {}: both must be >= 1", what, tokens, dim));
}

// Independent formulation: long double, sum of squares taken back to front, divide by the root.
bf16 expected_rms(const bf16* x, const bf16* w, int32_t dim, int32_t d, float eps) {
  long double sum_sq = 0;
  for (int32_t j = dim - 1; j >= 0; --j) {
    long double v = bf16_to_float(x[j]);
    sum_sq += v * v;
  }
  long double rms = std::sqrt(sum_sq / dim + eps);
  long double y = static_cast<long double>(bf16_to_float(x[d])) * bf16_to_float(w[d]) / rms;
  return double_to_bf16(static_cast<double>(y));
}

// Row t of y (y_stride apart, the gap past dim still `poison`) within 1 bf16 ulp of the norm of
// input(t); `what` names the op and `where(t)` adds to the message.
template <typename InputRow, typename Where>
Status expect_norm_rows(std::string_view what, const bf16* y, bf16 poison, int32_t tokens,
                        int32_t dim, int64_t y_stride, const bf16* w, float eps,
                        const InputRow& input, const Where& where) {
  for (int32_t t = 0; t < tokens; ++t) {
    const bf16* x = input(t);
    for (int64_t j = 0; j < y_stride; ++j) {
      const bf16 got = y[size_t(t) * y_stride + j];
      if (j >= dim) {
        if (got.bits != poison.bits) {
          return internal_error(
              fmt::format("{}: y[{}][{}] written (gap, dim {})", what, t, j, dim));
        }
        continue;
      }
      const bf16 want = expected_rms(x, w, dim, static_cast<int32_t>(j), eps);
      if (bf16_ulp_distance(got, want) > 1) {
        return internal_error(fmt::format("{}: y[{}][{}] = {}, expected {} (> 1 bf16 ulp{})", what,
                                          t, j, bf16_to_float(got), bf16_to_float(want), where(t)));
      }
    }
  }
  return ok_status();
}
}  // namespace

Status check_rmsnorm(RmsNormFn op, int32_t tokens, int32_t dim, uint64_t seed) {
  DSA_RETURN_IF_ERROR(require_shape("check_rmsnorm", tokens, dim));
  testing::Rng rng(seed);
  const int64_t x_stride = dim + 3;  // rows read from a wider buffer, as kv_a's latent part is
  std::vector<bf16> x(size_t(tokens) * x_stride);
  for (int32_t t = 0; t < tokens; ++t) {
    const float scale = std::ldexp(1.f, int(rng.randint(-6, 6)));
    for (int64_t j = 0; j < x_stride; ++j)
      x[t * x_stride + j] = float_to_bf16(rng.normal() * scale);
  }
  std::vector<bf16> w = rng.bf16_vector(size_t(dim), 0.5f);
  std::vector<bf16> y(size_t(tokens) * dim, float_to_bf16(NAN));

  RmsNormParams p;
  p.x = x.data();
  p.weight = w.data();
  p.y = y.data();
  p.num_tokens = tokens;
  p.dim = dim;
  p.x_stride = x_stride;
  DSA_RETURN_IF_ERROR(op(p));
  return expect_norm_rows(
      "rmsnorm", y.data(), float_to_bf16(NAN), tokens, dim, dim, w.data(), p.eps,
      [&](int32_t t) { return &x[size_t(t) * size_t(x_stride)]; },
      [](int32_t) { return std::string(); });
}

namespace {

// One gathered norm's inputs and outputs (check_rmsnorm_gathered's case): `tokens` entries into
// `bound` random rows (stride dim + 8), repeats and -1 (skip_minus_one) among them, and in
// unchecked mode also entries outside [0, bound); y (stride dim + 8) and x_copy NaN-poisoned.
// Not copyable: p points into the vectors.
struct GatheredCase {
  std::vector<bf16> x, w, y, copy;
  std::vector<int32_t> rows;
  int32_t bound = 0;
  RmsNormParams p;

  GatheredCase(testing::Rng& rng, int32_t tokens, int32_t dim, int32_t bound_, bool with_copy)
      : bound(bound_) {
    // Source rows read from a wider buffer; + 8 keeps 16-byte rows for the vector kernels.
    const int64_t x_stride = int64_t{dim} + 8, y_stride = int64_t{dim} + 8;
    x.resize(size_t(bound) * x_stride);
    for (int32_t r = 0; r < bound; ++r) {
      const float scale = std::ldexp(1.f, int(rng.randint(-6, 6)));
      for (int64_t j = 0; j < x_stride; ++j)
        x[r * x_stride + j] = float_to_bf16(rng.normal() * scale);
    }
    // Entries: mostly random rows (repeats among them), every 5th -1, and unchecked every 7th out
    // of range on either side (checked mode would refuse those).
    const bool bad_allowed = !checked_mode();
    rows.resize(static_cast<size_t>(tokens));
    for (int32_t t = 0; t < tokens; ++t) {
      if (t % 5 == 3) {
        rows[t] = -1;
      } else if (bad_allowed && t % 7 == 5) {
        rows[t] = t % 2 ? bound + int32_t(rng.randint(0, 3)) : -2 - int32_t(rng.randint(0, 100));
      } else if (t % 4 == 2) {
        rows[t] = rows[t - 1 - size_t(rng.randint(0, 1))];  // a repeat (or -1 / bad again)
      } else {
        rows[t] = int32_t(rng.randint(0, bound - 1));
      }
    }
    w = rng.bf16_vector(size_t(dim), 0.5f);
    y.assign(size_t(tokens) * y_stride, float_to_bf16(NAN));
    copy.assign(with_copy ? size_t(tokens) * dim : 0, float_to_bf16(NAN));
    p.x = x.data();
    p.weight = w.data();
    p.y = y.data();
    p.num_tokens = tokens;
    p.dim = dim;
    p.x_stride = x_stride;
    p.y_stride = y_stride;
    p.x_rows = rows.data();
    p.x_row_bound = bound;
    p.skip_minus_one = true;
    p.x_copy = with_copy ? copy.data() : nullptr;
  }
  GatheredCase(const GatheredCase&) = delete;
  GatheredCase& operator=(const GatheredCase&) = delete;

  // Every y within 1 bf16 ulp of the long-double norm of its gathered row (zeros for a bad
  // entry), the gap after each output row untouched, and x_copy bit-equal to the gathered rows.
  Status verify(std::string_view what) const {
    const int32_t tokens = p.num_tokens, dim = p.dim;
    // The gathered rows as a zero-filled dense buffer would hold them.
    std::vector<bf16> gathered(size_t(tokens) * size_t(dim));
    for (int32_t t = 0; t < tokens; ++t) {
      const int32_t r = rows[t];
      if (r < 0 || r >= bound) continue;
      std::copy_n(&x[size_t(r) * size_t(p.x_stride)], dim, &gathered[size_t(t) * size_t(dim)]);
    }
    DSA_RETURN_IF_ERROR(expect_norm_rows(
        what, y.data(), float_to_bf16(NAN), tokens, dim, p.y_stride, w.data(), p.eps,
        [&](int32_t t) { return &gathered[size_t(t) * size_t(dim)]; },
        [&](int32_t t) { return fmt::format("; x_rows[{}] = {}", t, rows[t]); }));
    for (int32_t t = 0; t < tokens; ++t) {
      const bf16* row = &gathered[size_t(t) * size_t(dim)];
      for (int32_t d = 0; !copy.empty() && d < dim; ++d) {
        const bf16 got = copy[size_t(t) * dim + d];
        if (got.bits != row[d].bits) {
          return internal_error(
              fmt::format("{}: x_copy[{}][{}] = {:#06x}, expected {:#06x} (x_rows[{}] = {})", what,
                          t, d, got.bits, row[d].bits, t, rows[t]));
        }
      }
    }
    return ok_status();
  }
};

Status require_bound(std::string_view what, int32_t bound) {
  if (bound >= 1 && bound <= (1 << 24)) return ok_status();
  return invalid_argument(fmt::format("{}: bound = {}: must be in [1, 2^24]", what, bound));
}

}  // namespace

Status check_rmsnorm_gathered(RmsNormFn op, int32_t tokens, int32_t dim, int32_t bound,
                              bool with_copy, uint64_t seed) {
  DSA_RETURN_IF_ERROR(require_shape("check_rmsnorm_gathered", tokens, dim));
  DSA_RETURN_IF_ERROR(require_bound("check_rmsnorm_gathered", bound));
  testing::Rng rng(seed);
  const GatheredCase c(rng, tokens, dim, bound, with_copy);
  DSA_RETURN_IF_ERROR(op(c.p));
  return c.verify("rmsnorm (gathered)");
}

Status check_rmsnorm_pair(RmsNormPairFn op, int32_t tokens, int32_t dim, int32_t bound,
                          uint64_t seed) {
  DSA_RETURN_IF_ERROR(require_shape("check_rmsnorm_pair", tokens, dim));
  DSA_RETURN_IF_ERROR(require_bound("check_rmsnorm_pair", bound));
  testing::Rng rng(seed);
  const GatheredCase first(rng, tokens, dim, bound, false);
  const GatheredCase second(rng, tokens, dim, 2 * bound + 1, true);
  DSA_RETURN_IF_ERROR(op(first.p, second.p));
  DSA_RETURN_IF_ERROR(first.verify("rmsnorm_pair (first)"));
  return second.verify("rmsnorm_pair (second)");
}

Status check_residual_add(ResidualAddFn op, int32_t tokens, int32_t dim, uint64_t seed) {
  DSA_RETURN_IF_ERROR(require_shape("check_residual_add", tokens, dim));
  testing::Rng rng(seed);
  const size_t n = size_t(tokens) * dim;
  std::vector<bf16> h(n), x(n);
  for (size_t i = 0; i < n; ++i) {
    // Magnitudes 2^-20..2^20 apart, so the fp32 add itself sometimes rounds.
    h[i] = float_to_bf16(rng.normal() * std::ldexp(1.f, int(rng.randint(-10, 10))));
    x[i] = float_to_bf16(rng.normal() * std::ldexp(1.f, int(rng.randint(-10, 10))));
  }
  const std::vector<bf16> h0 = h;
  ResidualAddParams p;
  p.h = h.data();
  p.x = x.data();
  p.num_tokens = tokens;
  p.dim = dim;
  DSA_RETURN_IF_ERROR(op(p));
  for (size_t i = 0; i < n; ++i) {
    // Independent formulation: the exact sum in double, then fp32 (the one fp32 add), then bf16.
    double exact = double{bf16_to_float(h0[i])} + double{bf16_to_float(x[i])};
    bf16 want = float_to_bf16(static_cast<float>(exact));
    if (h[i].bits != want.bits) {
      return internal_error(fmt::format("residual_add: h[{}][{}] = {}, expected {}", i / dim,
                                        i % dim, bf16_to_float(h[i]), bf16_to_float(want)));
    }
  }
  return ok_status();
}

Status check_add_rmsnorm(AddRmsNormFn op, int32_t tokens, int32_t dim, uint64_t seed) {
  DSA_RETURN_IF_ERROR(require_shape("check_add_rmsnorm", tokens, dim));
  testing::Rng rng(seed);
  const size_t n = size_t(tokens) * dim;
  const int64_t y_stride = dim + 5;  // a gap after each output row, which must stay poisoned
  std::vector<bf16> h(n), add(n);
  for (int32_t t = 0; t < tokens; ++t) {
    const float scale = std::ldexp(1.f, int(rng.randint(-6, 6)));
    for (int32_t d = 0; d < dim; ++d) {
      h[size_t(t) * dim + d] = float_to_bf16(rng.normal() * scale);
      const float add_scale = scale * std::ldexp(1.f, int(rng.randint(-8, 2)));
      add[size_t(t) * dim + d] = float_to_bf16(rng.normal() * add_scale);
    }
  }
  std::vector<bf16> w = rng.bf16_vector(size_t(dim), 0.5f);
  const bf16 poison = float_to_bf16(NAN);
  std::vector<bf16> y(size_t(tokens) * y_stride, poison);
  const std::vector<bf16> h0 = h;

  AddRmsNormParams p;
  p.h = h.data();
  p.add = add.data();
  p.weight = w.data();
  p.y = y.data();
  p.num_tokens = tokens;
  p.dim = dim;
  p.y_stride = y_stride;
  DSA_RETURN_IF_ERROR(op(p));

  std::vector<bf16> want_h(n);
  for (size_t i = 0; i < n; ++i) {
    // The exact sum in double, then fp32 (the one fp32 add), then bf16, as in check_residual_add.
    const double exact = double{bf16_to_float(h0[i])} + double{bf16_to_float(add[i])};
    want_h[i] = float_to_bf16(static_cast<float>(exact));
    if (h[i].bits != want_h[i].bits) {
      return internal_error(fmt::format("add_rmsnorm: h[{}][{}] = {}, expected {}", i / dim,
                                        i % dim, bf16_to_float(h[i]), bf16_to_float(want_h[i])));
    }
  }
  return expect_norm_rows(
      "add_rmsnorm", y.data(), poison, tokens, dim, y_stride, w.data(), p.eps,
      [&](int32_t t) { return &want_h[size_t(t) * size_t(dim)]; },
      [](int32_t) { return std::string(); });
}

}  // namespace dsa::kernels
