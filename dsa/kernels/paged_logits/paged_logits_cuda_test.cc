// GPU tests of paged_logits_cuda (SPEC.md §3b, §3c) against the CPU reference: fresh random
// inputs, outputs poisoned (NaN bytes) before every launch, every defined column within
// 2^-8 M[r, s] (paged_logits_bounds), every column >= row_len left untouched, bit-identical reruns,
// the always-on header check, the checked-mode error word, the unchecked neutralisation, and a
// watchdog proving that mismatched schedules terminate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/paged_logits/paged_logits_test_case.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/reject_table.h"
#include "dsa/testing/watchdog.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using namespace paged_logits_test;  // NOLINT: the shared fixture (Case) of the CPU tests
using testing::dev;
using testing::is_poison;

// The device copy of a Case. run() poisons the logits, launches, synchronises and downloads.
struct DeviceCase {
  DeviceBuffer<uint8_t> q, pool;
  DeviceBuffer<float> w, logits;
  DeviceBuffer<int32_t> row_len, req_slot, table, schedule;
  PagedLogitsParams p;

  explicit DeviceCase(Case& c) {
    p = c.params();  // builds the schedule from row_len unless the test set one
    const PageTable t = c.table.table();
    q = dev(c.q, 1);
    pool = dev(c.pool.bytes(), 1);
    w = dev(c.w, 1);
    logits = dev(std::vector<float>(c.logits.size()), 1);
    row_len = dev(c.row_len, 1);
    req_slot = dev(c.req_slot, 1);
    table = dev(std::vector<int32_t>(t.data, t.data + int64_t{t.num_rows} * t.width), 1);
    schedule = dev(c.schedule, 1);
    p.q = q.data(), p.w = w.data(), p.row_len = row_len.data(), p.req_slot = req_slot.data();
    p.page_table.data = table.data();
    p.pool.data = pool.data();
    p.schedule = schedule.data();
    p.logits = logits.data();
  }
  Status run(std::vector<float>* out) {
    return testing::run_poisoned(
        logits, [&] { return paged_logits_cuda(p); }, out);
  }
};

int32_t effective_len(const Case& c, int64_t r) {
  return std::clamp(c.row_len[size_t(r)], 0, c.W * kPageSize);
}

// got vs the CPU reference (run here on the same host data in the current mode): every column
// s < row_len within the §3b bound, every other column still the poison.
void expect_matches_reference(Case& c, const std::vector<float>& got) {
  ASSERT_TRUE(paged_logits_ref(c.params()).ok());
  std::vector<float> bound(c.logits.size());
  ASSERT_TRUE(paged_logits_bounds(c.params(), bound.data()).ok());
  testing::expect_rows_within_bound(got, c.logits, bound, int64_t{c.batch_pad} * c.n, c.ld,
                                    [&](int64_t r) { return effective_len(c, r); });
}

void expect_untouched(const std::vector<float>& got) {
  for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(is_poison(got[i])) << i << ": " << got[i];
}

// Verify-like problem: request b has rows C_b + j + 1 (j < n), scattered out-of-order pages,
// every `padded`-th request padded (req_slot 0, lengths 0), request 1 (if any) has a zero-length
// first row (EXTEND's top-up rows).
Case make_case(Rng& rng, int32_t batch, int32_t n, int32_t heads, int32_t W, int32_t G,
               int32_t padded = 0) {
  const int32_t num_pages = batch * W + 1;
  Case c(batch, n, heads, W, num_pages, batch + 1);
  c.G = G;
  c.pool.fill_random(rng);
  c.randomize_qw(rng);
  std::vector<int32_t> free_pages = rng.permutation(1, num_pages);
  std::vector<int32_t> rows = rng.permutation(1, batch + 1);
  for (int32_t b = 0; b < batch; ++b) {
    if (padded > 0 && b % padded == padded - 1) continue;
    const auto C = b == 0 ? W * kPageSize - n : int32_t(rng.randint(0, W * kPageSize - n));
    c.req_slot[size_t(b)] = rows[size_t(b)];
    c.table.assign(c.req_slot[size_t(b)], C + n, free_pages);
    for (int32_t j = 0; j < n; ++j) c.row_len[size_t(b * n + j)] = C + j + 1;
    if (b == 1) c.row_len[size_t(b * n)] = 0;
  }
  return c;
}

using testing::within_seconds;

// ---- Correctness -------------------------------------------------------------------------------

