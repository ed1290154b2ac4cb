#include "dsa/kernels/ragged_logits/ragged_logits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/gather/gather.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/ragged_logits/ragged_logits_check.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

constexpr float kSentinel = -777.f;

struct Case {
  int32_t T, S, heads;
  int64_t ld;
  std::vector<uint8_t> q, k8;
  std::vector<float> w, kscale, logits;
  std::vector<int32_t> ks, ke;
  Case(int32_t T, int32_t S, int32_t heads, int64_t ld)
      : T(T),
        S(S),
        heads(heads),
        ld(ld),
        q(size_t(T) * heads * 128, 0),
        k8(size_t(S) * 128, 0),
        w(size_t(T) * heads, 0.f),
        kscale(size_t(S), 0.f),
        logits(size_t(T) * ld, kSentinel),
        ks(size_t(T), 0),
        ke(size_t(T), 0) {}
  void randomize(Rng& rng) {
    q = rng.e4m3_vector(q.size());
    k8 = rng.e4m3_vector(k8.size());
    for (auto& v : w) v = rng.normal(0.f, 0.1f);
    for (auto& v : kscale) v = std::ldexp(1.f, int(rng.randint(-10, 1)));
  }
  RaggedLogitsParams params() {
    return {q.data(), w.data(), k8.data(), kscale.data(), ks.data(), ke.data(),          T,
            S,        heads,    128,       logits.data(), ld,        int64_t{T} * ld * 4};
  }
  float at(int64_t t, int64_t j) const { return logits[size_t(t * ld + j)]; }
};

// Hand-computed (same keys as the paged hand case, here in gathered rows 1 and 2):
//  key 1 = [0.5, 1.5] scale 0.25, key 2 = [-2, 0.25] scale 4.
//  Row 0: head 0 q = [1, 2] w 2; head 1 q = [0, 1] w -0.5; ks = 1, ke = 3:
//   column 0 (key 1) = 0.25 (2 * 3.5 - 0.5 * 1.5) = 1.5625, column 1 (key 2) = 4 (0 - 0.125) =
//   -0.5.
//  Row 1: ks = ke = 2: empty.
TEST(RaggedLogits, HandComputedCompressedColumns) {
  Case c(2, 4, 16, 4);
  c.k8[128 + 0] = 0x30, c.k8[128 + 1] = 0x3C, c.kscale[1] = 0.25f;
  c.k8[256 + 0] = 0xC0, c.k8[256 + 1] = 0x28, c.kscale[2] = 4.f;
  c.k8[0] = 0x48, c.kscale[0] = 1.f;  // key 0 is outside row 0's range
  c.q[0] = 0x38, c.q[1] = 0x40, c.q[128 + 1] = 0x38;
  c.w[0] = 2.f, c.w[1] = -0.5f;
  c.ks = {1, 2};
  c.ke = {3, 2};
  ASSERT_TRUE(ragged_logits_ref(c.params()).ok());
  EXPECT_EQ(c.at(0, 0), 1.5625f);
  EXPECT_EQ(c.at(0, 1), -0.5f);
  EXPECT_TRUE(std::isnan(c.at(0, 2)));
  EXPECT_TRUE(std::isnan(c.at(0, 3)));
  for (int j = 0; j < 4; ++j) EXPECT_TRUE(std::isnan(c.at(1, j))) << "empty row, poisoned";
  std::vector<float> bound(c.logits.size(), -1.f);
  ASSERT_TRUE(ragged_logits_bounds(c.params(), bound.data()).ok());
  EXPECT_EQ(bound[0], 1.9375f / 256);
  EXPECT_EQ(bound[2], 0.f);
}

TEST(RaggedLogits, RandomMatchesIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, heads, ctx] : {std::tuple{1, 16, 1}, {5, 32, 200}, {9, 64, 517}}) {
    Status st = check_ragged_logits(ragged_logits_ref, tokens, heads, ctx, seed + uint64_t(ctx));
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
}

