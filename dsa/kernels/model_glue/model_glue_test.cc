// The glue references on hand-computed cases (SPEC.md §8.5, §8.6).
#include "dsa/kernels/model_glue/model_glue.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsa/core/checked_mode.h"

namespace dsa::kernels {
namespace {

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
