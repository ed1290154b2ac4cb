#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "dsa/kernels/sparse_mla/sparse_mla.h"
#include "dsa/kernels/sparse_mla/sparse_mla_check.h"
#include "dsa/kernels/sparse_mla/sparse_mla_test_util.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

// One request of kv_len tokens in a randomly paged bf16 pool, and T new tokens after a cached
// prefix: token t sits at position cached + t and sees [0, cached + t].
struct PrefillCase {
  testing::LatentPoolBuffer pool;
  int32_t cached, tokens, heads, topk, kv_len;
  std::vector<int32_t> slot_of;  // position -> slot
  std::vector<bf16> gathered;    // [kv_len, 576], §3h order
  std::vector<bf16> q;
  std::vector<int32_t> local, global, topk_len;  // [T, K] positions / slots, [T]
  std::vector<bf16> out;
  std::vector<float> lse, max_logit;

  PrefillCase(int32_t cached_, int32_t tokens_, int32_t heads_, int32_t topk_, Rng& rng)
      : pool(2 + (cached_ + tokens_ + 63) / 64, LatentFormat::kBf16),
        cached(cached_),
        tokens(tokens_),
        heads(heads_),
        topk(topk_),
        kv_len(cached_ + tokens_) {
    pool.fill_random(rng);
    std::vector<int32_t> pages = rng.permutation(1, pool.pool().num_pages);
    for (int32_t p = 0; p < kv_len; ++p) {
      slot_of.push_back(pages[p / kPageSize] * kPageSize + p % kPageSize);
      const bf16* row =
          reinterpret_cast<const bf16*>(pool.bytes().data()) + size_t(slot_of[p]) * kQkDim;
      gathered.insert(gathered.end(), row, row + kQkDim);
    }
    q = rng.bf16_vector(size_t(tokens) * heads * kQkDim, 0.5f);
    // Trivial top-k rows (row_len <= K): positions 0..row_len-1 in order, then -1.
    for (int32_t t = 0; t < tokens; ++t) {
      int32_t len = std::min(cached + t + 1, topk);
      topk_len.push_back(len);
      for (int32_t i = 0; i < topk; ++i) {
        local.push_back(i < len ? i : -1);
        global.push_back(i < len ? slot_of[i] : -1);
      }
    }
    poison();
  }
  void poison() {
    out.assign(size_t(tokens) * heads * kVDim, test::kPoisonBf16);
    lse.assign(size_t(tokens) * heads, NAN);
    max_logit.assign(size_t(tokens) * heads, NAN);
  }
  SparseMlaPrefillParams source2() {
    SparseMlaPrefillParams p;
    p.q = q.data(), p.kv = gathered.data(), p.num_kv = kv_len;
    p.kv_source = SparseMlaKvSource::kGathered, p.indices = local.data();
    p.topk_len = topk_len.data(), p.tokens = tokens, p.num_heads = heads, p.topk = topk;
    p.sm_scale = kV32SmScale, p.out = out.data(), p.lse = lse.data();
    p.max_logit = max_logit.data();
    return p;
  }
  SparseMlaPrefillParams source1() {
    SparseMlaPrefillParams p = source2();
    p.kv = reinterpret_cast<const bf16*>(pool.bytes().data());
    p.num_kv = pool.pool().num_pages * kPageSize;
    p.kv_source = SparseMlaKvSource::kFlatPool, p.indices = global.data();
    return p;
  }
  // Dense causal attention over the gathered rows: row t sees positions [0, cached + t].
  DenseMlaResult dense() {
    std::vector<float> kv(gathered.size());
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = bf16_to_float(gathered[i]);
    std::vector<int32_t> begin(tokens, 0), end;
    for (int32_t t = 0; t < tokens; ++t) end.push_back(cached + t + 1);
    return dense_mla_attention(q.data(), tokens, heads, kv, begin, end, kV32SmScale);
  }
};

