#include "dsa/engine/simulated_acceptance.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "dsa/core/check.h"
#include "dsa/core/splitmix64.h"

namespace dsa::engine {

Status validate_simulated_accept_length(double accept_length, int32_t d) {
  if (d < 1) {
    return invalid_argument(
        fmt::format("simulated accept length {}: needs speculative decoding (d >= 1 draft steps)",
                    accept_length));
  }
  if (!(std::isfinite(accept_length) && accept_length >= 1 && accept_length <= d + 1)) {
    return invalid_argument(fmt::format(
        "simulated accept length {}: must be in [1, d + 1 = {}] (accepted drafts + the bonus "
        "token)",
        accept_length, d + 1));
  }
  return ok_status();
}

int32_t simulated_accepted(double accept_length, int32_t d, uint64_t seed, int64_t first_position) {
  DSA_CHECK(validate_simulated_accept_length(accept_length, d).ok());
  const double m = accept_length - 1;
  const double base = std::floor(m);
  // The golden-ratio multiplier spreads consecutive positions over the whole key space.
  SplitMix64 rng{seed ^ (uint64_t(first_position) * 0x9E3779B97F4A7C15ull)};
  const double u = double(rng.next() >> 11) * 0x1p-53;  // [0, 1)
  const int32_t a = int32_t(base) + (u < m - base ? 1 : 0);
  return std::min(a, d);
}

AcceptResult force_acceptance(std::span<const float> verify_logits, int32_t vocab,
                              std::span<const int32_t> drafts, const SamplingParams& p,
                              int64_t first_position, int32_t accepted) {
  DSA_CHECK(vocab > 0);
  DSA_CHECK(verify_logits.size() == (drafts.size() + 1) * static_cast<size_t>(vocab));
  DSA_CHECK(accepted >= 0 && size_t(accepted) <= drafts.size());
  DSA_CHECK(first_position >= 0 &&
            first_position + int64_t(drafts.size()) <= std::numeric_limits<int32_t>::max());
  AcceptResult r;
  r.accepted = accepted;
  r.emitted.assign(drafts.begin(), drafts.begin() + accepted);
  const auto row = verify_logits.subspan(size_t(accepted) * size_t(vocab), size_t(vocab));
  r.emitted.push_back(kernels::sample_token(row, p, first_position + accepted));
  return r;
}

}  // namespace dsa::engine
