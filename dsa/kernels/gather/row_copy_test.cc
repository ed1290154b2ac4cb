// Row copy's reference on a hand-made case and against the independent formulation of its check.
#include "dsa/kernels/gather/row_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/gather/row_copy_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

TEST(RowCopy, GatherScatterAndBounds) {
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

TEST(RowCopy, ZeroSkippedWritesZerosWhereAGatherSkips) {
  std::vector<int32_t> src = {10, 11, 20, 21, 30, 31};
  std::vector<int32_t> dst(8, -7);
  std::vector<int32_t> idx = {2, -1, 0, 9};  // 9: past index_bound, skipped when unchecked
  RowCopyParams p{src.data(), dst.data(), idx.data(), 8, 8, 8, 4, 3, RowCopyMode::kGather};
  p.zero_skipped = true;
  ScopedCheckedMode off(false);
  ASSERT_TRUE(row_copy_ref(p).ok());
  EXPECT_EQ(dst, (std::vector<int32_t>{30, 31, 0, 0, 10, 11, 0, 0}));
  {
    // Checked: the bad index refuses the whole call before any row is written.
    ScopedCheckedMode on(true);
    std::fill(dst.begin(), dst.end(), -7);
    EXPECT_EQ(row_copy_ref(p).code(), StatusCode::kOutOfRange);
    EXPECT_EQ(dst, std::vector<int32_t>(8, -7));
  }
  p.mode = RowCopyMode::kScatter;
  const Status s = row_copy_ref(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("zero_skipped"), std::string::npos) << s.to_string();
}

TEST(RowCopy, MatchesIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t rows, indexed_rows;
    int64_t row_bytes;
  } shapes[] = {{20, 50, 6}, {20, 50, 64}, {1, 1, 2048}, {64, 256, 14336}};
  int n = 0;
  for (const Shape& s : shapes) {
    const Status st = check_row_copy(row_copy_ref, s.rows, s.indexed_rows, s.row_bytes, seed + n++);
    EXPECT_TRUE(st.ok()) << "rows " << s.rows << " of " << s.indexed_rows << ", " << s.row_bytes
                         << " B: " << st.to_string();
  }
}

}  // namespace
}  // namespace dsa::kernels