TEST(PagedLogitsCuda, HandComputedTinyCase) {
  DSA_SKIP_WITHOUT_GPU();
  Case c(1, 2, 16, 2, 3, 2);
  c.table.at(1, 0) = 2;
  c.table.at(1, 1) = 1;
  c.req_slot = {1};
  c.row_len = {2, 3};
  c.set_key(128, {0x30, 0x3C}, 0.25f);
  c.set_key(129, {0xC0, 0x28}, 4.f);
  c.set_key(130, {0x48}, 0.5f);
  c.q[0] = 0x38, c.q[1] = 0x40, c.q[kIndexHeadDim + 1] = 0x38;
  c.w[0] = 2.f, c.w[1] = -0.5f;
  c.q[16 * kIndexHeadDim] = 0x38, c.q[16 * kIndexHeadDim + 1] = 0x40;
  c.w[16] = 1.f;
  DeviceCase d(c);
  std::vector<float> got;
  ASSERT_TRUE(d.run(&got).ok());
  // Every partial sum is exact in fp32 here.
  EXPECT_EQ(got[0], 1.5625f);
  EXPECT_EQ(got[1], -0.5f);
  EXPECT_TRUE(is_poison(got[2]));
  EXPECT_EQ(got[size_t(c.ld) + 0], 0.875f);
  EXPECT_EQ(got[size_t(c.ld) + 1], 0.f);
  EXPECT_EQ(got[size_t(c.ld) + 2], 2.f);
  expect_matches_reference(c, got);
}

// n = 1..8 (n > 4: groups of 4 rows), every head count, G from 1 to more consumers than splits,
// padded requests, zero-length rows, partial last splits, scattered pages.
TEST(PagedLogitsCuda, RandomShapesMatchReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  struct Shape {
    int32_t batch, n, heads, W, G, padded;
  };
  for (const Shape& s :
       {Shape{3, 1, 16, 5, 1, 0}, Shape{4, 2, 32, 9, 7, 3}, Shape{4, 3, 64, 6, 132, 0},
        Shape{5, 4, 64, 7, 5, 4}, Shape{3, 4, 16, 13, 2, 0}, Shape{2, 5, 32, 5, 3, 0},
        Shape{3, 8, 64, 4, 11, 3}, Shape{2, 6, 16, 3, 40, 0}}) {
    SCOPED_TRACE(::testing::Message() << "batch " << s.batch << " n " << s.n << " heads " << s.heads
                                      << " W " << s.W << " G " << s.G);
    Case c = make_case(rng, s.batch, s.n, s.heads, s.W, s.G, s.padded);
    DeviceCase d(c);
    std::vector<float> got;
    Status st = d.run(&got);
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_matches_reference(c, got);
  }
}

// V3.2 shapes (64 heads): 4 verify requests of n = 4 at ~2K tokens over G = 132, and a long
// single-row request (16K tokens) split over many consumers. Modest so the CPU side stays fast.
TEST(PagedLogitsCuda, V32ShapesMatchReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 1);
  for (auto [batch, n, W] : {std::tuple{4, 4, 34}, std::tuple{2, 1, 257}}) {
    Case c = make_case(rng, batch, n, 64, W, 132);
    DeviceCase d(c);
    std::vector<float> got;
    Status st = d.run(&got);
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_matches_reference(c, got);
  }
}

// The wgmma kernel's pipeline: every ring depth the launcher picks (n = 1..8 changes the size of
// the two q slots and so the number of page stages), one consumer (G = 1: the CTA wraps its ring
// many times and switches request, and q slot, often, down to one-page requests) and a few, row
// lengths at the edges (0, 1, 63, 64, 65, K - 1, K, K + 1 for top-k's K = 2048: lengths that are
// no multiple of a page or a split), and B_pad >> B (two of every three requests padded).
TEST(PagedLogitsCuda, PipelineDepthsEdgeLengthsAndPaddedBatches) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 7);
  const std::vector<int32_t> ends = {1, 63, 64, 65, kMaxTopk - 1, kMaxTopk, kMaxTopk + 1};
  const int32_t W = (kMaxTopk + 1 + kPageSize - 1) / kPageSize;
  for (int32_t n = 1; n <= 8; ++n) {
    for (int32_t G : {1, 4}) {
      if (G == 4 && n % 4 != 0) continue;  // keep the CPU reference's share modest
      SCOPED_TRACE(::testing::Message() << "n " << n << " G " << G);
      const auto live = int32_t(ends.size()), batch_pad = 3 * live;
      Case c(batch_pad, n, 64, W, live * W + 1, batch_pad + 1);
      c.G = G;
      c.pool.fill_random(rng);
      c.randomize_qw(rng);
      std::vector<int32_t> free_pages = rng.permutation(1, live * W + 1);
      for (int32_t i = 0; i < live; ++i) {
        const int32_t b = 3 * i + 1, end = ends[size_t(i)];
        c.req_slot[size_t(b)] = i + 1;
        c.table.assign(i + 1, end, free_pages);
        for (int32_t j = 0; j < n; ++j) {
          c.row_len[size_t(b * n + j)] = std::max(0, end - (n - 1 - j));
        }
        if (i == 3) c.row_len[size_t(b * n)] = 0;  // a zero-length top-up row
      }
      DeviceCase d(c);
      std::vector<float> got;
      Status st;
      within_seconds(20, [&] { st = d.run(&got); });
      ASSERT_TRUE(st.ok()) << st.to_string();
      expect_matches_reference(c, got);
    }
  }
}

