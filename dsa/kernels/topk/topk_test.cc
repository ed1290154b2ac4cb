// Selection and variant tests of top-k (SPEC.md §3e; bug classes 9 and 13 of §9). Results are
// compared as sets against hand-computed rows or against topk_positions_by_full_sort, a full
// std::sort over (value, position) keys that shares no code with the reference.
#include "dsa/kernels/topk/topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "dsa/kernels/topk/topk_check.h"
#include "dsa/kernels/topk/topk_test_case.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels {
namespace {

using testing::Rng;
using namespace topk_test;

std::vector<int32_t> range_except(int32_t n, std::vector<int32_t> excluded) {
  std::vector<int32_t> v;
  for (int32_t p = 0; p < n; ++p) {
    if (std::find(excluded.begin(), excluded.end(), p) == excluded.end()) v.push_back(p);
  }
  return v;
}

// Output row o must hold the images of the full-sort selection of src[0, len).
void expect_row(
    const TopkCase& c, int32_t o, const float* src, int32_t len,
    const std::function<int32_t(int32_t)>& image = [](int32_t p) { return p; }) {
  std::vector<int32_t> want = topk_positions_by_full_sort(src, len, c.k);
  for (auto& p : want) p = image(p);
  Status s = compare_topk_row(c.idx_row(o), want, c.k, o, len <= c.k);
  EXPECT_TRUE(s.ok()) << s.to_string() << " (len " << len << ", K " << c.k << ")";
}

void expect_set(const TopkCase& c, int32_t o, std::vector<int32_t> want) {
  Status s = compare_topk_row(c.idx_row(o), std::move(want), c.k, o, false);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(Topk, HandComputedTinyRows) {
  TopkCase c(8, 68, 64);
  auto fill = [&](int32_t r, int32_t len, float v) {
    c.len[r] = len;
    std::fill_n(c.row(r), len, v);
  };
  fill(0, 67, 0.5f);  // the three worst: -2, -inf, NaN
  c.row(0)[5] = -kInf;
  c.row(0)[9] = kNaN;
  c.row(0)[20] = -2.f;
  fill(1, 65, 7.f);  // all ties: the lowest 64 positions
  fill(2, 65, 1.f);  // -0 at 0 ties +0 at 64: the lower position wins
  c.row(2)[0] = -0.0f;
  c.row(2)[64] = 0.0f;
  fill(3, 65, 1.f);  // and the mirror image, so neither zero ranks above the other
  c.row(3)[0] = 0.0f;
  c.row(3)[64] = -0.0f;
  fill(4, 65, 1.f);  // NaN ranks below -inf
  c.row(4)[0] = kNaN;
  c.row(4)[64] = -kInf;
  fill(5, 65, 1.f);  // NaNs tie with each other: the lower position wins
  c.row(5)[3] = kNaN;
  c.row(5)[60] = kNaN;
  fill(6, 3, -5.f);  // len <= K: positions in ascending order, then -1
  c.len[7] = 0;      // empty row: all -1
  ASSERT_TRUE(topk_ref(c.params()).ok());
  expect_set(c, 0, range_except(67, {5, 9, 20}));
  expect_set(c, 1, range_except(64, {}));
  expect_set(c, 2, range_except(64, {}));
  expect_set(c, 3, range_except(64, {}));
  expect_set(c, 4, range_except(65, {0}));
  expect_set(c, 5, range_except(65, {60}));
  EXPECT_EQ(std::vector<int32_t>(c.idx_row(6), c.idx_row(6) + 4),
            (std::vector<int32_t>{0, 1, 2, -1}));
  for (int32_t i = 3; i < 64; ++i) EXPECT_EQ(c.idx_row(6)[i], -1) << i;
  for (int32_t i = 0; i < 64; ++i) EXPECT_EQ(c.idx_row(7)[i], -1) << i;
}

// Hand-computed paged row: v[p] = p over 70 positions selects 6..69; page-table row 2 is {7, 3},
// so positions 6..63 become slots 7*64 + p and 64..69 become 3*64 + (p - 64).
TEST(Topk, HandComputedPagedRow) {
  TopkCase c(1, 72, 64);
  c.len[0] = 70;
  for (int32_t p = 0; p < 70; ++p) c.row(0)[p] = float(p);
  std::vector<int32_t> table = {0, 0, 5, 6, 7, 3};  // [3 rows, W = 2]
  c.variant = TopkVariant::kPaged;
  c.page_table = PageTable{table.data(), 3, 2, 8};
  c.row_page = {2};
  ASSERT_TRUE(topk_ref(c.params()).ok());
  std::vector<int32_t> want;
  for (int32_t s = 454; s < 512; ++s) want.push_back(s);
  for (int32_t s = 192; s < 198; ++s) want.push_back(s);
  expect_set(c, 0, want);
}

TEST(Topk, RandomRowsMatchFullSort) {
  Rng rng(testing::test_seed());
  for (int32_t k : {64, 192, 2048}) {
    const std::vector<int64_t> lens = {
        0, 1, k - 1, k, k + 1, rng.randint(0, k), rng.randint(k, 6000), 20000};
    TopkCase c(int32_t(lens.size()), 20000, k);
    for (int32_t r = 0; r < c.rows(); ++r) {
      c.len[r] = int32_t(lens[r]);
      bool distinct = r % 2 == 0;  // half the rows continuous values, half with every hazard
      for (int32_t p = 0; p < c.len[r]; ++p)
        c.row(r)[p] = distinct ? rng.normal() : hazard_value(rng);
    }
    ASSERT_TRUE(topk_ref(c.params()).ok());
    for (int32_t r = 0; r < c.rows(); ++r) expect_row(c, r, c.row(r), c.len[r]);
    EXPECT_EQ(std::count(c.idx.begin(), c.idx.end(), kPoisonI32), 0) << "a slot was not written";
  }
}

// More ties than any buffer could hold: the K lowest positions, whatever the tied value.
TEST(Topk, AllEqualRowsSelectLowestPositions) {
  TopkCase c(4, 5000, 2048);
  const float values[] = {3.f, kNaN, -kInf, kInf};
  for (int32_t r = 0; r < 4; ++r) {
    c.len[r] = 5000;
    std::fill_n(c.row(r), 5000, values[r]);
  }
  ASSERT_TRUE(topk_ref(c.params()).ok());
  for (int32_t r = 0; r < 4; ++r) expect_set(c, r, range_except(2048, {}));
}

// 4000 of 5000 entries -inf still gives exactly K valid positions: every finite one, then the
// lowest -inf positions.
TEST(Topk, MostlyMinusInfStillGivesKValid) {
  Rng rng(testing::test_seed());
  TopkCase c(1, 5000, 2048);
  c.len[0] = 5000;
  std::vector<int32_t> perm = rng.permutation(0, 5000);
  std::vector<int32_t> neg(perm.begin(), perm.begin() + 4000),
      want(perm.begin() + 4000, perm.end());
  for (int32_t p = 0; p < 5000; ++p) c.row(0)[p] = rng.normal();
  for (int32_t p : neg) c.row(0)[p] = -kInf;
  std::sort(neg.begin(), neg.end());
  want.insert(want.end(), neg.begin(), neg.begin() + (2048 - 1000));
  ASSERT_TRUE(topk_ref(c.params()).ok());
  EXPECT_EQ(std::count(c.idx_row(0), c.idx_row(0) + 2048, -1), 0);
  expect_set(c, 0, want);
}

// NaN ranks below -inf: with 150 NaN then 150 -inf, K = 64 takes -inf positions 150..213; with
// 50 finite values among NaNs, the finite ones and then the 14 lowest NaN positions.
TEST(Topk, NanRanksBelowMinusInf) {
  TopkCase c(2, 300, 64);
  c.len = {300, 300};
  for (int32_t p = 0; p < 300; ++p) c.row(0)[p] = p < 150 ? kNaN : -kInf;
  for (int32_t p = 0; p < 300; ++p) c.row(1)[p] = p % 6 == 5 ? -1e30f : kNaN;
  ASSERT_TRUE(topk_ref(c.params()).ok());
  std::vector<int32_t> want0(64), want1;
  std::iota(want0.begin(), want0.end(), 150);
  for (int32_t p = 5; p < 300; p += 6) want1.push_back(p);
  for (int32_t p = 0; want1.size() < 64; ++p) {
    if (p % 6 != 5) want1.push_back(p);
  }
  expect_set(c, 0, want0);
  expect_set(c, 1, want1);
}

TEST(Topk, ColBaseShiftsTheWindow) {
  Rng rng(testing::test_seed());
  TopkCase c(4, 4096, 128);
  c.col_base = {0, 100, 2000, 4096 - 300};
  c.len = {150, 1000, 2096, 300};
  for (auto& v : c.logits) v = hazard_value(rng);  // values outside the windows too
  ASSERT_TRUE(topk_ref(c.params()).ok());
  for (int32_t r = 0; r < 4; ++r) expect_row(c, r, c.row(r) + c.col_base[r], c.len[r]);
}

// Paged variant over a scattered page table, with out_row routing rows to other idx rows; the
// page-table row of a result is row_page of its OUTPUT row.
TEST(Topk, PagedVariantGivesGlobalSlots) {
  Rng rng(testing::test_seed());
  const int32_t num_pages = 64, width = 12;
  testing::PageTableBuffer table(6, width, num_pages);
  std::vector<int32_t> free_pages = rng.permutation(1, num_pages);
  for (int32_t row = 1; row < 6; ++row) table.assign(row, width * kPageSize, free_pages);
  TopkCase c(5, 768, 128);
  c.variant = TopkVariant::kPaged;
  c.page_table = table.table();
  c.len = {0, 100, 128, 768, 333};
  c.out_row = {2, 0, 4, 1, -1};
  c.row_page = {3, 1, 5, 2, 4};
  for (int32_t r = 0; r < 5; ++r) {
    for (int32_t p = 0; p < c.len[r]; ++p) c.row(r)[p] = hazard_value(rng);
  }
  ASSERT_TRUE(topk_ref(c.params()).ok());
  for (int32_t r = 0; r < 4; ++r) {
    int32_t o = c.out_row[r], pt_row = c.row_page[o];
    expect_row(c, o, c.row(r), c.len[r],
               [&](int32_t p) { return table.at(pt_row, p / 64) * 64 + p % 64; });
  }
  for (int32_t i = 0; i < c.k; ++i) EXPECT_EQ(c.idx_row(3)[i], kPoisonI32) << "row 3 was written";
}

TEST(Topk, RaggedVariantAddsOffset) {
  Rng rng(testing::test_seed());
  TopkCase c(3, 2000, 256);
  c.variant = TopkVariant::kRagged;
  c.len = {50, 300, 2000};
  c.offset = {0, 1000, 123456};
  for (int32_t r = 0; r < 3; ++r) {
    for (int32_t p = 0; p < c.len[r]; ++p) c.row(r)[p] = hazard_value(rng);
  }
  ASSERT_TRUE(topk_ref(c.params()).ok());
  for (int32_t r = 0; r < 3; ++r) {
    expect_row(c, r, c.row(r), c.len[r], [&](int32_t p) { return p + c.offset[r]; });
  }
}

// out_row sends row r to idx row out_row[r]; -1 rows and untargeted idx rows keep their poison.
TEST(Topk, OutRowMapsRowsAndLeavesOthersUntouched) {
  Rng rng(testing::test_seed());
  TopkCase c(4, 400, 64, 6);
  c.len = {400, 10, 200, 0};
  c.out_row = {5, -1, 0, 3};
  for (auto& v : c.logits) v = rng.normal();
  ASSERT_TRUE(topk_ref(c.params()).ok());
  expect_row(c, 5, c.row(0), 400);
  expect_row(c, 0, c.row(2), 200);
  expect_row(c, 3, c.row(3), 0);
  for (int32_t o : {1, 2, 4}) {
    for (int32_t i = 0; i < c.k; ++i) EXPECT_EQ(c.idx_row(o)[i], kPoisonI32) << o << "," << i;
  }
}

// Width 160K with lengths 0..200 (bug class 13): each row's selection follows its own length,
// never the allocated width; past every length sits +inf, which would win if read. One full-width
// row rides in the first batch.
TEST(Topk, WideBufferShortLengthsFollowEachRow) {
  Rng rng(testing::test_seed());
  const int32_t ld = 163840, batch = 25;
  TopkCase c(batch + 1, ld, 64);
  c.len[batch] = ld;
  for (int32_t p = 0; p < ld; ++p) c.row(batch)[p] = hazard_value(rng);
  for (int32_t first = 0; first <= 200; first += batch) {
    std::fill(c.idx.begin(), c.idx.end(), kPoisonI32);
    for (int32_t r = 0; r < batch; ++r) {
      c.len[r] = std::min(first + r, 200);
      std::fill_n(c.row(r), 200, kInf);
      for (int32_t p = 0; p < c.len[r]; ++p) c.row(r)[p] = hazard_value(rng);
    }
    ASSERT_TRUE(topk_ref(c.params()).ok());
    for (int32_t r = 0; r < batch; ++r) expect_row(c, r, c.row(r), c.len[r]);
    if (first == 0) expect_row(c, batch, c.row(batch), ld);
    if (first == 0) c.len[batch] = 0;  // the long row once is enough
  }
}

// CPU batch invariance (§1.2): a row's result does not depend on the rows around it.
TEST(Topk, RowResultIndependentOfBatch) {
  Rng rng(testing::test_seed());
  TopkCase c(6, 3000, 128);
  for (int32_t r = 0; r < 6; ++r) c.len[r] = int32_t(rng.randint(0, 3000));
  for (auto& v : c.logits) v = hazard_value(rng);
  ASSERT_TRUE(topk_ref(c.params()).ok());
  for (int32_t r = 0; r < 6; ++r) {
    TopkCase one(1, 3000, 128);
    std::copy_n(c.row(r), 3000, one.row(0));
    one.len[0] = c.len[r];
    ASSERT_TRUE(topk_ref(one.params()).ok());
    EXPECT_TRUE(std::equal(one.idx.begin(), one.idx.end(), c.idx_row(r))) << "row " << r;
  }
}

TEST(TopkCheck, PassesOnRandomShapes) {
  uint64_t seed = testing::test_seed();
  Status s = check_topk(topk_ref, 8, 2048, 65536, seed);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = check_topk(topk_ref, 5, 64, 300, seed + 1);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = check_topk(topk_ref, 3, 128, 0, seed + 2);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// The comparison used by the check is not vacuous: a wrong entry, a repeat, a missing -1 and an
// out-of-order trivial row are each reported.
TEST(TopkCheck, CompareReportsEveryKindOfMismatch) {
  std::vector<int32_t> got(64, -1);
  std::iota(got.begin(), got.begin() + 3, 0);  // {0, 1, 2, -1...}
  EXPECT_TRUE(compare_topk_row(got.data(), {0, 1, 2}, 64, 0, true).ok());
  EXPECT_TRUE(compare_topk_row(got.data(), {2, 0, 1}, 64, 0, false).ok());
  Status s = compare_topk_row(got.data(), {0, 1, 3}, 64, 7, false);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("idx[7][2] = 2"), std::string::npos) << s.message();
  EXPECT_FALSE(compare_topk_row(got.data(), {0, 1}, 64, 0, false).ok());        // -1 missing at [2]
  EXPECT_FALSE(compare_topk_row(got.data(), {0, 1, 2, 3}, 64, 0, false).ok());  // -1 in prefix
  EXPECT_FALSE(compare_topk_row(got.data(), {1, 0, 2}, 64, 0, true).ok());
  got[1] = 0;
  EXPECT_FALSE(compare_topk_row(got.data(), {0, 1, 2}, 64, 0, false).ok());  // a repeat
}

}  // namespace
}  // namespace dsa::kernels
