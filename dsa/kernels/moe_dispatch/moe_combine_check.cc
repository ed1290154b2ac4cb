#include "dsa/kernels/moe_dispatch/moe_combine_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dsa/kernels/moe_dispatch/moe_dispatch_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
constexpr int32_t kExperts = 256;

// Independent formulation of row r: every selected expert's whole row weighted into an fp32 row
// accumulator, in selection order, then the shared row, then one rounding per element.
std::vector<bf16> expected_row(const std::vector<bf16>& routed, const std::vector<int32_t>& ids,
                               const std::vector<float>& weights, const bf16* shared, int32_t r,
                               int32_t k, int32_t dim) {
  std::vector<float> acc(size_t(dim), 0.f);
  for (int32_t j = 0; j < k; ++j) {
    const size_t slot = size_t(r) * k + j;
    if (ids[slot] < 0) continue;
    const bf16* row = &routed[slot * dim];
    for (int32_t t = 0; t < dim; ++t) acc[t] = acc[t] + weights[slot] * bf16_to_float(row[t]);
  }
  if (shared) {
    for (int32_t t = 0; t < dim; ++t) acc[t] = acc[t] + bf16_to_float(shared[size_t(r) * dim + t]);
  }
  std::vector<bf16> y(static_cast<size_t>(dim));
  std::transform(acc.begin(), acc.end(), y.begin(), float_to_bf16);
  return y;
}
}  // namespace

Status check_moe_combine(MoeCombineFn op, int32_t tokens, int32_t k, int32_t dim, uint64_t seed) {
  if (tokens < 1 || k < 1 || k > 64 || dim < 1) {
    return invalid_argument(fmt::format(
        "check_moe_combine: tokens = {}, k = {}, dim = {}: need tokens, dim >= 1 and 1 <= k <= 64",
        tokens, k, dim));
  }
  testing::Rng rng(seed);
  const std::vector<int32_t> ids = random_expert_ids(rng, tokens, kExperts, k, 5);
  std::vector<float> weights(ids.size());
  for (float& w : weights) w = rng.uniform(0.f, 2.5f);
  std::vector<bf16> routed = rng.bf16_vector(ids.size() * dim);
  for (size_t slot = 0; slot < ids.size(); ++slot) {
    if (ids[slot] < 0) std::fill_n(routed.begin() + slot * dim, dim, float_to_bf16(NAN));
  }
  // Every third row with two experts: their outputs cancel to the last bit (weight 1, +-2^20), so
  // the fp32 sum keeps the small terms only when it runs in the §8.6 order (any other order, or
  // the shared expert first, rounds them to the 2^-3 grid of 2^20).
  for (int32_t r = 1; r < tokens && k >= 2; r += 3) {
    const size_t first = size_t(r) * k;
    if (ids[first] < 0) continue;  // a padded row
    weights[first] = weights[first + 1] = 1.f;
    for (int32_t t = 0; t < dim; ++t) {
      const float big = rng.randint(0, 1) ? 0x1p20f : -0x1p20f;
      routed[first * dim + t] = float_to_bf16(big);
      routed[(first + 1) * dim + t] = float_to_bf16(-big);
    }
  }
  const std::vector<bf16> shared = rng.bf16_vector(size_t(tokens) * dim);

  for (const bf16* shared_rows : {shared.data(), static_cast<const bf16*>(nullptr)}) {
    std::vector<bf16> y(size_t(tokens) * dim, float_to_bf16(NAN));
    DSA_RETURN_IF_ERROR(
        op({routed.data(), ids.data(), weights.data(), shared_rows, y.data(), tokens, k, dim}));
    for (int32_t r = 0; r < tokens; ++r) {
      const std::vector<bf16> want = expected_row(routed, ids, weights, shared_rows, r, k, dim);
      for (int32_t t = 0; t < dim; ++t) {
        const bf16 got = y[size_t(r) * dim + t];
        if (got.bits != want[size_t(t)].bits) {
          return internal_error(
              fmt::format("moe_combine ({} shared expert): y[{}][{}] = {}, expected {} (seed {})",
                          shared_rows ? "with" : "without", r, t, bf16_to_float(got),
                          bf16_to_float(want[size_t(t)]), seed));
        }
      }
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