// Determinism: two launches bit-identical; the result does not even depend on G (each logit is
// computed by one warp in a fixed order whichever consumer owns its split).
TEST(PagedLogitsCuda, BitIdenticalRerunsAndAcrossG) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 2);
  Case c = make_case(rng, 6, 4, 64, 12, 132, 4);
  DeviceCase d(c);
  std::vector<float> a, b;
  ASSERT_TRUE(d.run(&a).ok());
  ASSERT_TRUE(d.run(&b).ok());
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  c.G = 3;
  c.schedule.clear();
  DeviceCase d3(c);
  ASSERT_TRUE(d3.run(&b).ok());
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
}

TEST(PagedLogitsCuda, AllZeroLengthsWriteNothing) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 3);
  for (bool checked : {true, false}) {
    ScopedCheckedMode mode(checked);
    Case c(4, 4, 64, 3, 13, 5);
    c.pool.fill_random(rng);
    c.randomize_qw(rng);
    c.req_slot = {1, 0, 2, 0};
    c.G = 132;
    DeviceCase d(c);
    std::vector<float> got;
    within_seconds(10, [&] { ASSERT_TRUE(d.run(&got).ok()); });
    expect_untouched(got);
    EXPECT_TRUE(cuda::take_device_error("test").ok());
  }
}

TEST(PagedLogitsCuda, EmptyBatchIsNoOp) {
  DSA_SKIP_WITHOUT_GPU();
  Case c(0, 1, 16, 2, 2, 1);
  DeviceCase d(c);
  EXPECT_TRUE(paged_logits_cuda(d.p).ok());
}

// ---- Schedule mismatches: errors, never hangs --------------------------------------------------

// A schedule built for n = 1 (4 B_pad one-row requests over the same row_len buffer) launched
// with n = 4: the always-on header check returns FailedPrecondition, writes nothing, and the
// launch ends within a bounded time. Unchecked: the call returns OK without synchronising, the
// kernel still does nothing and the error word carries the failure.
TEST(PagedLogitsCuda, ScheduleForOtherNIsRejectedWithoutHang) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 4);
  Case c = make_case(rng, 8, 4, 64, 6, 16);
  std::vector<int32_t> n1(size_t(logits_schedule_words(16)));
  LogitsScheduleParams sp{c.row_len.data(),  32, 1, 16, c.W, kPageSize, n1.data(),
                          int32_t(n1.size())};
  ASSERT_TRUE(build_logits_schedule_ref(sp).ok());
  c.schedule = n1;
  DeviceCase d(c);
  std::vector<float> got;
  within_seconds(10, [&] {
    Status st = d.run(&got);
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.to_string();
  });
  expect_untouched(got);
  EXPECT_TRUE(cuda::take_device_error("test").ok()) << "the checked launch consumed the word";
  {
    ScopedCheckedMode unchecked(false);
    within_seconds(10, [&] { ASSERT_TRUE(d.run(&got).ok()); });
    expect_untouched(got);
    EXPECT_EQ(cuda::take_device_error("test").code(), StatusCode::kFailedPrecondition);
  }
  // Other header words: magic, version, G, S_tok, W.
  for (int word : {0, 1, 4, 5, 6}) {
    c.schedule.clear();
    c.build_schedule(c.row_len);
    c.schedule[size_t(word)] += 1;
    DeviceCase e(c);
    Status st;
    within_seconds(10, [&] { st = e.run(&got); });
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << word << ": " << st.to_string();
    expect_untouched(got);
  }
}

// Host simulation of every consumer's walk (the same DSA_HD loop): does §3c's checked rule fire?
bool any_walk_off_end(const std::vector<int32_t>& schedule, const Case& c) {
  bool off = false;
  for (int32_t i = 0; i < c.G; ++i) {
    off |= !for_each_schedule_split(schedule.data(), i, c.row_len.data(), c.batch_pad, c.n, c.W,
                                    kPageSize, [](int32_t, int32_t, int32_t, int32_t) {});
  }
  return off;
}

