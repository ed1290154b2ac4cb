// Rejections of top-k (SPEC.md §3e validation; bug class 2 of §9): each checks the code, that the
// message names the field and value, and that nothing was written. Then the unchecked-mode
// neutralisations, and the plan header contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/topk/topk.h"
#include "dsa/kernels/topk/topk_check.h"
#include "dsa/kernels/topk/topk_test_case.h"

namespace dsa::kernels {
namespace {

using testing::Rng;
using namespace topk_test;

// Three rows of a paged call over pages 1..4 (page-table rows 1 and 2), all valid.
class TopkRejects : public ::testing::Test {
 protected:
  TopkRejects() : c(3, 256, 64) {
    Rng rng(testing::test_seed());
    for (auto& v : c.logits) v = rng.normal();
    c.len = {100, 0, 128};
    c.variant = TopkVariant::kPaged;
    table = {0, 0, 1, 2, 3, 4};  // [3 rows, W = 2]
    c.page_table = PageTable{table.data(), 3, 2, 5};
    c.row_page = {1, 2, 2};
  }
  void expect(StatusCode code, const TopkParams& p, const std::string& needle) {
    Status s = topk_ref(p);
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
    EXPECT_EQ(std::count(c.idx.begin(), c.idx.end(), kPoisonI32), int64_t(c.idx.size()))
        << "a rejected call must not write";
  }
  ScopedCheckedMode checked_{true};  // the OutOfRange rules below are checked-mode rules
  TopkCase c;
  std::vector<int32_t> table;
};

TEST_F(TopkRejects, ValidCallPasses) { EXPECT_TRUE(topk_ref(c.params()).ok()); }

TEST_F(TopkRejects, KBelowRange) {
  auto p = c.params();
  p.k = 0;
  expect(StatusCode::kInvalidArgument, p, "k = 0");
}
TEST_F(TopkRejects, KAboveRange) {
  auto p = c.params();
  p.k = 4096;
  expect(StatusCode::kInvalidArgument, p, "k = 4096");
}
TEST_F(TopkRejects, KNotMultipleOf64) {
  auto p = c.params();
  p.k = 100;
  expect(StatusCode::kInvalidArgument, p, "k = 100: must be in [64, 2048] and a multiple of 64");
}
TEST_F(TopkRejects, LdNotMultipleOf4) {
  auto p = c.params();
  p.logits_ld = 254;
  expect(StatusCode::kInvalidArgument, p, "logits_ld = 254");
}
TEST_F(TopkRejects, MisalignedLogits) {
  TopkParams p = c.params();
  p.logits += 1;
  expect(StatusCode::kInvalidArgument, p, "logits address mod 16 = 4");
}
TEST_F(TopkRejects, MaxChunkOutOfRange) {
  TopkParams p = c.params();
  p.max_chunk = 256;
  expect(StatusCode::kInvalidArgument, p, "max_chunk = 256");
  p.max_chunk = kTopkMaxChunk + 128;
  expect(StatusCode::kInvalidArgument, p, "max_chunk");
  p.max_chunk = 1000;
  expect(StatusCode::kInvalidArgument, p,
         "max_chunk = 1000: must be in [512, 45056] and a multiple of 128");
}
TEST_F(TopkRejects, ClusterSizeNotAPowerOfTwoUpTo8) {
  TopkParams p = c.params();
  for (int32_t bad : {-1, 3, 16}) {
    p.cluster_size = bad;
    expect(StatusCode::kInvalidArgument, p, "cluster_size = " + std::to_string(bad));
  }
}
TEST_F(TopkRejects, NegativeClusterMaxRows) {
  TopkParams p = c.params();
  p.cluster_max_rows = -1;
  expect(StatusCode::kInvalidArgument, p, "cluster_max_rows = -1");
}

TEST_F(TopkRejects, NegativeRows) {
  auto p = c.params();
  p.rows = -1;
  expect(StatusCode::kInvalidArgument, p, "rows = -1");
}
TEST_F(TopkRejects, RowsAboveCapacity) {
  auto p = c.params();
  p.out_rows = 2;
  expect(StatusCode::kInvalidArgument, p, "rows = 3: exceeds out_rows = 2");
}
TEST_F(TopkRejects, NullLogits) {
  auto p = c.params();
  p.logits = nullptr;
  expect(StatusCode::kInvalidArgument, p, "logits is null");
}
TEST_F(TopkRejects, NullLen) {
  auto p = c.params();
  p.len = nullptr;
  expect(StatusCode::kInvalidArgument, p, "len is null");
}
TEST_F(TopkRejects, NullIdx) {
  auto p = c.params();
  p.idx = nullptr;
  expect(StatusCode::kInvalidArgument, p, "idx is null");
}
TEST_F(TopkRejects, PagedWithoutPageTable) {
  auto p = c.params();
  p.page_table.data = nullptr;
  expect(StatusCode::kInvalidArgument, p, "page_table.data is null");
}
TEST_F(TopkRejects, PagedWithoutRowPage) {
  auto p = c.params();
  p.row_page = nullptr;
  expect(StatusCode::kInvalidArgument, p, "row_page is null");
}
TEST_F(TopkRejects, PagedWrongPageSize) {
  auto p = c.params();
  p.page_size = 32;
  expect(StatusCode::kInvalidArgument, p, "page_size = 32");
}
TEST_F(TopkRejects, PagedEmptyPageTable) {
  auto p = c.params();
  p.page_table.width = 0;
  expect(StatusCode::kInvalidArgument, p, "page_table.width = 0");
}
TEST_F(TopkRejects, RaggedWithoutOffset) {
  auto p = c.params();
  p.variant = TopkVariant::kRagged;
  expect(StatusCode::kInvalidArgument, p, "offset is null");
}
TEST_F(TopkRejects, UnknownVariant) {
  auto p = c.params();
  p.variant = static_cast<TopkVariant>(7);
  expect(StatusCode::kInvalidArgument, p, "variant = 7");
}

// Checked-mode data rules (OutOfRange).
TEST_F(TopkRejects, NegativeLength) {
  c.len[1] = -4;
  expect(StatusCode::kOutOfRange, c.params(), "len[1] = -4: must be >= 0");
}
TEST_F(TopkRejects, NegativeColBase) {
  c.col_base = {0, -3, 0};
  expect(StatusCode::kOutOfRange, c.params(), "col_base[1] = -3");
}
TEST_F(TopkRejects, WindowPastLd) {
  c.col_base = {0, 0, 200};
  expect(StatusCode::kOutOfRange, c.params(), "len[2] = 128: col_base + len = 328");
}
TEST_F(TopkRejects, OutRowOutOfRange) {
  c.out_row = {0, 3, 1};
  expect(StatusCode::kOutOfRange, c.params(), "out_row[1] = 3");
}
TEST_F(TopkRejects, OutRowNegativeOtherThanMinusOne) {
  c.out_row = {-2, 1, 2};
  expect(StatusCode::kOutOfRange, c.params(), "out_row[0] = -2");
}
TEST_F(TopkRejects, OutRowRepeated) {
  c.out_row = {2, -1, 2};
  expect(StatusCode::kOutOfRange, c.params(), "out_row[2] = 2: repeats out_row[0]");
}
TEST_F(TopkRejects, PageIdInReservedPage) {
  table[3] = 0;  // row 1, page 1: read by row 0 (len 100 covers pages 0 and 1)
  expect(StatusCode::kOutOfRange, c.params(), "page_table[1][1] = 0");
}
TEST_F(TopkRejects, PageIdBeyondPool) {
  table[4] = 5;
  expect(StatusCode::kOutOfRange, c.params(), "page_table[2][0] = 5");
}
TEST_F(TopkRejects, RowPageOutOfRange) {
  c.row_page[2] = 3;
  expect(StatusCode::kOutOfRange, c.params(), "row_page[2] = 3");
}
TEST_F(TopkRejects, LengthNeedsMorePagesThanWidth) {
  c.len[0] = 200;
  expect(StatusCode::kOutOfRange, c.params(), "len[0] = 200: needs 4 pages");
}
TEST_F(TopkRejects, RaggedNegativeOffset) {
  c.variant = TopkVariant::kRagged;
  c.offset = {0, 0, -7};
  expect(StatusCode::kOutOfRange, c.params(), "offset[2] = -7");
}
TEST_F(TopkRejects, RaggedOffsetOverflows) {
  c.variant = TopkVariant::kRagged;
  c.offset = {INT32_MAX - 50, 0, 0};
  expect(StatusCode::kOutOfRange, c.params(), "offset[0] = 2147483597");
}
TEST_F(TopkRejects, PlanForOtherLengths) {
  TopkPlanHeader plan = build_topk_plan_header(c.len.data(), 3, 64);
  c.len[0] = 99;
  auto p = c.params();
  p.plan = &plan;
  expect(StatusCode::kFailedPrecondition, p, "plan header len_hash");
}

// Unchecked mode neutralises instead: the ops never read a length as unsigned nor a page out of
// the pool.
TEST_F(TopkRejects, UncheckedNegativeLengthGivesEmptyRow) {
  ScopedCheckedMode unchecked(false);
  c.len[0] = -4;
  ASSERT_TRUE(topk_ref(c.params()).ok());
  for (int32_t i = 0; i < 64; ++i) EXPECT_EQ(c.idx_row(0)[i], -1) << i;
}
TEST_F(TopkRejects, UncheckedLengthClampedToLd) {
  ScopedCheckedMode unchecked(false);
  c.variant = TopkVariant::kPlain;
  c.col_base = {-5, 0, 250};  // col_base < 0 reads from column 0
  c.len = {300, INT32_MAX, 128};
  ASSERT_TRUE(topk_ref(c.params()).ok());
  for (int32_t r = 0; r < 3; ++r) {
    int32_t base = std::max(c.col_base[r], 0);
    Status s =
        compare_topk_row(c.idx_row(r), topk_positions_by_full_sort(c.row(r) + base, 256 - base, 64),
                         64, r, 256 - base <= 64);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
}
TEST_F(TopkRejects, UncheckedBadOutRowIsNotWritten) {
  ScopedCheckedMode unchecked(false);
  c.out_row = {7, 0, -3};
  ASSERT_TRUE(topk_ref(c.params()).ok());
  for (int32_t i = 0; i < 64; ++i) EXPECT_EQ(c.idx_row(0)[i], -1) << "row 1 (len 0) -> idx row 0";
  for (int32_t o : {1, 2}) {
    for (int32_t i = 0; i < 64; ++i) EXPECT_EQ(c.idx_row(o)[i], kPoisonI32) << o;
  }
}
// Unchecked repeated out_row: deterministic, the last row targeting an idx row wins.
TEST_F(TopkRejects, UncheckedRepeatedOutRowLastWins) {
  ScopedCheckedMode unchecked(false);
  c.variant = TopkVariant::kPlain;
  c.out_row = {1, 1, -1};  // row 0 (len 100) and row 1 (len 0) both target idx row 1
  ASSERT_TRUE(topk_ref(c.params()).ok());
  for (int32_t i = 0; i < 64; ++i) EXPECT_EQ(c.idx_row(1)[i], -1) << i;
  for (int32_t o : {0, 2}) {
    for (int32_t i = 0; i < 64; ++i) EXPECT_EQ(c.idx_row(o)[i], kPoisonI32) << o;
  }
}

TEST_F(TopkRejects, UncheckedBadPagesBecomePageZero) {
  ScopedCheckedMode unchecked(false);
  table[2] = -9;          // table row 1 = {-9, 2}: page id outside the pool -> page 0
  c.row_page[2] = 40;     // output row 2 reads the reserved row 0 (all page 0)
  c.len = {70, 200, 70};  // row 1 (table row 2 = {3, 4}): pages 2, 3 lie past W -> page 0
  ASSERT_TRUE(topk_ref(c.params()).ok());
  auto page_of = [](int32_t o, int32_t page_index) {
    if (o == 0) return page_index == 0 ? 0 : 2;
    if (o == 1) return page_index == 0 ? 3 : page_index == 1 ? 4 : 0;
    return 0;
  };
  for (int32_t o = 0; o < 3; ++o) {
    std::vector<int32_t> want = topk_positions_by_full_sort(c.row(o), c.len[o], 64);
    for (auto& p : want) p = page_of(o, p / 64) * 64 + p % 64;
    Status s = compare_topk_row(c.idx_row(o), want, 64, o, false);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
}

// The plan header (§3e): a pure function of (len, K, R); magic, R and K always checked, the hash
// in checked mode only.
TEST(TopkPlan, HeaderFieldsAndHashByHand) {
  const int32_t len[] = {3, -4};
  TopkPlanHeader h = build_topk_plan_header(len, 2, 128);
  EXPECT_EQ(h.magic, 0x4B504F54u);
  EXPECT_EQ(h.rows, 2);
  EXPECT_EQ(h.k, 128);
  EXPECT_EQ(h.len_hash, 0xFFFFFFF7u);  // 3*1 + uint32(-4)*3 = 3 - 12 mod 2^32
  EXPECT_TRUE(validate_topk_plan_header(h, len, 2, 128).ok());
}
TEST(TopkPlan, MismatchesAreFailedPrecondition) {
  ScopedCheckedMode checked(true);
  const int32_t len[] = {10, 20, 30};
  const TopkPlanHeader good = build_topk_plan_header(len, 3, 64);
  auto expect = [&](TopkPlanHeader h, int32_t rows, int32_t k, const char* needle) {
    Status s = validate_topk_plan_header(h, len, rows, k);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  };
  TopkPlanHeader h = good;
  h.magic = 0x31415344;
  expect(h, 3, 64, "magic = 0x31415344");
  expect(good, 2, 64, "rows = 3: expected 2");
  expect(good, 3, 128, "k = 64: expected 128");
  h = good;
  h.len_hash ^= 1;
  expect(h, 3, 64, "len_hash");
  set_checked_mode(false);
  EXPECT_TRUE(validate_topk_plan_header(h, len, 3, 64).ok()) << "hash is a checked-mode rule";
  expect(good, 3, 128, "k = 64");  // K always
}

}  // namespace
}  // namespace dsa::kernels