// §3d edge rule: the gather copies the §2.2 bytes, so ragged logits over gathered keys are the
// same function as paged logits over the pool: bit-identical columns [0, row_len).
TEST(RaggedLogits, GatheredKeysEqualPagedLogits) {
  Rng rng(testing::test_seed());
  const int32_t batch = 3, n = 3, W = 5, num_pages = batch * W + 1, heads = 32;
  testing::IndexerPoolBuffer pool(num_pages);
  pool.fill_random(rng);
  testing::PageTableBuffer table(batch + 1, W, num_pages);
  std::vector<int32_t> free_pages = rng.permutation(1, num_pages);
  std::vector<int32_t> req_slot = {3, 1, 2}, row_len(batch * n), cu_kv = {0};
  for (int32_t b = 0; b < batch; ++b) {
    const auto C = int32_t(rng.randint(0, W * kPageSize - n));
    table.assign(req_slot[size_t(b)], C + n, free_pages);
    for (int32_t j = 0; j < n; ++j) row_len[size_t(b * n + j)] = C + j + 1;
    cu_kv.push_back(cu_kv.back() + C + n);
  }
  const int32_t S = cu_kv.back(), rows = batch * n;
  std::vector<uint8_t> q = rng.e4m3_vector(size_t(rows) * heads * 128);
  std::vector<float> w(size_t(rows) * heads);
  for (auto& v : w) v = rng.normal(0.f, 0.1f);

  std::vector<int32_t> schedule(size_t(logits_schedule_words(8)));
  LogitsScheduleParams sp{row_len.data(),          batch, n, 8, W, kPageSize, schedule.data(),
                          int32_t(schedule.size())};
  ASSERT_TRUE(build_logits_schedule_ref(sp).ok());
  const int64_t paged_ld = 512;
  std::vector<float> paged(size_t(rows) * paged_ld);
  PagedLogitsParams pp;
  pp.q = q.data(), pp.w = w.data(), pp.row_len = row_len.data(), pp.req_slot = req_slot.data();
  pp.page_table = table.table(), pp.pool = pool.pool();
  pp.schedule = schedule.data(), pp.schedule_words = int32_t(schedule.size());
  pp.batch_pad = batch, pp.rows_per_request = n, pp.num_heads = heads, pp.num_consumers = 8;
  pp.logits = paged.data(), pp.logits_ld = paged_ld, pp.logits_rows = rows;
  ASSERT_TRUE(paged_logits_ref(pp).ok());

  std::vector<uint8_t> k8(size_t(S) * 128);
  std::vector<float> kscale(static_cast<size_t>(S));
  IndexerGatherParams gp{req_slot.data(), cu_kv.data(), table.table(), pool.pool(),
                         batch,           k8.data(),    kscale.data(), S};
  ASSERT_TRUE(indexer_gather_ref(gp).ok());
  std::vector<int32_t> ks(static_cast<size_t>(rows)), ke(static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) {
    ks[size_t(r)] = cu_kv[size_t(r / n)];
    ke[size_t(r)] = ks[size_t(r)] + row_len[size_t(r)];
  }
  const int64_t ragged_ld = W * kPageSize;  // >= max row length, multiple of 4
  std::vector<float> ragged(size_t(rows) * ragged_ld);
  RaggedLogitsParams rp{q.data(),
                        w.data(),
                        k8.data(),
                        kscale.data(),
                        ks.data(),
                        ke.data(),
                        rows,
                        S,
                        heads,
                        128,
                        ragged.data(),
                        ragged_ld,
                        int64_t{rows} * ragged_ld * 4};
  ASSERT_TRUE(ragged_logits_ref(rp).ok());
  for (int32_t r = 0; r < rows; ++r) {
    ASSERT_EQ(std::memcmp(&paged[size_t(r) * paged_ld], &ragged[size_t(r) * ragged_ld],
                          size_t(row_len[size_t(r)]) * 4),
              0)
        << "row " << r;
  }
}

TEST(RaggedLogits, ZeroTokensIsNoOp) {
  Case c(0, 3, 16, 4);
  ASSERT_TRUE(ragged_logits_ref(c.params()).ok());
}