// Headers that pass (words 0..8 patched to the launch, len_hash included) over entries of another
// layout or plain garbage: the consumer loop still terminates. Checked mode reports exactly when
// a walk stops off its end entry; unchecked returns OK.
TEST(PagedLogitsCuda, WrongEntriesTerminate) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 5);
  Case c = make_case(rng, 8, 4, 64, 6, 16);
  std::vector<int32_t> n1(size_t(logits_schedule_words(16)));
  LogitsScheduleParams sp{c.row_len.data(),  32, 1, 16, c.W, kPageSize, n1.data(),
                          int32_t(n1.size())};
  ASSERT_TRUE(build_logits_schedule_ref(sp).ok());
  n1[kScheduleWordBatchPad] = c.batch_pad;  // len_hash is equal: same buffer, same row count
  n1[kScheduleWordRowsPerRequest] = c.n;
  std::vector<int32_t> garbage = n1;
  for (size_t i = kScheduleHeaderWords; i < garbage.size(); ++i) {
    garbage[i] = int32_t(rng.randint(-100, 100));
  }
  garbage[garbage.size() - 2] = int32_t(rng.randint(INT32_MIN, INT32_MAX));
  for (const std::vector<int32_t>* schedule : {&n1, &garbage}) {
    c.schedule = *schedule;
    const bool off = any_walk_off_end(c.schedule, c);
    DeviceCase d(c);
    std::vector<float> got;
    within_seconds(10, [&] {
      Status st = d.run(&got);
      EXPECT_EQ(st.code(), off ? StatusCode::kFailedPrecondition : StatusCode::kOk)
          << st.to_string();
    });
    ScopedCheckedMode unchecked(false);
    within_seconds(10, [&] { EXPECT_TRUE(d.run(&got).ok()); });
    EXPECT_TRUE(cuda::take_device_error("test").ok()) << "unchecked: no data checks reported";
  }
}

// ---- Checked-mode device validation and unchecked neutralisation -------------------------------

// Each broken rule alone: the GPU returns the reference's code (OutOfRange for data,
// FailedPrecondition for the hash), and a following valid launch is clean again.
TEST(PagedLogitsCuda, CheckedModeErrorsMatchReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 6);
  enum Rule { kNegativeLength, kLengthAboveWP, kPageOutOfPool, kPageZero, kReqSlot, kHash };
  for (Rule rule : {kNegativeLength, kLengthAboveWP, kPageOutOfPool, kPageZero, kReqSlot, kHash}) {
    SCOPED_TRACE(::testing::Message() << "rule " << int(rule));
    Case c = make_case(rng, 3, 2, 32, 4, 8);
    switch (rule) {
      case kNegativeLength:
        c.row_len[3] = -4;
        break;
      case kLengthAboveWP:
        c.row_len[1] = c.W * kPageSize + 1;
        break;
      case kPageOutOfPool:
        c.table.at(c.req_slot[0], 2) = 1000;
        break;
      case kPageZero:
        c.table.at(c.req_slot[0], 1) = 0;
        break;
      case kReqSlot:
        c.req_slot[2] = 77;
        break;
      case kHash: {
        std::vector<int32_t> other = c.row_len;
        other[1] -= 1;
        c.build_schedule(other);  // same header, other len_hash
        break;
      }
    }
    const Status ref = paged_logits_ref(c.params());
    ASSERT_FALSE(ref.ok());
    DeviceCase d(c);
    std::vector<float> got;
    Status st;
    within_seconds(10, [&] { st = d.run(&got); });
    EXPECT_EQ(st.code(), ref.code()) << "gpu: " << st.to_string() << " ref: " << ref.to_string();
    EXPECT_TRUE(cuda::take_device_error("test").ok()) << "the error word was cleared";
  }
}

// Unchecked: lengths above W P clamped, negative lengths empty, out-of-pool page ids read the
// zero page, a req_slot outside the table reads row 0 — as the reference does, with no error.
TEST(PagedLogitsCuda, UncheckedNeutralisesLikeReference) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed() + 7);
  Case c(3, 2, 16, 2, 4, 2);
  c.pool.fill_random(rng);
  c.randomize_qw(rng);
  c.table.at(1, 0) = 2;
  c.table.at(1, 1) = 99;
  c.req_slot = {1, 7, 1};
  c.row_len = {100000, 5, 10, 3, -4, 70};
  DeviceCase d(c);
  std::vector<float> got;
  within_seconds(10, [&] { ASSERT_TRUE(d.run(&got).ok()); });
  expect_matches_reference(c, got);
  EXPECT_TRUE(cuda::take_device_error("test").ok());
}

TEST(PagedLogitsCuda, HostChecksRejectBeforeLaunch) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 8);
  Case c = make_case(rng, 2, 1, 16, 2, 4);
  DeviceCase d(c);
  testing::expect_rejects(
      d.p, paged_logits_cuda,
      {{"num_heads", [](auto& p) { p.num_heads = 8; }, StatusCode::kInvalidArgument},
       {"schedule_words", [](auto& p) { p.schedule_words += 2; }, StatusCode::kInvalidArgument},
       {"q alignment", [](auto& p) { p.q += 1; }, StatusCode::kInvalidArgument}});
}

}  // namespace
}  // namespace dsa::kernels
