#include "dsa/kernels/indexer_write/indexer_write_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace dsa::kernels {

// Independent formulation: scale from frexp of amax/448, codes by dividing by the scale.
void expected_pow2_row(const bf16* k, uint8_t* values, float* scale) {
  float amax = 1e-4f;
  for (int d = 0; d < kIndexHeadDim; ++d) amax = std::max(amax, std::fabs(bf16_to_float(k[d])));
  int exp2;
  float m = std::frexp(amax / 448.0f, &exp2);
  *scale = std::ldexp(1.0f, m == 0.5f ? exp2 - 1 : exp2);
  for (int d = 0; d < kIndexHeadDim; ++d)
    values[d] = float_to_e4m3(bf16_to_float(k[d]) / *scale).bits;
}

Status check_indexer_write(IndexerWriteFn op, int32_t tokens, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int32_t num_pages = tokens / kPageSize + 3;
  const int64_t page_bytes = indexer_page_bytes(kPageSize, kIndexHeadDim);
  std::vector<uint8_t> pool_bytes(size_t(num_pages * page_bytes), 0x5A);
  std::memset(pool_bytes.data(), 0, size_t(page_bytes));  // page 0 stays zero
  std::vector<uint8_t> expected = pool_bytes;

  std::vector<bf16> k(size_t(tokens) * kIndexHeadDim);
  for (auto& v : k) v = float_to_bf16(normal(gen) * 3.f);
  std::vector<int32_t> all_slots;
  for (int32_t s = kPageSize; s < num_pages * kPageSize; ++s) all_slots.push_back(s);
  std::shuffle(all_slots.begin(), all_slots.end(), gen);
  std::vector<int32_t> slot(static_cast<size_t>(tokens));
  for (int32_t t = 0; t < tokens; ++t) slot[t] = (t % 5 == 2) ? -1 : all_slots[t];

  IndexerWriteParams p;
  p.k = k.data();
  p.slot = slot.data();
  p.num_tokens = tokens;
  p.pool.data = pool_bytes.data();
  p.pool.num_pages = num_pages;
  DSA_RETURN_IF_ERROR(op(p));

  IndexerPool view = p.pool;
  view.data = expected.data();
  for (int32_t t = 0; t < tokens; ++t) {
    if (slot[t] < 0) continue;
    float scale;
    expected_pow2_row(&k[size_t(t) * kIndexHeadDim],
                      expected.data() + indexer_value_offset(view, slot[t]), &scale);
    std::memcpy(expected.data() + indexer_scale_offset(view, slot[t]), &scale, 4);
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] != pool_bytes[i]) {
      return internal_error(
          fmt::format("indexer_write: pool byte {} (page {}) = {:#04x}, expected {:#04x}", i,
                      i / page_bytes, pool_bytes[i], expected[i]));
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
