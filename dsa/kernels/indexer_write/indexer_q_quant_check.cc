#include "dsa/kernels/indexer_write/indexer_q_quant_check.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "dsa/kernels/indexer_write/indexer_write_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

Status check_indexer_q_quant(IndexerQQuantFn op, int32_t tokens, int32_t heads, uint64_t seed) {
  if (tokens < 1 || heads < 1) {
    return invalid_argument(fmt::format(
        "check_indexer_q_quant: tokens = {}, heads = {}: both must be >= 1", tokens, heads));
  }
  testing::Rng rng(seed);
  const int64_t blocks = int64_t{tokens} * heads;
  std::vector<bf16> q(size_t(blocks) * kIndexHeadDim);
  for (int64_t b = 0; b < blocks; ++b) {
    const float scale = b == blocks / 2 ? 0.f : std::ldexp(1.f, int(rng.randint(-12, 12)));
    for (int32_t t = 0; t < kIndexHeadDim; ++t)
      q[size_t(b) * kIndexHeadDim + t] = float_to_bf16(rng.normal() * scale);
  }
  const std::vector<float> w0 = rng.normal_vector(size_t(blocks));
  const float fold = static_cast<float>(1.0 / std::sqrt(double(heads) * kIndexHeadDim));

  std::vector<uint8_t> q8(q.size(), 0xEE);
  std::vector<float> w = w0;
  DSA_RETURN_IF_ERROR(op({q.data(), q8.data(), w.data(), blocks, fold}));

  std::vector<uint8_t> codes(kIndexHeadDim);
  for (int64_t b = 0; b < blocks; ++b) {
    float scale;
    expected_pow2_row(&q[size_t(b) * kIndexHeadDim], codes.data(), &scale);
    for (int32_t t = 0; t < kIndexHeadDim; ++t) {
      const uint8_t got = q8[size_t(b) * kIndexHeadDim + t];
      if (got != codes[size_t(t)]) {
        return internal_error(fmt::format(
            "indexer_q_quant: block {} (token {}, head {}) code {} = {:#04x}, expected {:#04x}", b,
            b / heads, b % heads, t, got, codes[size_t(t)]));
      }
    }
    const float want_w = std::ldexp(w0[size_t(b)] * fold, std::ilogb(scale));
    if (w[size_t(b)] != want_w) {
      return internal_error(
          fmt::format("indexer_q_quant: block {} weight = {}, expected {} (w {} fold {} scale {})",
                      b, w[size_t(b)], want_w, w0[size_t(b)], fold, scale));
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
