#include "dsa/kernels/rope/rope_check.h"

#include <fmt/format.h>

#include <cmath>
#include <complex>
#include <vector>

#include "dsa/kernels/common/bf16_round.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
constexpr int32_t kPrefix = 16;  // values before the rope dims in each head (like q_nope)
constexpr int32_t kHeadStride = kPrefix + 2 * kRopePairs + 8;

// HF transformers' form: inv_freq = interpolation * (1 - extrapolation_factor)
//                                   + extrapolation * extrapolation_factor.
std::vector<float> independent_inv_freq(const RopeConfig& c) {
  auto dim_for = [&](double beta) {
    return (64 * std::log(c.original_max_position / (beta * 2 * M_PI))) / (2 * std::log(c.theta));
  };
  double low = std::floor(dim_for(c.beta_fast)), high = std::ceil(dim_for(c.beta_slow));
  low = low < 0 ? 0 : low;
  high = high > 63 ? 63 : high;
  if (low == high) high += 0.001;
  std::vector<float> out;
  for (int32_t k = 0; k < 64; k += 2) {
    double extrapolation = 1.0 / std::pow(c.theta, double(k) / 64);
    double interpolation = 1.0 / (c.factor * std::pow(c.theta, double(k) / 64));
    double ramp = (k / 2 - low) / (high - low);
    ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
    double extrapolation_factor = 1 - ramp;
    out.push_back(static_cast<float>(interpolation * (1 - extrapolation_factor) +
                                     extrapolation * extrapolation_factor));
  }
  return out;
}
}  // namespace

Status check_rope_table(const RopeConfig& c, int32_t num_positions) {
  std::vector<float> cos(size_t(num_positions) * kRopePairs, NAN), sin = cos;
  RopeTableParams p{c, num_positions, cos.data(), sin.data()};
  DSA_RETURN_IF_ERROR(rope_table_ref(p));
  const std::vector<float> inv_freq = independent_inv_freq(c);
  for (int32_t pos = 0; pos < num_positions; ++pos) {
    for (int32_t i = 0; i < kRopePairs; ++i) {
      // fp32(pos) * inv_freq rounded once to fp32 equals the exact product rounded to fp32.
      float angle = static_cast<float>(double(static_cast<float>(pos)) * double(inv_freq[i]));
      float want_cos = static_cast<float>(std::cos(static_cast<long double>(angle)));
      float want_sin = static_cast<float>(std::sin(static_cast<long double>(angle)));
      size_t k = size_t(pos) * kRopePairs + i;
      if (float_bits(cos[k]) != float_bits(want_cos) ||
          float_bits(sin[k]) != float_bits(want_sin)) {
        return internal_error(
            fmt::format("rope_table: [{}][{}]: cos {} sin {}, expected cos {} sin {} (angle {})",
                        pos, i, cos[k], sin[k], want_cos, want_sin, angle));
      }
    }
  }
  return ok_status();
}

Status check_rope(RopeFn op, int32_t tokens, int32_t heads, uint64_t seed) {
  if (tokens < 1 || heads < 1) {
    return invalid_argument(
        fmt::format("check_rope: tokens = {}, heads = {}: both must be >= 1", tokens, heads));
  }
  testing::Rng rng(seed);
  const int32_t num_positions = 8192 + tokens;
  std::vector<float> cos(size_t(num_positions) * kRopePairs), sin(cos.size());
  DSA_RETURN_IF_ERROR(rope_table_ref({RopeConfig{}, num_positions, cos.data(), sin.data()}));
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (auto& v : pos) v = int32_t(rng.randint(0, num_positions - 1));
  const int64_t token_stride = int64_t{heads} * kHeadStride;

  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved}) {
    std::vector<bf16> x = rng.bf16_vector(size_t(tokens) * token_stride, 2.f);
    const std::vector<bf16> x0 = x;
    RopeParams p;
    p.x = x.data() + kPrefix;
    p.positions = pos.data();
    p.cos = cos.data();
    p.sin = sin.data();
    p.num_tokens = tokens;
    p.num_heads = heads;
    p.token_stride = token_stride;
    p.head_stride = kHeadStride;
    p.num_positions = num_positions;
    p.style = style;
    DSA_RETURN_IF_ERROR(op(p));
    const bool interleaved = style == RopeStyle::kInterleaved;
    for (int64_t t = 0; t < tokens; ++t) {
      const float* c = &cos[size_t(pos[t]) * kRopePairs];
      const float* s = &sin[size_t(pos[t]) * kRopePairs];
      for (int32_t h = 0; h < heads; ++h) {
        const size_t base = size_t(t * token_stride + h * kHeadStride);
        for (int32_t j = 0; j < kHeadStride; ++j) {
          const bf16 got = x[base + j];
          const int32_t r = j - kPrefix;
          if (r < 0 || r >= 2 * kRopePairs) {
            if (got.bits != x0[base + j].bits)
              return internal_error(
                  fmt::format("rope: x[{}][{}][{}] outside the rope dims changed", t, h, j));
            continue;
          }
          auto in = [&](int32_t k) { return double{bf16_to_float(x0[base + kPrefix + k])}; };
          double want, mag;
          if (interleaved) {  // (x[2i] + i x[2i+1]) * e^{i angle}
            std::complex<double> z(in(r & ~1), in(r | 1)), w(c[r / 2], s[r / 2]);
            std::complex<double> out = z * w;
            want = (r & 1) ? out.imag() : out.real();
            mag = std::abs(z.real() * w.real()) + std::abs(z.imag() * w.imag()) +
                  std::abs(z.real() * w.imag()) + std::abs(z.imag() * w.real());
          } else {  // x * cat(cos, cos) + rotate_half(x) * cat(sin, sin)
            const int32_t i = r % kRopePairs;
            const double rot = r < kRopePairs ? -in(r + kRopePairs) : in(r - kRopePairs);
            want = in(r)*c[i] + rot * s[i];
            mag = std::abs(in(r)*c[i]) + std::abs(rot * s[i]);
          }
          const bf16 ref = double_to_bf16(want);
          const double err = std::abs(double{bf16_to_float(got)} - double{bf16_to_float(ref)});
          // 1 bf16 ulp (<= 2^-7 relative) plus the fp32 rounding of the two products.
          if (bf16_ulp_distance(got, ref) > 1 && err > 0x1p-7 * std::abs(want) + 0x1p-22 * mag) {
            return internal_error(fmt::format("rope ({}): x[{}][{}][{}] = {}, expected {}",
                                              interleaved ? "interleaved" : "non-interleaved", t, h,
                                              r, bf16_to_float(got), want));
          }
        }
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
