#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/paged_logits/paged_logits_test_case.h"

namespace dsa::kernels {
namespace {

using namespace paged_logits_test;  // NOLINT: the shared fixture of this binary

// ---- Rejections: one per rule, code and message, nothing written -----------------------------

class PagedLogitsRejects : public ::testing::Test {
 protected:
  PagedLogitsRejects() : c(2, 2, 16, 3, 5, 3) {
    Rng rng(testing::test_seed());
    c.pool.fill_random(rng);
    c.randomize_qw(rng);
    c.table.at(1, 0) = 4, c.table.at(1, 1) = 2;
    c.table.at(2, 0) = 3;
    c.req_slot = {1, 2};
    c.row_len = {100, 101, 30, 31};
  }
  void expect(StatusCode code, const PagedLogitsParams& p, const std::string& needle) {
    Status st = paged_logits_ref(p);
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
    for (float v : c.logits) ASSERT_EQ(v, kSentinel) << "a rejected call must not write";
  }
  Case c;
};

TEST_F(PagedLogitsRejects, HeadsNotSupported) {
  auto p = c.params();
  p.num_heads = 8;
  expect(StatusCode::kInvalidArgument, p, "num_heads = 8: must be 16, 32 or 64");
}
TEST_F(PagedLogitsRejects, HeadDim) {
  auto p = c.params();
  p.pool.head_dim = 64;
  expect(StatusCode::kInvalidArgument, p, "pool.head_dim = 64");
}
TEST_F(PagedLogitsRejects, PageSize) {
  auto p = c.params();
  p.pool.page_size = 32;
  expect(StatusCode::kInvalidArgument, p, "pool.page_size = 32");
}
TEST_F(PagedLogitsRejects, PageStride) {
  auto p = c.params();
  p.pool.page_stride_bytes = 8192;
  expect(StatusCode::kInvalidArgument, p, "pool.page_stride_bytes = 8192");
}
TEST_F(PagedLogitsRejects, RowsPerRequestZero) {
  auto p = c.params();
  p.rows_per_request = 0;
  expect(StatusCode::kInvalidArgument, p, "rows_per_request = 0");
}
TEST_F(PagedLogitsRejects, RowsPerRequestNine) {
  auto p = c.params();
  p.rows_per_request = 9;
  expect(StatusCode::kInvalidArgument, p, "rows_per_request = 9");
}
TEST_F(PagedLogitsRejects, NegativeBatch) {
  auto p = c.params();
  p.batch_pad = -1;
  expect(StatusCode::kInvalidArgument, p, "batch_pad = -1");
}
TEST_F(PagedLogitsRejects, LdNotMultipleOf256) {
  auto p = c.params();
  p.logits_ld = 200;
  expect(StatusCode::kInvalidArgument, p, "logits_ld = 200: must be a multiple of 256");
}
TEST_F(PagedLogitsRejects, LdBelowWP) {
  auto p = c.params();
  p.page_table.width = 5;  // W P = 320 > ld = 256
  expect(StatusCode::kInvalidArgument, p,
         "logits_ld = 256: must be a multiple of 256 and >= W*P = 320");
}
TEST_F(PagedLogitsRejects, TooFewLogitRows) {
  auto p = c.params();
  p.logits_rows = 3;
  expect(StatusCode::kInvalidArgument, p, "logits_rows = 3: must be >= B_pad*n = 4");
}
TEST_F(PagedLogitsRejects, ScheduleSize) {
  auto p = c.params();
  p.schedule_words = 19;
  expect(StatusCode::kInvalidArgument, p, "schedule_words = 19: must be 20");
}
TEST_F(PagedLogitsRejects, PageTableOfOtherPool) {
  auto p = c.params();
  p.page_table.num_pages = 9;
  expect(StatusCode::kInvalidArgument, p, "page_table.num_pages = 9: must be 5");
}
TEST_F(PagedLogitsRejects, NullQ) {
  auto p = c.params();
  p.q = nullptr;
  expect(StatusCode::kInvalidArgument, p, "q is null");
}
TEST_F(PagedLogitsRejects, NullSchedule) {
  auto p = c.params();
  p.schedule = nullptr;
  expect(StatusCode::kInvalidArgument, p, "schedule is null");
}
// Schedule built for n = 1 over the same buffer (B_pad n requests): header, always on.
TEST_F(PagedLogitsRejects, ScheduleBuiltForOtherLayout) {
  ScopedCheckedMode unchecked(false);  // the header check is on in both modes
  std::vector<int32_t> s(size_t(logits_schedule_words(c.G)));
  LogitsScheduleParams sp{c.row_len.data(), 4, 1, c.G, c.W, kPageSize, s.data(), int32_t(s.size())};
  ASSERT_TRUE(build_logits_schedule_ref(sp).ok());
  c.schedule = s;
  expect(StatusCode::kFailedPrecondition, c.params(),
         "paged_logits: schedule word 2 (batch_pad) = 4, expected 2");
}
TEST_F(PagedLogitsRejects, ScheduleOfOtherWidth) {
  c.schedule.assign(size_t(logits_schedule_words(c.G)), 0);
  LogitsScheduleParams sp{c.row_len.data(),          2, 2, c.G, 9, kPageSize, c.schedule.data(),
                          int32_t(c.schedule.size())};
  ASSERT_TRUE(build_logits_schedule_ref(sp).ok());
  expect(StatusCode::kFailedPrecondition, c.params(), "schedule word 6 (page_table_width) = 9");
}
TEST_F(PagedLogitsRejects, ScheduleBadMagic) {
  auto p = c.params();
  c.schedule[0] = 0;
  expect(StatusCode::kFailedPrecondition, p, "schedule word 0 (magic) = 0");
}
// Schedule built from other lengths: len_hash mismatch in checked mode.
TEST_F(PagedLogitsRejects, ScheduleFromOtherLengths) {
  std::vector<int32_t> other = c.row_len;
  other[2] = 29;
  c.build_schedule(other);
  expect(StatusCode::kFailedPrecondition, c.params(), "schedule word 8 (len_hash)");
}
// The hash is a checked-mode rule only: unchecked, a schedule from other lengths (same header)
// is accepted and the reference, which needs no schedule, computes the right logits.
TEST_F(PagedLogitsRejects, UncheckedSkipsHashCheck) {
  std::vector<int32_t> other = c.row_len;
  other[2] = 29;
  c.build_schedule(other);
  ScopedCheckedMode unchecked(false);
  ASSERT_TRUE(paged_logits_ref(c.params()).ok());
  expect_matches_contiguous(c, 2, copy_keys(c, 2, 30), 30);
  EXPECT_EQ(c.at(2, 30), kSentinel);
}
TEST_F(PagedLogitsRejects, NegativeLength) {
  c.row_len[3] = -4;
  expect(StatusCode::kOutOfRange, c.params(), "row_len[3] = -4: must be in [0, W*P = 192]");
}
TEST_F(PagedLogitsRejects, LengthAboveWP) {
  c.row_len[1] = 193;
  expect(StatusCode::kOutOfRange, c.params(), "row_len[1] = 193");
}
TEST_F(PagedLogitsRejects, ReservedPageInUse) {
  c.table.at(1, 1) = 0;
  expect(StatusCode::kOutOfRange, c.params(), "page_table[1][1] = 0 (request 0, L_b = 101)");
}
TEST_F(PagedLogitsRejects, PageBeyondPool) {
  c.table.at(2, 0) = 5;
  expect(StatusCode::kOutOfRange, c.params(), "page_table[2][0] = 5");
}
TEST_F(PagedLogitsRejects, RequestSlotBeyondTable) {
  c.req_slot[1] = 3;
  expect(StatusCode::kOutOfRange, c.params(), "req_slot[1] = 3: must be in [0, R_slots = 3)");
}

}  // namespace
}  // namespace dsa::kernels
