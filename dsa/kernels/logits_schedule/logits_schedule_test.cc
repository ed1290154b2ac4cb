#include "dsa/kernels/logits_schedule/logits_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "dsa/kernels/logits_schedule/logits_schedule_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

std::vector<int32_t> build(const std::vector<int32_t>& row_len, int32_t batch_pad, int32_t n,
                           int32_t G, int32_t W) {
  std::vector<int32_t> s(size_t(logits_schedule_words(G)), -77);
  LogitsScheduleParams p;
  p.row_len = row_len.data();
  p.batch_pad = batch_pad;
  p.rows_per_request = n;
  p.num_consumers = G;
  p.page_table_width = W;
  p.schedule = s.data();
  p.schedule_capacity = static_cast<int32_t>(s.size());
  Status st = build_logits_schedule_ref(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return s;
}

struct Visit {
  int32_t consumer, b, k, begin, end;
};
struct Walk {
  std::vector<Visit> visits;
  std::vector<bool> ended_on_entry;
};

// Runs every consumer's loop with the launch's (B_pad, n, W) and a watchdog: by construction at
// most B_pad (1 + W P / 256) steps per consumer, so more visits than that fails the test.
Walk walk(const std::vector<int32_t>& schedule, int32_t G, const std::vector<int32_t>& row_len,
          int32_t batch_pad, int32_t n, int32_t W) {
  Walk w;
  const int64_t watchdog = int64_t{batch_pad} * (1 + W * kPageSize / kScheduleSplitTokens) + 1;
  for (int32_t i = 0; i < G; ++i) {
    int64_t steps = 0;
    bool ok = for_each_schedule_split(schedule.data(), i, row_len.data(), batch_pad, n, W,
                                      kPageSize, [&](int32_t b, int32_t k, int32_t lo, int32_t hi) {
                                        EXPECT_LT(++steps, watchdog) << "consumer " << i;
                                        w.visits.push_back({i, b, k, lo, hi});
                                      });
    w.ended_on_entry.push_back(ok);
  }
  return w;
}

// Every visit is in bounds of the launch: b < B_pad, a real split of b, tokens inside [0, W P).
void expect_in_bounds(const Walk& w, const std::vector<int32_t>& row_len, int32_t batch_pad,
                      int32_t n, int32_t W) {
  for (const Visit& v : w.visits) {
    ASSERT_GE(v.b, 0);
    ASSERT_LT(v.b, batch_pad);
    ASSERT_GE(v.k, 0);
    ASSERT_LT(v.k, schedule_request_segments(row_len.data(), v.b, n, W, kPageSize));
    ASSERT_GE(v.begin, 0);
    ASSERT_LE(v.end, W * kPageSize);
    ASSERT_LT(v.begin, v.end);
  }
}

// Hand-computed: B_pad = 3, n = 2, W = 8 (W P = 512), G = 3.
// L = [max(100, 300), max(0, 0), min(max(600, 5), 512)] = [300, 0, 512] -> seg [2, 0, 2],
// pre [0, 2, 2, 4], T_seg = 4, per = 1, rem = 1 -> starts [0, 1, 2, 4] (the last consumer gets
// the extra segment) -> entries (0,0) (0,1) (2,0) (B_pad=3,0).
// len_hash = 100*1 + 300*3 + 0*5 + 0*7 + 600*9 + 5*11 = 6455.
TEST(LogitsSchedule, HandComputedSmallCase) {
  std::vector<int32_t> row_len = {100, 300, 0, 0, 600, 5};
  auto s = build(row_len, 3, 2, 3, 8);
  std::vector<int32_t> expected = {0x31415344, 1, 3, 2, 3, 256, 8, 4, 6455,
                                   0,          0, 0, 0, 1, 2,   0, 3, 0};
  EXPECT_EQ(s, expected);
  Walk w = walk(s, 3, row_len, 3, 2, 8);
  ASSERT_EQ(w.visits.size(), 4u);
  // Consumer 0: split 0 of request 0; consumer 1: split 1 (tokens [256, 300)); consumer 2: both
  // splits of request 2, the second ending at the clamp 512.
  EXPECT_EQ(std::make_tuple(w.visits[0].consumer, w.visits[0].b, w.visits[0].k, w.visits[0].begin,
                            w.visits[0].end),
            std::make_tuple(0, 0, 0, 0, 256));
  EXPECT_EQ(std::make_tuple(w.visits[1].consumer, w.visits[1].b, w.visits[1].k, w.visits[1].begin,
                            w.visits[1].end),
            std::make_tuple(1, 0, 1, 256, 300));
  EXPECT_EQ(std::make_tuple(w.visits[2].consumer, w.visits[2].b, w.visits[2].k, w.visits[2].end),
            std::make_tuple(2, 2, 0, 256));
  EXPECT_EQ(std::make_tuple(w.visits[3].consumer, w.visits[3].b, w.visits[3].k, w.visits[3].begin,
                            w.visits[3].end),
            std::make_tuple(2, 2, 1, 256, 512));
  for (bool ok : w.ended_on_entry) EXPECT_TRUE(ok);
  EXPECT_TRUE(validate_logits_schedule(s.data(), 18, row_len.data(), 3, 2, 3, 8).ok());
}

TEST(LogitsSchedule, WordCount) {
  EXPECT_EQ(logits_schedule_words(1), 14);
  EXPECT_EQ(logits_schedule_words(132), 276);
}

// All-zero lengths (B_pad a multiple of 32, SPEC.md §9 rows 1 and 13): T_seg = 0, every entry
// (B_pad, 0), and no consumer does anything.
TEST(LogitsSchedule, AllZeroLengths) {
  for (int32_t batch_pad : {0, 32, 64}) {
    for (int32_t n : {1, 4}) {
      std::vector<int32_t> row_len(size_t(batch_pad) * n, 0);
      const int32_t G = 132;
      auto s = build(row_len, batch_pad, n, G, 16);
      EXPECT_EQ(s[kScheduleWordTotalSegments], 0);
      EXPECT_EQ(s[kScheduleWordLenHash], 0);
      for (int32_t i = 0; i <= G; ++i) {
        EXPECT_EQ(s[kScheduleHeaderWords + 2 * i], batch_pad) << i;
        EXPECT_EQ(s[kScheduleHeaderWords + 2 * i + 1], 0) << i;
      }
      Walk w = walk(s, G, row_len, batch_pad, n, 16);
      EXPECT_TRUE(w.visits.empty());
      for (bool ok : w.ended_on_entry) EXPECT_TRUE(ok);
    }
  }
}

// G > T_seg: the first G - T_seg consumers are empty and start in bounds (at the first split),
// the last T_seg consumers take one split each.
TEST(LogitsSchedule, MoreConsumersThanSegments) {
  // seg = [0, 2, 0, 3] -> T_seg = 5.
  std::vector<int32_t> row_len = {0, 0, 300, 512, 0, 0, 700, 513};
  const int32_t G = 132, W = 40;
  auto s = build(row_len, 4, 2, G, W);
  EXPECT_EQ(s[kScheduleWordTotalSegments], 5);
  for (int32_t i = 0; i <= G - 5; ++i) {
    EXPECT_EQ(s[kScheduleHeaderWords + 2 * i], 1) << i;  // request 0 has no segments
    EXPECT_EQ(s[kScheduleHeaderWords + 2 * i + 1], 0) << i;
  }
  Walk w = walk(s, G, row_len, 4, 2, W);
  expect_in_bounds(w, row_len, 4, 2, W);
  ASSERT_EQ(w.visits.size(), 5u);
  for (size_t v = 0; v < 5; ++v) EXPECT_EQ(w.visits[v].consumer, G - 5 + int32_t(v));
  EXPECT_EQ(w.visits[4].end, 700);
}

// Lengths above W P are clamped to W P (builder and consumers alike); negative lengths count as
// 0, while the hash still sees their raw bit pattern.
TEST(LogitsSchedule, ClampsAboveWPAndNegativeAsZero) {
  const int32_t W = 5;  // W P = 320 -> 2 segments, the second [256, 320)
  std::vector<int32_t> row_len = {-4, 100000, -1, -7, 90, INT32_MAX};
  auto s = build(row_len, 3, 2, 4, W);
  EXPECT_EQ(s[kScheduleWordTotalSegments], 2 + 0 + 2);
  const uint32_t hash = uint32_t(-4) * 1u + 100000u * 3u + uint32_t(-1) * 5u + uint32_t(-7) * 7u +
                        90u * 9u + uint32_t(INT32_MAX) * 11u;
  EXPECT_EQ(uint32_t(s[kScheduleWordLenHash]), hash);
  Walk w = walk(s, 4, row_len, 3, 2, W);
  expect_in_bounds(w, row_len, 3, 2, W);
  ASSERT_EQ(w.visits.size(), 4u);
  EXPECT_EQ(w.visits[1].end, 320);
  EXPECT_EQ(w.visits[3].b, 2);
  EXPECT_EQ(w.visits[3].end, 320);
  for (const Visit& v : w.visits) EXPECT_NE(v.b, 1) << "request 1 has only negative lengths";
}

// Coverage: over random cases the union of all consumers' visits is every split of every
// request exactly once, with the right token range (independent per-request count).
TEST(LogitsSchedule, RandomCoverageIsExactlyOnce) {
  Rng rng(testing::test_seed());
  for (int iter = 0; iter < 300; ++iter) {
    const auto batch_pad = int32_t(rng.randint(0, 40));
    const auto n = int32_t(rng.randint(1, 8));
    const auto G = int32_t(rng.randint(1, 140));
    const auto W = int32_t(rng.randint(1, 40));
    std::vector<int32_t> row_len(size_t(batch_pad) * n);
    for (auto& v : row_len) {
      const auto kind = rng.randint(0, 9);
      v = kind == 0 ? -int32_t(rng.randint(1, 100)) : kind == 1 ? 0 : int32_t(rng.randint(1, 3000));
    }
    auto s = build(row_len, batch_pad, n, G, W);
    Walk w = walk(s, G, row_len, batch_pad, n, W);
    for (bool ok : w.ended_on_entry) ASSERT_TRUE(ok);
    std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> seen;
    int32_t prev_consumer = 0;
    for (const Visit& v : w.visits) {
      ASSERT_GE(v.consumer, prev_consumer);
      prev_consumer = v.consumer;
      ASSERT_TRUE(seen.insert({{v.b, v.k}, {v.begin, v.end}}).second) << "split visited twice";
    }
    size_t expected_total = 0;
    for (int32_t b = 0; b < batch_pad; ++b) {
      int32_t len = 0;
      for (int32_t j = 0; j < n; ++j) len = std::max(len, row_len[size_t(b) * n + j]);
      len = std::min(len, W * kPageSize);
      for (int32_t k = 0; k * 256 < len; ++k) {
        ++expected_total;
        auto it = seen.find({b, k});
        ASSERT_NE(it, seen.end()) << "split (" << b << ", " << k << ") never visited";
        EXPECT_EQ(it->second, std::make_pair(k * 256, std::min(k * 256 + 256, len)));
      }
    }
    ASSERT_EQ(seen.size(), expected_total);
    ASSERT_EQ(size_t(s[kScheduleWordTotalSegments]), expected_total);
  }
}

TEST(LogitsSchedule, CheckEntryPasses) {
  Status st =
      check_logits_schedule(build_logits_schedule_ref, 8, 4, 132, 5000, testing::test_seed());
  EXPECT_TRUE(st.ok()) << st.to_string();
  st = check_logits_schedule(build_logits_schedule_ref, 3, 1, 7, 300, testing::test_seed() + 1);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

// ---- §9 row 1: schedules that do not match the launch ---------------------------------------

void expect_mismatch(const Status& st, const std::string& needle) {
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
}

// Built for the lengths normalised to (B_pad n, 1), launched with (B_pad, n = 4): the header
// mismatch is reported, and the loop still ends inside the launch's bounds.
TEST(LogitsScheduleMismatch, BuiltForNEquals1LaunchedWithN4) {
  Rng rng(testing::test_seed());
  const int32_t batch = 6, n = 4, G = 16, W = 20;
  std::vector<int32_t> row_len(size_t(batch) * n);
  for (auto& v : row_len) v = int32_t(rng.randint(1, W * kPageSize));
  auto s = build(row_len, batch * n, 1, G, W);
  expect_mismatch(
      validate_logits_schedule(s.data(), int32_t(s.size()), row_len.data(), batch, n, G, W),
      "schedule word 2 (batch_pad) = 24, expected 6");
  expect_mismatch(check_schedule_header("paged_logits", s.data(), batch, n, G, W),
                  "paged_logits: schedule word 2 (batch_pad) = 24, expected 6");
  Walk w = walk(s, G, row_len, batch, n, W);
  expect_in_bounds(w, row_len, batch, n, W);
  // Same B_pad, other n: word 3.
  auto s1 = build(row_len, batch, 1, G, W);
  expect_mismatch(
      validate_logits_schedule(s1.data(), int32_t(s1.size()), row_len.data(), batch, n, G, W),
      "schedule word 3 (rows_per_request) = 1, expected 4");
  Walk w1 = walk(s1, G, row_len, batch, n, W);
  expect_in_bounds(w1, row_len, batch, n, W);
}

// row_len mutated after the build: the hash (or T_seg) no longer matches; the walk stays bounded
// and the checked end-point rule can fire.
TEST(LogitsScheduleMismatch, RowLenMutatedAfterBuild) {
  // seg = [1, 2, 2, 0], G = 5: entries (0,0) (1,0) (1,1) (2,0) (2,1) (4,0).
  const int32_t batch = 4, n = 2, G = 5, W = 10;
  std::vector<int32_t> row_len = {10, 11, 300, 301, 500, 501, 0, 0};
  auto s = build(row_len, batch, n, G, W);
  auto same_segments = row_len;
  same_segments[1] = 12;  // still one segment: only the hash changes
  expect_mismatch(
      validate_logits_schedule(s.data(), int32_t(s.size()), same_segments.data(), batch, n, G, W),
      "schedule word 8 (len_hash) = ");
  expect_mismatch(check_schedule_hash("paged_logits", s.data(), same_segments.data(), batch, n),
                  "paged_logits: schedule word 8 (len_hash)");
  auto more = row_len;
  more[7] = 640;  // request 3 gains 3 segments
  expect_mismatch(
      validate_logits_schedule(s.data(), int32_t(s.size()), more.data(), batch, n, G, W),
      "schedule word 7 (total_segments) = 5, expected 8");
  auto fewer = row_len;
  fewer[4] = fewer[5] = 0;  // request 2 loses its 2 segments
  Walk w = walk(s, G, fewer, batch, n, W);
  expect_in_bounds(w, fewer, batch, n, W);
  // Consumer 3 walks (2,0) -> (2,1); request 2 now has no split, so it steps to (3,0) past its
  // end: the checked rule of §3c fires (b = 3 < B_pad).
  EXPECT_FALSE(w.ended_on_entry[3]);
  Walk w2 = walk(s, G, more, batch, n, W);
  expect_in_bounds(w2, more, batch, n, W);
}

// Built for G = 4 into a buffer sized for the launch's G = 8 (trailing words garbage, some
// negative): word 4 is reported; the loop never reads below 0 nor past B_pad.
TEST(LogitsScheduleMismatch, WrongConsumerCount) {
  Rng rng(testing::test_seed());
  const int32_t batch = 5, n = 3, W = 12;
  std::vector<int32_t> row_len(size_t(batch) * n);
  for (auto& v : row_len) v = int32_t(rng.randint(0, W * kPageSize));
  auto small = build(row_len, batch, n, 4, W);
  std::vector<int32_t> s(size_t(logits_schedule_words(8)));
  for (auto& v : s) v = int32_t(rng.randint(-1000, 1000));
  std::copy(small.begin(), small.end(), s.begin());
  expect_mismatch(
      validate_logits_schedule(s.data(), int32_t(s.size()), row_len.data(), batch, n, 8, W),
      "schedule word 4 (num_consumers) = 4, expected 8");
  expect_mismatch(
      validate_logits_schedule(small.data(), int32_t(small.size()), row_len.data(), batch, n, 8, W),
      "schedule word 4 (num_consumers)");
  Walk w = walk(s, 8, row_len, batch, n, W);
  expect_in_bounds(w, row_len, batch, n, W);
}

// Built with W = 12, launched with W = 4 (seg_b recomputed smaller): word 6; walk bounded by the
// launch's W P.
TEST(LogitsScheduleMismatch, WrongPageTableWidth) {
  const int32_t batch = 3, n = 1, G = 5;
  std::vector<int32_t> row_len = {700, 20, 768};
  auto s = build(row_len, batch, n, G, 12);
  expect_mismatch(
      validate_logits_schedule(s.data(), int32_t(s.size()), row_len.data(), batch, n, G, 4),
      "schedule word 6 (page_table_width) = 12, expected 4");
  Walk w = walk(s, G, row_len, batch, n, 4);
  expect_in_bounds(w, row_len, batch, n, 4);
}

// Corrupted entries (random words, negative and huge) still give a bounded, in-bounds walk.
TEST(LogitsScheduleMismatch, GarbageEntriesTerminateInBounds) {
  Rng rng(testing::test_seed());
  const int32_t batch = 7, n = 2, G = 9, W = 8;
  std::vector<int32_t> row_len(size_t(batch) * n);
  for (auto& v : row_len) v = int32_t(rng.randint(-50, 700));
  for (int iter = 0; iter < 50; ++iter) {
    auto s = build(row_len, batch, n, G, W);
    for (int32_t w = kScheduleHeaderWords; w < int32_t(s.size()); ++w) {
      s[size_t(w)] = int32_t(rng.randint(INT32_MIN, INT32_MAX));
    }
    expect_mismatch(
        validate_logits_schedule(s.data(), int32_t(s.size()), row_len.data(), batch, n, G, W),
        "(entry[0].b)");
    Walk wk = walk(s, G, row_len, batch, n, W);
    expect_in_bounds(wk, row_len, batch, n, W);
  }
}

TEST(LogitsScheduleMismatch, WrongMagicVersionAndSize) {
  std::vector<int32_t> row_len = {5, 6};
  auto s = build(row_len, 1, 2, 2, 4);
  auto bad = s;
  bad[0] = 0x12345678;
  expect_mismatch(check_schedule_header("paged_logits", bad.data(), 1, 2, 2, 4),
                  "schedule word 0 (magic) = 305419896, expected 826364740");
  bad = s;
  bad[1] = 2;
  expect_mismatch(
      validate_logits_schedule(bad.data(), int32_t(bad.size()), row_len.data(), 1, 2, 2, 4),
      "schedule word 1 (version) = 2, expected 1");
  bad = s;
  bad[5] = 128;
  expect_mismatch(check_schedule_header("paged_logits", bad.data(), 1, 2, 2, 4),
                  "schedule word 5 (split_tokens) = 128, expected 256");
  expect_mismatch(
      validate_logits_schedule(s.data(), int32_t(s.size()) - 1, row_len.data(), 1, 2, 2, 4),
      "schedule_words = 15, expected 10 + 2(G + 1) = 16");
  bad = s;
  bad[9] = 1;
  expect_mismatch(
      validate_logits_schedule(bad.data(), int32_t(bad.size()), row_len.data(), 1, 2, 2, 4),
      "schedule word 9 (reserved) = 1, expected 0");
}

// ---- Host rejections ------------------------------------------------------------------------

class LogitsScheduleRejects : public ::testing::Test {
 protected:
  LogitsScheduleRejects() : row_len(8, 3), schedule(64, -5) {
    p.row_len = row_len.data();
    p.batch_pad = 2;
    p.rows_per_request = 4;
    p.num_consumers = 4;
    p.page_table_width = 4;
    p.schedule = schedule.data();
    p.schedule_capacity = 64;
  }
  void expect(StatusCode code, const std::string& needle) {
    Status st = build_logits_schedule_ref(p);
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
    EXPECT_TRUE(std::all_of(schedule.begin(), schedule.end(), [](int32_t v) { return v == -5; }))
        << "a rejected build must not write";
  }
  std::vector<int32_t> row_len, schedule;
  LogitsScheduleParams p;
};

TEST_F(LogitsScheduleRejects, RowsPerRequestZero) {
  p.rows_per_request = 0;
  expect(StatusCode::kInvalidArgument, "rows_per_request = 0");
}
TEST_F(LogitsScheduleRejects, RowsPerRequestNine) {
  p.rows_per_request = 9;
  expect(StatusCode::kInvalidArgument, "rows_per_request = 9");
}
TEST_F(LogitsScheduleRejects, NoConsumers) {
  p.num_consumers = 0;
  expect(StatusCode::kInvalidArgument, "num_consumers = 0");
}
TEST_F(LogitsScheduleRejects, ZeroWidth) {
  p.page_table_width = 0;
  expect(StatusCode::kInvalidArgument, "page_table_width = 0");
}
TEST_F(LogitsScheduleRejects, NegativeBatch) {
  p.batch_pad = -1;
  expect(StatusCode::kInvalidArgument, "batch_pad = -1");
}
TEST_F(LogitsScheduleRejects, WrongPageSize) {
  p.page_size = 32;
  expect(StatusCode::kInvalidArgument, "page_size = 32");
}
TEST_F(LogitsScheduleRejects, NullRowLen) {
  p.row_len = nullptr;
  expect(StatusCode::kInvalidArgument, "row_len is null");
}
TEST_F(LogitsScheduleRejects, SegmentCountOverflow) {
  p.page_table_width = INT32_MAX / kPageSize;  // ~8.4M segments per request
  p.batch_pad = 300;
  expect(StatusCode::kInvalidArgument, "overflow int32");
}
TEST_F(LogitsScheduleRejects, CapacityTooSmall) {
  p.num_consumers = 40;  // needs 92 words
  expect(StatusCode::kResourceExhausted, "schedule_capacity = 64");
}

}  // namespace
}  // namespace dsa::kernels
