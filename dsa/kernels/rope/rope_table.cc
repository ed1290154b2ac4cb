// YaRN frequencies, the softmax scale and the host-built cos/sin tables (SPEC.md §8.3).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "dsa/core/thread_pool.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/rope/rope.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "rope_config";

Status require_real(std::string_view field, double v, bool ok, std::string_view rule) {
  if (std::isfinite(v) && ok) return ok_status();
  return invalid_argument(fmt::format("{}: {} = {}: {}", kOp, field, v, rule));
}

// The pair index whose wavelength makes `rotations` turns over L0 positions (rotary dim 64).
double correction_dim(const RopeConfig& c, double rotations) {
  return 64.0 * std::log(c.original_max_position / (2.0 * std::numbers::pi * rotations)) /
         (2.0 * std::log(c.theta));
}
}  // namespace

Status validate(const RopeConfig& c) {
  DSA_RETURN_IF_ERROR(require_real("theta", c.theta, c.theta > 1.0, "must be finite and > 1"));
  DSA_RETURN_IF_ERROR(require_real("factor", c.factor, c.factor >= 1.0, "must be finite and >= 1"));
  DSA_RETURN_IF_ERROR(
      require_in(kOp, "original_max_position", c.original_max_position, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_real("beta_slow", c.beta_slow, c.beta_slow > 0.0, "must be > 0"));
  DSA_RETURN_IF_ERROR(
      require_real("beta_fast", c.beta_fast, c.beta_fast > c.beta_slow, "must be > beta_slow"));
  DSA_RETURN_IF_ERROR(require_real("mscale_all_dim", c.mscale_all_dim, true, "must be finite"));
  return require_real("mscale", c.mscale, c.mscale == c.mscale_all_dim,
                      "must equal mscale_all_dim (rescaled cos/sin are not supported)");
}

YarnRange yarn_range(const RopeConfig& c) {
  double low = std::max(std::floor(correction_dim(c, c.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(c, c.beta_slow)), 63.0);
  if (low == high) high += 0.001;  // keeps the ramp's division finite
  return {low, high};
}

std::array<float, kRopePairs> rope_inv_freq(const RopeConfig& c) {
  const YarnRange r = yarn_range(c);
  std::array<float, kRopePairs> out{};
  for (int32_t i = 0; i < kRopePairs; ++i) {
    const double theta_i = std::pow(c.theta, -2.0 * i / 64.0);
    const double ramp = std::clamp((i - r.low) / (r.high - r.low), 0.0, 1.0);
    // factor 1 is plain RoPE (GLM-5's rope_type "default"): theta_i itself, not a blend of two
    // equal terms that fp64 may round one ulp away from it.
    out[i] = c.factor == 1.0
                 ? static_cast<float>(theta_i)
                 : static_cast<float>(theta_i * (1.0 - ramp) + theta_i / c.factor * ramp);
  }
  return out;
}

float softmax_scale(const RopeConfig& c, int32_t qk_nope_head_dim, int32_t qk_rope_head_dim) {
  const double m = c.factor > 1.0 ? 0.1 * c.mscale_all_dim * std::log(c.factor) + 1.0 : 1.0;
  return static_cast<float>(m * m / std::sqrt(double(qk_nope_head_dim) + qk_rope_head_dim));
}

Status validate(const RopeTableParams& p) {
  DSA_RETURN_IF_ERROR(validate(p.config));
  DSA_RETURN_IF_ERROR(require_in("rope_table", "num_positions", p.num_positions, 0, INT32_MAX));
  if (p.num_positions == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer("rope_table", "cos", p.cos));
  return require_pointer("rope_table", "sin", p.sin);
}

Status rope_table_ref(const RopeTableParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const std::array<float, kRopePairs> inv_freq = rope_inv_freq(p.config);
  parallel_for(p.num_positions, [&](int64_t pos) {
    for (int32_t i = 0; i < kRopePairs; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq[i];  // fp32, one rounding
      p.cos[pos * kRopePairs + i] = static_cast<float>(std::cos(double{angle}));
      p.sin[pos * kRopePairs + i] = static_cast<float>(std::sin(double{angle}));
    }
  });
  return ok_status();
}

}  // namespace dsa::kernels