// Hand-sized: two cached tokens and two new ones, H = 16; token t attends t + 3 keys.
TEST(SparseMlaPrefill, CausalDenseEqualsSparseSmall) {
  Rng rng(testing::test_seed());
  PrefillCase c(2, 2, 16, 64, rng);
  ASSERT_TRUE(sparse_mla_prefill_ref(c.source2()).ok());
  Status s = compare_with_dense(c.dense(), c.out.data(), c.lse.data(), c.max_logit.data());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// Source 1 (flat pool, global slots) and source 2 (gathered rows, local indices) read the same
// values in the same order: bit-identical, and both equal dense causal attention.
TEST(SparseMlaPrefill, Source1EqualsSource2AndDenseCausal) {
  Rng rng(testing::test_seed());
  PrefillCase c(70, 60, 32, 192, rng);
  ASSERT_TRUE(sparse_mla_prefill_ref(c.source1()).ok());
  std::vector<bf16> out1 = c.out;
  std::vector<float> lse1 = c.lse, max1 = c.max_logit;
  c.poison();
  ASSERT_TRUE(sparse_mla_prefill_ref(c.source2()).ok());
  test::expect_same_bits(out1, c.out);
  EXPECT_EQ(std::memcmp(lse1.data(), c.lse.data(), lse1.size() * 4), 0);
  EXPECT_EQ(std::memcmp(max1.data(), c.max_logit.data(), max1.size() * 4), 0);
  Status s = compare_with_dense(c.dense(), c.out.data(), c.lse.data(), c.max_logit.data());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// max_logit = max_i z_i: dense's max over the row; with a single key it is that key's z, and
// lse = z as well. Passing no max_logit buffer is legal and changes nothing else.
TEST(SparseMlaPrefill, MaxLogitIsTheLargestScoreAndOptional) {
  Rng rng(testing::test_seed());
  PrefillCase c(0, 3, 16, 64, rng);
  ASSERT_TRUE(sparse_mla_prefill_ref(c.source2()).ok());
  for (int32_t h = 0; h < 16; ++h) EXPECT_EQ(c.max_logit[h], c.lse[h]) << "token 0 has one key";
  for (int32_t i = 16; i < 48; ++i) EXPECT_LT(c.max_logit[i], c.lse[i]);
  std::vector<bf16> out = c.out;
  std::vector<float> lse = c.lse;
  c.poison();
  auto p = c.source2();
  p.max_logit = nullptr;
  ASSERT_TRUE(sparse_mla_prefill_ref(p).ok());
  test::expect_same_bits(out, c.out);
  EXPECT_TRUE(lse == c.lse);
  for (float m : c.max_logit) EXPECT_TRUE(std::isnan(m)) << "max_logit written though null";
}

// Empty rows in prefill: out 0, lse +inf, max_logit -inf.
TEST(SparseMlaPrefill, EmptyRowsGiveZeroInfAndMinusInf) {
  Rng rng(testing::test_seed());
  PrefillCase c(5, 2, 16, 64, rng);
  c.topk_len[0] = 0;
  for (int32_t i = 0; i < 64; ++i) c.local[64 + i] = -1;
  ASSERT_TRUE(sparse_mla_prefill_ref(c.source2()).ok());
  for (int32_t i = 0; i < 2 * 16 * kVDim; ++i) ASSERT_EQ(c.out[i].bits, 0) << i;
  for (int32_t i = 0; i < 32; ++i) {
    EXPECT_EQ(c.lse[i], INFINITY);
    EXPECT_EQ(c.max_logit[i], -INFINITY);
  }
  auto bounds = sparse_mla_prefill_bounds(c.source2());
  ASSERT_TRUE(bounds.ok());
  for (float b : bounds->out) ASSERT_EQ(b, 0.f);
}

// `dsa check` entry: random cached prefixes; tokens > K makes late rows attend a random
// K-subset of their causal window.
TEST(SparseMlaPrefill, CheckFunctionAtSeveralShapes) {
  const uint64_t seed = testing::test_seed();
  EXPECT_TRUE(check_sparse_mla_prefill(sparse_mla_prefill_ref, 40, 16, 64, seed).ok());
  EXPECT_TRUE(check_sparse_mla_prefill(sparse_mla_prefill_ref, 100, 16, 64, seed + 1).ok());
  EXPECT_TRUE(check_sparse_mla_prefill(sparse_mla_prefill_ref, 3, 128, 256, seed + 2).ok());
  EXPECT_EQ(check_sparse_mla_prefill(sparse_mla_prefill_ref, 4, 16, 96, seed).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsa::kernels
