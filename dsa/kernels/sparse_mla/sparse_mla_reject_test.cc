#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/sparse_mla/sparse_mla.h"
#include "dsa/kernels/sparse_mla/sparse_mla_test_util.h"

namespace dsa::kernels {
namespace {

using test::DecodeCase;
using testing::Rng;

class SparseMlaDecodeRejects : public ::testing::Test {
 protected:
  SparseMlaDecodeRejects() : rng(testing::test_seed()), c(3, LatentFormat::kBf16, 2, 16, 64, rng) {
    for (int32_t i = 0; i < 10; ++i) c.indices[i] = c.indices[64 + i] = kPageSize + 3 * i;
    c.topk_len = {10, 10};
  }
  void expect(StatusCode code, const SparseMlaDecodeParams& p, const std::string& needle) {
    Status s = sparse_mla_decode_ref(p);
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
    for (bf16 v : c.out) ASSERT_EQ(v.bits, test::kPoisonBf16.bits) << "a rejected call wrote out";
    for (float v : c.lse) ASSERT_TRUE(std::isnan(v)) << "a rejected call wrote lse";
  }
  Rng rng;
  DecodeCase c;
};

TEST_F(SparseMlaDecodeRejects, NegativeRows) {
  auto p = c.params();
  p.rows = -1;
  expect(StatusCode::kInvalidArgument, p, "rows = -1");
}
TEST_F(SparseMlaDecodeRejects, HeadsNotInSet) {
  for (int32_t h : {0, 8, 48, 256}) {
    auto p = c.params();
    p.num_heads = h;
    expect(StatusCode::kInvalidArgument, p, "num_heads = " + std::to_string(h));
  }
}
TEST_F(SparseMlaDecodeRejects, TopkNotMultipleOf64OrOutOfRange) {
  for (int32_t k : {0, 32, 100, 2112, 4096, -64}) {
    auto p = c.params();
    p.topk = k;
    expect(StatusCode::kInvalidArgument, p, "topk = " + std::to_string(k));
  }
}
TEST_F(SparseMlaDecodeRejects, SmScaleNotFinitePositive) {
  for (auto [v, text] : {std::pair{0.f, "sm_scale = 0"},
                         {-0.5f, "sm_scale = -0.5"},
                         {NAN, "sm_scale = nan"},
                         {INFINITY, "sm_scale = inf"}}) {
    auto p = c.params();
    p.sm_scale = v;
    expect(StatusCode::kInvalidArgument, p, text);
  }
}
TEST_F(SparseMlaDecodeRejects, NullPointers) {
  auto p = c.params();
  p.q = nullptr;
  expect(StatusCode::kInvalidArgument, p, "q is null");
  p = c.params(), p.indices = nullptr;
  expect(StatusCode::kInvalidArgument, p, "indices is null");
  p = c.params(), p.out = nullptr;
  expect(StatusCode::kInvalidArgument, p, "out is null");
  p = c.params(), p.lse = nullptr;
  expect(StatusCode::kInvalidArgument, p, "lse is null");
  p = c.params(), p.cache.data = nullptr;
  expect(StatusCode::kInvalidArgument, p, "cache.data is null");
}
TEST_F(SparseMlaDecodeRejects, PoolGeometry) {
  auto p = c.params();
  p.cache.format = static_cast<LatentFormat>(9);
  expect(StatusCode::kInvalidArgument, p, "cache.format = 9");
  p = c.params(), p.cache.page_size = 128;
  expect(StatusCode::kInvalidArgument, p, "cache.page_size = 128");
  p = c.params(), p.cache.num_pages = 0;
  expect(StatusCode::kInvalidArgument, p, "cache.num_pages = 0");
}
TEST_F(SparseMlaDecodeRejects, IndexInReservedPage) {
  c.indices[64 + 4] = 5;
  expect(StatusCode::kOutOfRange, c.params(), "indices[1][4] = 5: must be -1 or in [P, num_pages");
}
TEST_F(SparseMlaDecodeRejects, IndexBeyondPool) {
  c.indices[2] = 3 * kPageSize;
  expect(StatusCode::kOutOfRange, c.params(), "indices[0][2] = 192");
}
TEST_F(SparseMlaDecodeRejects, NegativeIndexOtherThanMinusOne) {
  c.indices[9] = -2;
  expect(StatusCode::kOutOfRange, c.params(), "indices[0][9] = -2");
}
TEST_F(SparseMlaDecodeRejects, TopkLenOutOfRange) {
  c.topk_len[1] = -1;
  expect(StatusCode::kOutOfRange, c.params(), "topk_len[1] = -1: must be in [0, K = 64]");
  c.topk_len[1] = 65;
  expect(StatusCode::kOutOfRange, c.params(), "topk_len[1] = 65");
}
// Entries at or after topk_len are outside A_r and never read, so they are not checked.
TEST_F(SparseMlaDecodeRejects, EntriesPastTopkLenAreNotChecked) {
  c.indices[20] = 7;
  EXPECT_TRUE(sparse_mla_decode_ref(c.params()).ok());
  c.pass_topk_len = false;  // now index 20 is inside the row
  c.poison();
  expect(StatusCode::kOutOfRange, c.params(), "indices[0][20] = 7");
}

// R = 0 needs no buffers at all (padded-out forwards); H, K and sm_scale are still checked.
TEST(SparseMlaDecodeZeroRows, IsANoOpWithoutPointers) {
  SparseMlaDecodeParams p;
  p.num_heads = 128, p.topk = 2048, p.sm_scale = kV32SmScale, p.cache.num_pages = 1;
  EXPECT_TRUE(sparse_mla_decode_ref(p).ok());
  p.topk = 2047;
  EXPECT_EQ(sparse_mla_decode_ref(p).code(), StatusCode::kInvalidArgument);
  SparseMlaPrefillParams pp;
  pp.num_heads = 16, pp.topk = 64, pp.sm_scale = 1e-3f;
  EXPECT_TRUE(sparse_mla_prefill_ref(pp).ok());
}

// Unchecked mode: bad indices act as -1, topk_len is clamped into [0, K]; the result equals the
// sanitised call bit for bit.
TEST(SparseMlaDecodeUnchecked, NeutralisesBadIndicesAndLengths) {
  Rng rng(testing::test_seed());
  DecodeCase bad(3, LatentFormat::kFp8_656, 3, 16, 64, rng);
  for (int32_t i = 0; i < 3 * 64; ++i) bad.indices[i] = kPageSize + int32_t(rng.randint(0, 127));
  DecodeCase good = bad;
  bad.indices[3] = 5, bad.indices[7] = -9, bad.indices[64 + 1] = 3 * kPageSize,
  bad.indices[8] = INT32_MIN;
  good.indices[3] = good.indices[7] = good.indices[64 + 1] = good.indices[8] = -1;
  bad.topk_len = {64, -4, 1000};
  good.topk_len = {64, 0, 64};
  {
    ScopedCheckedMode unchecked(false);
    ASSERT_TRUE(sparse_mla_decode_ref(bad.params()).ok());
  }
  ASSERT_TRUE(sparse_mla_decode_ref(good.params()).ok());
  test::expect_same_bits(bad.out, good.out);
  EXPECT_TRUE(bad.lse == good.lse);
  EXPECT_EQ(bad.lse[16], INFINITY) << "negative topk_len must give an empty row";
}

// Prefill's own rules: S_kv, the source flag, the kv pointer, and each source's index range.
class SparseMlaPrefillRejects : public ::testing::Test {
 protected:
  SparseMlaPrefillRejects() {
    Rng rng(testing::test_seed());
    q = rng.bf16_vector(16 * kQkDim);
    kv = rng.bf16_vector(128 * kQkDim);
    indices.assign(64, -1);
    indices[0] = 70, indices[1] = 100;
    p.q = q.data(), p.kv = kv.data(), p.num_kv = 128, p.kv_source = SparseMlaKvSource::kFlatPool;
    p.indices = indices.data(), p.tokens = 1, p.num_heads = 16, p.topk = 64;
    p.sm_scale = kV32SmScale, p.out = out.data(), p.lse = lse.data();
  }
  void expect(StatusCode code, const SparseMlaPrefillParams& params, const std::string& needle) {
    Status s = sparse_mla_prefill_ref(params);
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  }
  std::vector<bf16> q, kv, out = std::vector<bf16>(16 * kVDim);
  std::vector<float> lse = std::vector<float>(16);
  std::vector<int32_t> indices;
  SparseMlaPrefillParams p;
};

TEST_F(SparseMlaPrefillRejects, ValidBaselinePasses) {
  EXPECT_TRUE(sparse_mla_prefill_ref(p).ok());
}
TEST_F(SparseMlaPrefillRejects, NegativeTokens) {
  p.tokens = -2;
  expect(StatusCode::kInvalidArgument, p, "sparse_mla_prefill: rows = -2");
}
TEST_F(SparseMlaPrefillRejects, HeadsAndTopk) {
  p.num_heads = 24;
  expect(StatusCode::kInvalidArgument, p, "num_heads = 24");
  p.num_heads = 16, p.topk = 65;
  expect(StatusCode::kInvalidArgument, p, "topk = 65");
}
TEST_F(SparseMlaPrefillRejects, FlatPoolNumKvNotWholePages) {
  p.num_kv = 100;
  expect(StatusCode::kInvalidArgument, p, "num_kv = 100: must be a positive multiple of P");
  p.num_kv = 0;
  expect(StatusCode::kInvalidArgument, p, "num_kv = 0");
}
TEST_F(SparseMlaPrefillRejects, GatheredNegativeNumKv) {
  p.kv_source = SparseMlaKvSource::kGathered, p.num_kv = -1;
  expect(StatusCode::kInvalidArgument, p, "num_kv = -1");
}
TEST_F(SparseMlaPrefillRejects, UnknownSource) {
  p.kv_source = static_cast<SparseMlaKvSource>(3);
  expect(StatusCode::kInvalidArgument, p, "kv_source = 3");
}
TEST_F(SparseMlaPrefillRejects, NullKv) {
  p.kv = nullptr;
  expect(StatusCode::kInvalidArgument, p, "kv is null");
}
TEST_F(SparseMlaPrefillRejects, FlatPoolIndexInPageZero) {
  indices[1] = 63;
  expect(StatusCode::kOutOfRange, p, "indices[0][1] = 63: must be -1 or in [P, S_kv) = [64, 128)");
}
TEST_F(SparseMlaPrefillRejects, GatheredIndexAtOrPastSkv) {
  p.kv_source = SparseMlaKvSource::kGathered, p.num_kv = 40;
  indices[0] = 3, indices[1] = 40;
  expect(StatusCode::kOutOfRange, p, "indices[0][1] = 40: must be -1 or in [0, S_kv) = [0, 40)");
}
TEST_F(SparseMlaPrefillRejects, TopkLenOutOfRange) {
  std::vector<int32_t> len = {-3};
  p.topk_len = len.data();
  expect(StatusCode::kOutOfRange, p, "topk_len[0] = -3");
}
// Unchecked: an index >= S_kv (or in page 0 for source 1) is invalid, i.e. skipped.
TEST_F(SparseMlaPrefillRejects, UncheckedTreatsOutOfRangeIndicesAsInvalid) {
  ASSERT_TRUE(sparse_mla_prefill_ref(p).ok());
  std::vector<bf16> want = out;
  std::vector<float> want_lse = lse;
  indices[2] = 128, indices[3] = 2, indices[4] = -7;
  ScopedCheckedMode unchecked(false);
  ASSERT_TRUE(sparse_mla_prefill_ref(p).ok());
  test::expect_same_bits(want, out);
  EXPECT_TRUE(want_lse == lse);
}

}  // namespace
}  // namespace dsa::kernels