// Unchecked: ks clamped into [0, S], ke into [ks, min(S, ks + ld)]; columns past the row are
// left untouched. Each clamped row equals the in-contract row it becomes.
TEST(RaggedLogits, UncheckedClampsKsKe) {
  Rng rng(testing::test_seed());
  Case bad(4, 10, 16, 4), good(4, 10, 16, 4);
  bad.randomize(rng);
  good.q = bad.q, good.k8 = bad.k8, good.w = bad.w, good.kscale = bad.kscale;
  bad.ks = {-3, 8, 2, 12};
  bad.ke = {2, 15, 9, 13};
  good.ks = {0, 8, 2, 10};
  good.ke = {2, 10, 6, 10};
  ASSERT_TRUE(ragged_logits_ref(good.params()).ok());
  ScopedCheckedMode unchecked(false);
  ASSERT_TRUE(ragged_logits_ref(bad.params()).ok());
  for (int t = 0; t < 4; ++t) {
    const int len = good.ke[size_t(t)] - good.ks[size_t(t)];
    for (int j = 0; j < 4; ++j) {
      if (j < len) {
        EXPECT_EQ(bad.at(t, j), good.at(t, j)) << t << "," << j;
      } else {
        EXPECT_EQ(bad.at(t, j), kSentinel) << t << "," << j;
      }
    }
  }
}

// ---- Rejections -----------------------------------------------------------------------------

class RaggedLogitsRejects : public ::testing::Test {
 protected:
  RaggedLogitsRejects() : c(3, 6, 16, 4) {
    Rng rng(testing::test_seed());
    c.randomize(rng);
    c.ks = {0, 0, 4};
    c.ke = {1, 4, 6};
  }
  void expect(StatusCode code, const RaggedLogitsParams& p, const std::string& needle) {
    Status st = ragged_logits_ref(p);
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
    for (float v : c.logits) ASSERT_EQ(v, kSentinel) << "a rejected call must not write";
  }
  Case c;
};

TEST_F(RaggedLogitsRejects, Heads) {
  auto p = c.params();
  p.num_heads = 128;
  expect(StatusCode::kInvalidArgument, p, "num_heads = 128: must be 16, 32 or 64");
}
TEST_F(RaggedLogitsRejects, HeadDim) {
  auto p = c.params();
  p.head_dim = 64;
  expect(StatusCode::kInvalidArgument, p, "head_dim = 64");
}
TEST_F(RaggedLogitsRejects, LdNotMultipleOf4) {
  auto p = c.params();
  p.logits_ld = 3;
  expect(StatusCode::kInvalidArgument, p, "logits_ld = 3");
}
TEST_F(RaggedLogitsRejects, NegativeTokens) {
  auto p = c.params();
  p.num_tokens = -1;
  expect(StatusCode::kInvalidArgument, p, "num_tokens = -1");
}
TEST_F(RaggedLogitsRejects, NullWeights) {
  auto p = c.params();
  p.w = nullptr;
  expect(StatusCode::kInvalidArgument, p, "w is null");
}
TEST_F(RaggedLogitsRejects, WorkspaceTooSmall) {
  auto p = c.params();
  p.workspace_bytes = 47;
  expect(StatusCode::kResourceExhausted, p, "needs 48 bytes: exceeds workspace_bytes = 47");
}
TEST_F(RaggedLogitsRejects, NegativeKs) {
  c.ks[1] = -4;
  expect(StatusCode::kOutOfRange, c.params(), "ks[1] = -4: must be in [0, S = 6]");
}
TEST_F(RaggedLogitsRejects, KsBeyondS) {
  c.ks[2] = 7;
  c.ke[2] = 7;
  expect(StatusCode::kOutOfRange, c.params(), "ks[2] = 7");
}
TEST_F(RaggedLogitsRejects, KeBelowKs) {
  c.ke[2] = 3;
  expect(StatusCode::kOutOfRange, c.params(), "ke[2] = 3: must be in [ks = 4, S = 6]");
}
TEST_F(RaggedLogitsRejects, KeBeyondS) {
  c.ke[2] = 7;
  expect(StatusCode::kOutOfRange, c.params(), "ke[2] = 7");
}
TEST_F(RaggedLogitsRejects, RowLongerThanLd) {
  c.ke[1] = 5;
  expect(StatusCode::kOutOfRange, c.params(), "ke[1] - ks[1] = 5: must be <= logits_ld = 4");
}

}  // namespace
}  // namespace dsa::kernels
