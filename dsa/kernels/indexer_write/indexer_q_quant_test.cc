// The indexer query quantisation's reference on a hand-made case (SPEC.md §8.5) and against the
// independent formulation of its check.
#include "dsa/kernels/indexer_write/indexer_q_quant.h"

#include <gtest/gtest.h>

#include <vector>

#include "dsa/core/fp8_quant.h"
#include "dsa/kernels/indexer_write/indexer_q_quant_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

TEST(IndexerQQuant, FoldsTheScale) {
  std::vector<bf16> q(2 * 128);
  for (int i = 0; i < 256; ++i) q[i] = float_to_bf16(float((i % 17) - 8) * (i < 128 ? 1.f : 64.f));
  std::vector<uint8_t> q8(256);
  std::vector<float> w = {2.f, -3.f};
  ASSERT_TRUE(indexer_q_quant_ref({q.data(), q8.data(), w.data(), 2, 0.5f}).ok());
  for (int b = 0; b < 2; ++b) {
    float x[128];
    uint8_t want[128];
    for (int t = 0; t < 128; ++t) x[t] = bf16_to_float(q[b * 128 + t]);
    const float s = quantize_block_pow2(x, 128, want);
    for (int t = 0; t < 128; ++t) ASSERT_EQ(q8[b * 128 + t], want[t]);
    EXPECT_EQ(w[b], (b == 0 ? 2.f : -3.f) * 0.5f * s);
  }
}

TEST(IndexerQQuant, MatchesIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, heads] : {std::pair{37, 16}, {1, 64}, {256, 64}}) {
    const Status s = check_indexer_q_quant(indexer_q_quant_ref, tokens, heads, seed + tokens);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " H_i=" << heads << ": " << s.to_string();
  }
}

}  // namespace
}  // namespace dsa::kernels
