#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "dsa/kernels/sparse_mla/sparse_mla.h"
#include "dsa/kernels/sparse_mla/sparse_mla_check.h"
#include "dsa/kernels/sparse_mla/sparse_mla_row.h"
#include "dsa/kernels/sparse_mla/sparse_mla_test_util.h"

namespace dsa::kernels {
namespace {

using test::DecodeCase;
using testing::Rng;

void set_row(DecodeCase& c, int32_t slot, const std::vector<std::pair<int, float>>& values) {
  bf16* row = reinterpret_cast<bf16*>(c.pool.bytes().data() + size_t(slot) * kBf16LatentBytes);
  std::fill(row, row + kQkDim, float_to_bf16(0.f));
  for (auto [t, v] : values) row[t] = float_to_bf16(v);
}

// Two keys A (slot 67) and B (slot 74), sm_scale 0.5, only dims 0, 1 and 515 (a rope dim) set:
//   A = [c0 1, c1 2, pe3 0.25], B = [c0 3, c1 -1].
// head 0: q = [1, 0.5, pe3 4] -> z_A = 0.5 (1 + 1 + 1) = 1.5, z_B = 0.5 (3 - 0.5) = 1.25.
// head 1: q = 0 -> z = 0 for both: uniform, out = (A + B) / 2 = [2, 0.5], lse = ln 2.
// head 2: q = [0, 8] -> z_A = 8, z_B = -4.
TEST(SparseMlaDecode, HandComputedTwoKeys) {
  Rng rng(testing::test_seed());
  DecodeCase c(2, LatentFormat::kBf16, 1, 16, 64, rng);
  set_row(c, 67, {{0, 1.f}, {1, 2.f}, {515, 0.25f}});
  set_row(c, 74, {{0, 3.f}, {1, -1.f}});
  std::fill(c.q.begin(), c.q.end(), float_to_bf16(0.f));
  c.q[0] = float_to_bf16(1.f), c.q[1] = float_to_bf16(0.5f), c.q[515] = float_to_bf16(4.f);
  c.q[2 * kQkDim + 1] = float_to_bf16(8.f);
  c.indices[0] = 67, c.indices[1] = 74;
  c.sm_scale = 0.5f;
  c.pass_topk_len = false;  // all K entries read; the rest are -1
  ASSERT_TRUE(sparse_mla_decode_ref(c.params()).ok());

  auto expect_head = [&](int h, double z_a, double z_b) {
    double lse = std::max(z_a, z_b) +
                 std::log(std::exp(z_a - std::max(z_a, z_b)) + std::exp(z_b - std::max(z_a, z_b)));
    double p_a = std::exp(z_a - lse), p_b = std::exp(z_b - lse);
    double want[2] = {p_a * 1 + p_b * 3, p_a * 2 - p_b * 1};
    for (int d = 0; d < 2; ++d) {
      EXPECT_NEAR(bf16_to_float(c.out[h * kVDim + d]), want[d], std::ldexp(std::fabs(want[d]), -8))
          << "head " << h << " dim " << d;
    }
    for (int d = 2; d < kVDim; ++d) EXPECT_EQ(bf16_to_float(c.out[h * kVDim + d]), 0.f) << d;
    EXPECT_NEAR(c.lse[h], lse, 1e-6) << "head " << h;
  };
  expect_head(0, 1.5, 1.25);
  expect_head(2, 8.0, -4.0);
  for (int h : {1, 3, 15}) {
    EXPECT_EQ(bf16_to_float(c.out[h * kVDim + 0]), 2.f);
    EXPECT_EQ(bf16_to_float(c.out[h * kVDim + 1]), 0.5f);
    EXPECT_FLOAT_EQ(c.lse[h], std::log(2.f));
  }

  // §3f bounds by hand for head 0: V_r = 3; sum |q kv| is 3 for A and 3.5 for B.
  auto bounds = sparse_mla_decode_bounds(c.params());
  ASSERT_TRUE(bounds.ok());
  double eps_z = std::ldexp(0.5 * 3.5, -16);
  float out0 = bf16_to_float(c.out[0]);
  EXPECT_FLOAT_EQ(bounds->out[0], std::ldexp(out0, -7) + std::ldexp(3.0, -8) + eps_z * 3);
  EXPECT_FLOAT_EQ(bounds->out[5], std::ldexp(3.0, -8) + eps_z * 3);
  EXPECT_FLOAT_EQ(bounds->lse[0], 1e-4 * std::max(1.f, c.lse[0]) + eps_z);
  EXPECT_FLOAT_EQ(bounds->lse[1], 1e-4 * 1.0);  // q = 0: eps_z = 0, |lse| = ln 2 < 1
}

// Every visible position of a randomly paged context, in position order: sparse = dense
// attention over the contiguous context rows, for both cache formats and two scales.
TEST(SparseMlaDecode, AllVisiblePositionsEqualDenseBothFormats) {
  for (LatentFormat f : {LatentFormat::kBf16, LatentFormat::kFp8_656}) {
    for (float scale : {kV32SmScale, 1e-3f}) {
      Rng rng(testing::test_seed() + int(f));
      DecodeCase c(6, f, 4, 32, 256, rng);
      c.sm_scale = scale;
      std::vector<int32_t> pages = rng.permutation(1, 6);
      std::vector<std::vector<int32_t>> lists(c.rows);
      for (int32_t r = 0; r < c.rows; ++r) {
        c.topk_len[r] = static_cast<int32_t>(rng.randint(1, c.topk));
        for (int32_t pos = 0; pos < c.topk_len[r]; ++pos) {
          lists[r].push_back(pages[pos / kPageSize] * kPageSize + pos % kPageSize);
          c.row_indices(r)[pos] = lists[r].back();
        }
      }
      ASSERT_TRUE(sparse_mla_decode_ref(c.params()).ok());
      DenseMlaResult dense = test::dense_over_lists(c.pool, c.q.data(), c.heads, lists, scale);
      Status s = compare_with_dense(dense, c.out.data(), c.lse.data(), nullptr);
      EXPECT_TRUE(s.ok()) << "format " << int(f) << " scale " << scale << ": " << s.to_string();
    }
  }
}

// The FP8-656 cache is read dequantised exactly: the same tokens written as bf16 rows of their
// dequantised values give bit-identical results.
TEST(SparseMlaDecode, Fp8CacheEqualsBf16CacheOfDequantisedRows) {
  Rng rng(testing::test_seed());
  DecodeCase c(3, LatentFormat::kFp8_656, 2, 16, 128, rng);
  testing::LatentPoolBuffer bf(3, LatentFormat::kBf16);
  for (int32_t s = kPageSize; s < 3 * kPageSize; ++s) {
    std::vector<float> row = c.pool.row(s);
    for (int t = 0; t < kQkDim; ++t) {
      bf16 h = float_to_bf16(row[t]);
      ASSERT_EQ(bf16_to_float(h), row[t]) << "dequantised value not bf16-exact";
      std::memcpy(bf.bytes().data() + size_t(s) * kBf16LatentBytes + 2 * t, &h, 2);
    }
  }
  for (size_t i = 0; i < c.indices.size(); ++i)
    c.indices[i] = i % 3 == 2 ? -1 : int32_t(kPageSize + rng.randint(0, 2 * kPageSize - 1));
  ASSERT_TRUE(sparse_mla_decode_ref(c.params()).ok());
  std::vector<bf16> out_fp8 = c.out;
  std::vector<float> lse_fp8 = c.lse;
  auto p = c.params();
  p.cache = bf.pool();
  c.poison();
  ASSERT_TRUE(sparse_mla_decode_ref(p).ok());
  test::expect_same_bits(out_fp8, c.out);
  EXPECT_TRUE(lse_fp8 == c.lse);
}

// Permuting the list, interleaving -1 anywhere and leaving valid slots after topk_len change
// nothing beyond rounding: all three agree with dense attention over the attended set.
TEST(SparseMlaDecode, OrderMinusOnesAndTopkLenDoNotChangeTheSet) {
  Rng rng(testing::test_seed());
  DecodeCase c(6, LatentFormat::kFp8_656, 3, 64, 192, rng);
  std::vector<int32_t> pool_slots = rng.permutation(kPageSize, 6 * kPageSize);  // 320 slots
  std::vector<std::vector<int32_t>> lists(c.rows);
  const int32_t n = 100;
  for (int32_t r = 0; r < c.rows; ++r)
    lists[r].assign(pool_slots.begin() + r * n, pool_slots.begin() + (r + 1) * n);
  // Row 0: shuffled. Row 1: -1 interleaved at random places, topk_len = K. Row 2: shuffled,
  // then valid (but not attended) slots after topk_len = n.
  std::vector<int32_t> row0 = lists[0];
  std::shuffle(row0.begin(), row0.end(), rng.engine());
  std::copy(row0.begin(), row0.end(), c.row_indices(0));
  c.topk_len[0] = n;
  std::vector<int32_t> row1(c.topk, -1);
  std::vector<int32_t> where = rng.permutation(0, c.topk);
  std::sort(where.begin(), where.begin() + n);
  for (int32_t i = 0; i < n; ++i) row1[where[i]] = lists[1][i];
  std::copy(row1.begin(), row1.end(), c.row_indices(1));
  std::vector<int32_t> row2 = lists[2];
  std::shuffle(row2.begin(), row2.end(), rng.engine());
  std::copy(row2.begin(), row2.end(), c.row_indices(2));
  for (int32_t i = n; i < c.topk; ++i) c.row_indices(2)[i] = pool_slots[300 + (i - n) % 20];
  c.topk_len[2] = n;
  ASSERT_TRUE(sparse_mla_decode_ref(c.params()).ok());
  DenseMlaResult dense = test::dense_over_lists(c.pool, c.q.data(), c.heads, lists, c.sm_scale);
  Status s = compare_with_dense(dense, c.out.data(), c.lse.data(), nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// A slot listed twice is attended twice: equal to dense attention with the row duplicated, and
// different from the list without the repeat.
TEST(SparseMlaDecode, RepeatedSlotCountsTwice) {
  Rng rng(testing::test_seed());
  DecodeCase c(2, LatentFormat::kBf16, 1, 16, 64, rng);
  std::vector<int32_t> list = {70, 90, 70, 100};
  std::copy(list.begin(), list.end(), c.row_indices(0));
  ASSERT_TRUE(sparse_mla_decode_ref(c.params()).ok());
  DenseMlaResult twice = test::dense_over_lists(c.pool, c.q.data(), 16, {list}, c.sm_scale);
  Status s = compare_with_dense(twice, c.out.data(), c.lse.data(), nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  DenseMlaResult once = test::dense_over_lists(c.pool, c.q.data(), 16, {{70, 90, 100}}, c.sm_scale);
  EXPECT_FALSE(compare_with_dense(once, c.out.data(), c.lse.data(), nullptr).ok());
}

// Empty attended sets (all -1; topk_len 0 with valid slots listed) give exactly out = 0,
// lse = +inf, and the bounds are 0 there.
TEST(SparseMlaDecode, EmptyRowsAreExactZeroAndInf) {
  Rng rng(testing::test_seed());
  DecodeCase c(2, LatentFormat::kFp8_656, 3, 16, 64, rng);
  for (int32_t i = 0; i < c.topk; ++i) c.row_indices(1)[i] = kPageSize + i;
  c.topk_len[1] = 0;
  c.row_indices(2)[5] = 80;  // row 2 is the control: one key
  auto bounds = sparse_mla_decode_bounds(c.params());
  ASSERT_TRUE(bounds.ok());
  for (int32_t r : {0, 1}) {
    for (int32_t i = 0; i < c.heads * kVDim; ++i) {
      ASSERT_EQ(c.out[r * c.heads * kVDim + i].bits, 0) << "row " << r;  // +0.0 exactly
      ASSERT_EQ(bounds->out[r * c.heads * kVDim + i], 0.f);
    }
    for (int32_t h = 0; h < c.heads; ++h) {
      EXPECT_EQ(c.lse[r * c.heads + h], INFINITY);
      EXPECT_EQ(bounds->lse[r * c.heads + h], 0.f);
    }
  }
  // One key: softmax weight 1, out = the key's latent rounded to bf16, lse = z.
  std::vector<float> key = c.pool.row(80);
  for (int c_ = 0; c_ < kVDim; ++c_)
    EXPECT_EQ(bf16_to_float(c.out[2 * c.heads * kVDim + c_]), round_to_bf16(key[c_]));
  EXPECT_GT(bounds->lse[2 * c.heads], 0.f);
}

// A row's result does not depend on the other rows of the batch (CPU batch invariance).
TEST(SparseMlaDecode, RowsAreBatchInvariant) {
  Rng rng(testing::test_seed());
  DecodeCase c(4, LatentFormat::kBf16, 5, 16, 128, rng);
  for (auto& i : c.indices) i = int32_t(rng.randint(-1, 4 * kPageSize - 1));
  for (auto& i : c.indices) i = i < kPageSize ? -1 : i;
  ASSERT_TRUE(sparse_mla_decode_ref(c.params()).ok());
  auto p = c.params();
  std::vector<bf16> alone(c.heads * kVDim);
  std::vector<float> lse(c.heads);
  p.q += 3 * c.heads * kQkDim, p.indices += 3 * c.topk, p.topk_len += 3, p.rows = 1;
  p.out = alone.data(), p.lse = lse.data();
  ASSERT_TRUE(sparse_mla_decode_ref(p).ok());
  for (int32_t i = 0; i < c.heads * kVDim; ++i)
    ASSERT_EQ(alone[i].bits, c.out[3 * c.heads * kVDim + i].bits);
  for (int32_t h = 0; h < c.heads; ++h) ASSERT_EQ(lse[h], c.lse[3 * c.heads + h]);
}

// One rounding from double to bf16: 1 + 2^-8 + 2^-30 rounds through fp32 onto the bf16 tie
// 1 + 2^-8 (which would go to even, 1.0); the exact value lies above it, so 1 + 2^-7.
TEST(SparseMlaDecode, OutputRoundsOnceToBf16) {
  using sparse_mla_detail::double_to_bf16;
  EXPECT_EQ(bf16_to_float(double_to_bf16(1 + std::ldexp(1., -8) + std::ldexp(1., -30))),
            1 + std::ldexp(1.f, -7));
  EXPECT_EQ(bf16_to_float(double_to_bf16(-1 - std::ldexp(1., -8) - std::ldexp(1., -30))),
            -1 - std::ldexp(1.f, -7));
  EXPECT_EQ(bf16_to_float(double_to_bf16(1 + std::ldexp(1., -8) - std::ldexp(1., -30))), 1.f);
  EXPECT_EQ(bf16_to_float(double_to_bf16(1 + std::ldexp(1., -8))), 1.f);  // a true tie: even
  EXPECT_EQ(double_to_bf16(0.0).bits, 0);
}

// `dsa check` entry: verify-style rows of one request, shuffled lists, rows longer than K
// attending a random subset, empty rows when context < rows; V3.2 heads and K at a short
// context.
TEST(SparseMlaDecode, CheckFunctionAtSeveralShapes) {
  const uint64_t seed = testing::test_seed();
  EXPECT_TRUE(
      check_sparse_mla_decode(sparse_mla_decode_ref, 4, 16, 128, 300, LatentFormat::kFp8_656, seed)
          .ok());
  EXPECT_TRUE(
      check_sparse_mla_decode(sparse_mla_decode_ref, 3, 64, 64, 2, LatentFormat::kBf16, seed + 1)
          .ok());
  EXPECT_TRUE(check_sparse_mla_decode(sparse_mla_decode_ref, 2, 128, 2048, 300,
                                      LatentFormat::kFp8_656, seed + 2)
                  .ok());
  Status bad =
      check_sparse_mla_decode(sparse_mla_decode_ref, 1, 48, 64, 10, LatentFormat::kBf16, seed);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.to_string();
}

}  // namespace
}  // namespace dsa::kernels
