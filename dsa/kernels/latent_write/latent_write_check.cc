#include "dsa/kernels/latent_write/latent_write_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/kernels/latent_write/latent_write.h"
#include "dsa/testing/pools.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
// Independent form of §2.1 for one tile: exponent from frexp (not from the fp32 bits), codes
// by float_to_e4m3 of x / s (a division, not a multiplication by 2^-e).
float expected_tile(const bf16* x, uint8_t* q) {
  float amax = 1e-4f;
  for (int i = 0; i < kLatentTile; ++i) amax = std::max(amax, std::fabs(bf16_to_float(x[i])));
  int exp2;
  float m = std::frexp(amax / 448.0f, &exp2);  // = m * 2^exp2, m in [0.5, 1)
  float scale = std::ldexp(1.0f, m == 0.5f ? exp2 - 1 : exp2);
  for (int i = 0; i < kLatentTile; ++i) q[i] = float_to_e4m3(bf16_to_float(x[i]) / scale).bits;
  return scale;
}

void expected_row(const bf16* kv, LatentFormat format, uint8_t* row) {
  if (format == LatentFormat::kBf16) {
    for (int t = 0; t < kQkDim; ++t) {
      row[2 * t] = static_cast<uint8_t>(kv[t].bits & 0xFF);
      row[2 * t + 1] = static_cast<uint8_t>(kv[t].bits >> 8);
    }
    return;
  }
  for (int tile = 0; tile < 4; ++tile) {
    float s = expected_tile(kv + tile * kLatentTile, row + tile * kLatentTile);
    std::memcpy(row + 512 + 4 * tile, &s, 4);
  }
  for (int t = 0; t < kRopeDim; ++t) {
    row[528 + 2 * t] = static_cast<uint8_t>(kv[kLatentDim + t].bits & 0xFF);
    row[528 + 2 * t + 1] = static_cast<uint8_t>(kv[kLatentDim + t].bits >> 8);
  }
}
}  // namespace

Status check_latent_write(LatentWriteFn op, int32_t tokens, LatentFormat format, uint64_t seed) {
  if (tokens < 0) return invalid_argument(fmt::format("check_latent_write: tokens = {}", tokens));
  testing::Rng rng(seed);
  const int32_t num_pages = 1 + (tokens + kPageSize - 1) / kPageSize + 1;
  testing::LatentPoolBuffer pool(num_pages, format);
  const int32_t row_bytes = latent_bytes_per_token(format);
  std::vector<uint8_t>& bytes = pool.bytes();
  std::fill(bytes.begin() + int64_t{kPageSize} * row_bytes, bytes.end(), uint8_t{0xA5});
  std::vector<uint8_t> expected = bytes;

  // Rows packed (stride 0 or 576) or apart, as in a fused projection's output, with NaN between
  // them: a write that reads past a row's 576 values fails the byte comparison or, checked, the
  // finiteness rule.
  const int64_t strides[] = {0, kQkDim, kQkDim + 8, 2240};
  const int64_t kv_stride = strides[rng.randint(0, 3)];
  const int64_t ld = kv_stride == 0 ? kQkDim : kv_stride;
  std::vector<bf16> kv(size_t(tokens) * size_t(ld), float_to_bf16(NAN));
  for (int32_t t = 0; t < tokens; ++t) {
    // Per-token magnitudes spanning several binades, so tile scales differ.
    std::vector<bf16> row = rng.bf16_vector(kQkDim, rng.uniform(0.01f, 50.f));
    std::copy(row.begin(), row.end(), kv.begin() + t * ld);
  }
  std::vector<int32_t> free_slots = rng.permutation(kPageSize, num_pages * kPageSize);
  std::vector<int32_t> slot(tokens);
  for (int32_t t = 0; t < tokens; ++t) slot[t] = t % 5 == 4 ? -1 : free_slots[t];

  LatentWriteParams p;
  p.kv = kv.data();
  p.kv_stride = kv_stride;
  p.slot = slot.data();
  p.num_tokens = tokens;
  p.pool = pool.pool();
  DSA_RETURN_IF_ERROR(op(p));

  for (int32_t t = 0; t < tokens; ++t) {
    if (slot[t] >= 0) {
      expected_row(kv.data() + t * ld, format, expected.data() + int64_t{slot[t]} * row_bytes);
    }
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != expected[i]) {
      return internal_error(
          fmt::format("check_latent_write: slot {} byte {}: got 0x{:02X}, expected 0x{:02X}",
                      i / row_bytes, i % row_bytes, bytes[i], expected[i]));
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
