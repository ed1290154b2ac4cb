#include "dsa/kernels/activation/activation_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dsa/kernels/common/bf16_round.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
// Independent formulation: silu(g) = g sigmoid(g) in long double, the sigmoid taken in the form
// whose exponential cannot overflow (e^g / (1 + e^g) for g < 0), rounded once to bf16.
bf16 expected_swiglu(bf16 gate, bf16 up) {
  const long double g = bf16_to_float(gate), u = bf16_to_float(up);
  const long double sigmoid =
      g < 0 ? std::exp(g) / (1.0L + std::exp(g)) : 1.0L / (1.0L + std::exp(-g));
  return double_to_bf16(static_cast<double>(u * g * sigmoid));
}

Status compare(const std::vector<bf16>& got, const std::vector<bf16>& gate,
               const std::vector<bf16>& up, int32_t width, const char* how) {
  for (size_t i = 0; i < got.size(); ++i) {
    const bf16 want = expected_swiglu(gate[i], up[i]);
    if (bf16_ulp_distance(got[i], want) > 1) {
      return internal_error(fmt::format(
          "swiglu ({}): act[{}][{}] = {} for g = {}, u = {}; expected {} (> 1 bf16 ulp)", how,
          i / width, i % width, bf16_to_float(got[i]), bf16_to_float(gate[i]), bf16_to_float(up[i]),
          bf16_to_float(want)));
    }
  }
  return ok_status();
}
}  // namespace

Status check_swiglu(SwigluFn op, int32_t tokens, int32_t width, uint64_t seed) {
  if (tokens < 1 || width < 1) {
    return invalid_argument(
        fmt::format("check_swiglu: tokens = {}, width = {}: both must be >= 1", tokens, width));
  }
  testing::Rng rng(seed);
  const size_t n = size_t(tokens) * width;
  std::vector<bf16> gate(n), up = rng.bf16_vector(n);
  for (size_t i = 0; i < n; ++i) {
    // |g| <= 60: past g = -88 the reference's fp32 exp(-g) overflows and it returns 0, where
    // silu(g) is still a normal bf16 (its domain, not a rounding question).
    const float g = rng.normal() * std::ldexp(1.f, int(rng.randint(-4, 4)));
    gate[i] = float_to_bf16(i % 97 == 5 ? 0.f : std::clamp(g, -60.f, 60.f));
  }

  std::vector<bf16> out(n, float_to_bf16(NAN));
  DSA_RETURN_IF_ERROR(op({gate.data(), up.data(), out.data(), int64_t(n)}));
  DSA_RETURN_IF_ERROR(compare(out, gate, up, width, "out of place"));

  std::vector<bf16> in_place = gate;
  DSA_RETURN_IF_ERROR(op({in_place.data(), up.data(), in_place.data(), int64_t(n)}));
  return compare(in_place, gate, up, width, "in place");
}

}  // namespace dsa::kernels
