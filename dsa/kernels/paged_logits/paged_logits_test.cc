#include "dsa/kernels/paged_logits/paged_logits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits_check.h"
#include "dsa/kernels/paged_logits/paged_logits_test_case.h"

namespace dsa::kernels {
namespace {

using namespace paged_logits_test;  // NOLINT: the shared fixture of this binary

// Hand-computed. Codes: 0x38 = 1, 0x40 = 2, 0x30 = 0.5, 0x3C = 1.5, 0xC0 = -2, 0x28 = 0.25,
// 0x48 = 4. Request 0 uses page-table row 1 = [2, 1]: positions 0, 1, 2 at slots 128, 129, 130.
//  key A (pos 0) = [0.5, 1.5], scale 0.25;  key B (pos 1) = [-2, 0.25], scale 4;
//  key C (pos 2) = [4, 0], scale 0.5.
// Row 0 (len 2): head 0 q = [1, 2], w 2; head 1 q = [0, 1], w -0.5; other heads zero.
//  A: 0.25 (2 relu(0.5 + 3) - 0.5 relu(1.5)) = 0.25 (7 - 0.75) = 1.5625
//  B: 4 (2 relu(-2 + 0.5) - 0.5 relu(0.25)) = 4 (0 - 0.125) = -0.5
// Row 1 (len 3): head 0 q = [1, 2], w 1: A 0.875, B 0, C 0.5 * 4 = 2.
TEST(PagedLogits, HandComputedTinyCase) {
  EXPECT_EQ(e4m3_to_float(e4m3{0x3C}), 1.5f);
  EXPECT_EQ(e4m3_to_float(e4m3{0x28}), 0.25f);
  EXPECT_EQ(e4m3_to_float(e4m3{0xC0}), -2.f);
  Case c(1, 2, 16, 2, 3, 2);
  c.table.at(1, 0) = 2;
  c.table.at(1, 1) = 1;
  c.req_slot = {1};
  c.row_len = {2, 3};
  c.set_key(128, {0x30, 0x3C}, 0.25f);
  c.set_key(129, {0xC0, 0x28}, 4.f);
  c.set_key(130, {0x48}, 0.5f);
  uint8_t* q0 = c.q.data();
  q0[0] = 0x38, q0[1] = 0x40, q0[kIndexHeadDim + 1] = 0x38;
  c.w[0] = 2.f, c.w[1] = -0.5f;
  uint8_t* q1 = c.q.data() + 16 * kIndexHeadDim;
  q1[0] = 0x38, q1[1] = 0x40;
  c.w[16] = 1.f;
  ASSERT_TRUE(paged_logits_ref(c.params()).ok());
  EXPECT_EQ(c.at(0, 0), 1.5625f);
  EXPECT_EQ(c.at(0, 1), -0.5f);
  EXPECT_TRUE(std::isnan(c.at(0, 2))) << "column >= row_len is poisoned in checked mode";
  EXPECT_EQ(c.at(1, 0), 0.875f);
  EXPECT_EQ(c.at(1, 1), 0.f);
  EXPECT_EQ(c.at(1, 2), 2.f);
  for (int64_t s = 3; s < c.ld; ++s) EXPECT_TRUE(std::isnan(c.at(1, s))) << s;
  // §3b bound: M(row 0, A) = 0.25 (2 (0.5 + 3) + 0.5 (1.5)) = 1.9375.
  EXPECT_EQ(paged_logits_bound(q0, c.w.data(), 16, c.pool.values(128), 0.25f), 1.9375f / 256);
  std::vector<float> bound(c.logits.size(), -1.f);
  ASSERT_TRUE(paged_logits_bounds(c.params(), bound.data()).ok());
  EXPECT_EQ(bound[0], 1.9375f / 256);
  EXPECT_EQ(bound[2], 0.f);  // undefined column
  EXPECT_EQ(bound[size_t(c.ld) + 2], 0.5f * 4 / 256);
}

// n = 1..4 rows per request, row j sees C + j + 1 (verify-like), all rows of a request over the
// same keys, scattered and out-of-order pages; every row against the contiguous formulation.
TEST(PagedLogits, RowsPerRequestMatchContiguousCopy) {
  Rng rng(testing::test_seed());
  for (int32_t n = 1; n <= 4; ++n) {
    const int32_t batch = 3, W = 6, num_pages = batch * W + 1;
    Case c(batch, n, n % 2 ? 16 : 32, W, num_pages, batch + 2);
    c.pool.fill_random(rng);
    c.randomize_qw(rng);
    std::vector<int32_t> free_pages = rng.permutation(1, num_pages);
    for (int32_t b = 0; b < batch; ++b) {
      const auto C = int32_t(rng.randint(0, W * kPageSize - n));
      c.req_slot[size_t(b)] = b + 1 + (b == 2);  // rows 1, 2, 4: row 3 unused
      c.table.assign(c.req_slot[size_t(b)], C + n, free_pages);
      for (int32_t j = 0; j < n; ++j) c.row_len[size_t(b * n + j)] = C + j + 1;
    }
    ASSERT_TRUE(paged_logits_ref(c.params()).ok());
    for (int32_t b = 0; b < batch; ++b) {
      const int32_t L = c.row_len[size_t(b * n + n - 1)];
      const Contiguous keys = copy_keys(c, c.req_slot[size_t(b)], L);
      for (int32_t j = 0; j < n; ++j) {
        const int64_t r = b * n + j;
        expect_matches_contiguous(c, r, keys, c.row_len[size_t(r)]);
        for (int64_t s = c.row_len[size_t(r)]; s < c.ld; ++s) ASSERT_TRUE(std::isnan(c.at(r, s)));
      }
    }
  }
}

// The same keys in a scattered, out-of-order page table and in a contiguous one (pages 1, 2, ...
// in order) give bit-identical logits: addressing never changes the function.
TEST(PagedLogits, ScatteredPagesEqualContiguousPages) {
  Rng rng(testing::test_seed());
  const int32_t n = 2, W = 7, len = W * kPageSize - 5;
  Case scattered(1, n, 64, W, W + 1, 2), contiguous(1, n, 64, W, W + 1, 2);
  scattered.pool.fill_random(rng);
  scattered.randomize_qw(rng);
  std::vector<int32_t> perm = rng.permutation(1, W + 1);
  for (int32_t i = 0; i < W; ++i) {
    scattered.table.at(1, i) = perm[size_t(i)];
    contiguous.table.at(1, i) = i + 1;
    std::memcpy(contiguous.pool.bytes().data() + size_t(i + 1) * 8448,
                scattered.pool.bytes().data() + size_t(perm[size_t(i)]) * 8448, 8448);
  }
  contiguous.q = scattered.q;
  contiguous.w = scattered.w;
  for (Case* c : {&scattered, &contiguous}) {
    c->req_slot = {1};
    c->row_len = {len - 1, len};
    ASSERT_TRUE(paged_logits_ref(c->params()).ok());
  }
  ASSERT_EQ(
      std::memcmp(scattered.logits.data(), contiguous.logits.data(), scattered.logits.size() * 4),
      0);
}

// Zero-length rows and padded requests (req_slot 0, row_len 0) define nothing: NaN rows in
// checked mode, untouched rows in unchecked mode; real rows are unaffected (batch invariance).
TEST(PagedLogits, ZeroLengthRowsAndPaddedRequests) {
  Rng rng(testing::test_seed());
  for (bool checked : {true, false}) {
    ScopedCheckedMode mode(checked);
    Case c(3, 2, 16, 3, 4, 2);
    c.pool.fill_random(rng);
    c.randomize_qw(rng);
    c.table.at(1, 0) = 3;
    c.req_slot = {1, 0, 0};
    c.row_len = {0, 70, 0, 0, 0, 0};  // row 0: top-up row; requests 1, 2: padded
    c.table.at(1, 1) = 2;
    ASSERT_TRUE(paged_logits_ref(c.params()).ok());
    for (int64_t r : {0, 2, 3, 4, 5}) {
      for (int64_t s = 0; s < c.ld; ++s) {
        if (checked) {
          ASSERT_TRUE(std::isnan(c.at(r, s))) << r << "," << s;
        } else {
          ASSERT_EQ(c.at(r, s), kSentinel) << r << "," << s;
        }
      }
    }
    expect_matches_contiguous(c, 1, copy_keys(c, 1, 70), 70);
  }
}

TEST(PagedLogits, EmptyBatchIsNoOp) {
  Case c(0, 1, 16, 2, 2, 1);
  ASSERT_TRUE(paged_logits_ref(c.params()).ok());
}

// §9 row 2: a negative length fed directly. Checked: OutOfRange naming the row; unchecked: an
// empty row (nothing written), the other rows computed.
TEST(PagedLogits, NegativeRowLength) {
  Rng rng(testing::test_seed());
  Case c(1, 2, 16, 2, 3, 2);
  c.pool.fill_random(rng);
  c.randomize_qw(rng);
  c.table.at(1, 0) = 1;
  c.req_slot = {1};
  c.row_len = {-4, 5};
  Status st = paged_logits_ref(c.params());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  EXPECT_NE(st.message().find("row_len[0] = -4"), std::string::npos) << st.to_string();
  ScopedCheckedMode unchecked(false);
  ASSERT_TRUE(paged_logits_ref(c.params()).ok());
  for (int64_t s = 0; s < c.ld; ++s) ASSERT_EQ(c.at(0, s), kSentinel);
  expect_matches_contiguous(c, 1, copy_keys(c, 1, 5), 5);
}

// Unchecked neutralisation: a length above W P is clamped to W P; a page id outside
// [0, num_pages) reads page 0 (zero keys, scale 0 -> logit 0); a bad req_slot reads row 0.
TEST(PagedLogits, UncheckedNeutralisesLengthsPagesAndSlots) {
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  Case c(2, 1, 16, 2, 4, 2);
  c.pool.fill_random(rng);
  c.randomize_qw(rng);
  c.table.at(1, 0) = 2;
  c.table.at(1, 1) = 99;  // out of pool
  c.req_slot = {1, 7};    // 7: out of the page table
  c.row_len = {100000, 10};
  ASSERT_TRUE(paged_logits_ref(c.params()).ok());
  expect_matches_contiguous(c, 0, copy_keys(c, 1, 64), 64);
  for (int64_t s = 64; s < 128; ++s) ASSERT_EQ(c.at(0, s), 0.f) << s;
  for (int64_t s = 128; s < c.ld; ++s) ASSERT_EQ(c.at(0, s), kSentinel) << s;
  for (int64_t s = 0; s < 10; ++s) ASSERT_EQ(c.at(1, s), 0.f) << "row 0 -> page 0";
  ASSERT_EQ(c.at(1, 10), kSentinel);
}

TEST(PagedLogits, CheckEntryPasses) {
  Status st = check_paged_logits(paged_logits_ref, build_logits_schedule_ref, 3, 4, 64, 700,
                                 testing::test_seed());
  EXPECT_TRUE(st.ok()) << st.to_string();
  st = check_paged_logits(paged_logits_ref, build_logits_schedule_ref, 2, 1, 16, 65,
                          testing::test_seed() + 7);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

}  // namespace
}  // namespace dsa::kernels
