// The glue references on hand-computed cases (SPEC.md §8.5, §8.6).
#include "dsa/kernels/model_glue/model_glue.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/core/fp8_quant.h"

namespace dsa::kernels {
namespace {

TEST(ModelGlue, IndexerQuantFoldsTheScale) {
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

TEST(ModelGlue, RowCopyGatherScatterAndBounds) {
  std::vector<int32_t> src = {10, 11, 20, 21, 30, 31};
  std::vector<int32_t> dst(6, -7);
  std::vector<int32_t> idx = {2, -1, 0};
  RowCopyParams p{src.data(), dst.data(), idx.data(), 8, 8, 8, 3, 3, RowCopyMode::kGather};
  ASSERT_TRUE(row_copy_ref(p).ok());
  EXPECT_EQ(dst, (std::vector<int32_t>{30, 31, -7, -7, 10, 11}));
  std::fill(dst.begin(), dst.end(), -7);
  p.mode = RowCopyMode::kScatter;
  ASSERT_TRUE(row_copy_ref(p).ok());
  EXPECT_EQ(dst, (std::vector<int32_t>{30, 31, -7, -7, 10, 11}));  // row 0 -> 2, row 2 -> 0
  idx[1] = 5;
  ScopedCheckedMode on(true);
  EXPECT_EQ(row_copy_ref(p).code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace dsa::kernels
