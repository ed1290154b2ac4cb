// The host side of the GPU-test harness (no device needed): reject tables, first differences,
// poison values, pool images, the cache-write slot lists and the bf16 stress blocks.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dsa/kernels/common/write_slots.h"
#include "dsa/testing/bf16_values.h"
#include "dsa/testing/cache_write.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::testing {
namespace {

struct Params {
  int32_t n = 4;
  int32_t k = 2;
};

Status check(const Params& p) {
  if (p.n < 0) return invalid_argument("check: n = " + std::to_string(p.n) + " must be >= 0");
  if (p.k > p.n) return out_of_range("check: k above n");
  return ok_status();
}

TEST(RejectTable, EachRowRunsOnItsOwnCopy) {
  int calls = 0;
  const auto counted = [&](const Params& p) {
    ++calls;
    return check(p);
  };
  expect_rejects(Params{}, counted,
                 {{"valid", [](Params&) {}, StatusCode::kOk},
                  {"n", [](Params& p) { p.n = -1; }, StatusCode::kInvalidArgument, "n = -1"},
                  // Would pass had the previous row's n = -1 leaked into this copy.
                  {"k", [](Params& p) { p.k = 5; }, StatusCode::kOutOfRange}});
  EXPECT_EQ(calls, 3);
}

TEST(RejectTable, AFailureNamesItsRow) {
  EXPECT_NONFATAL_FAILURE(
      expect_rejects(Params{}, check,
                     {{"k above n", [](Params& p) { p.k = 9; }, StatusCode::kInvalidArgument}}),
      "k above n: OutOfRange");
  EXPECT_NONFATAL_FAILURE(expect_rejects(Params{}, check,
                                         {{"n", [](Params& p) { p.n = -1; },
                                           StatusCode::kInvalidArgument, "no such text"}}),
                          "n: ");
}

TEST(FirstDifference, NamesTheFirstDifferingElement) {
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 5, 3, 7};
  const auto where = [](size_t i) { return "at " + std::to_string(i); };
  EXPECT_EQ(first_difference(a, a, where), "");
  EXPECT_EQ(first_difference(a, b, where), "at 1");
  EXPECT_EQ(first_difference(a, std::vector<int32_t>{1}, where), "sizes differ");
}

TEST(FirstDifference, BitIdenticalSeesSignedZerosAndNanPayloads) {
  const std::vector<float> zeros = {0.f, -0.f};
  EXPECT_EQ(first_bit_difference(zeros, zeros), "");
  EXPECT_EQ(first_bit_difference(zeros, std::vector<float>{0.f, 0.f}), "element 1 differs");
  const std::vector<float> nan = {std::nanf("1")};
  EXPECT_NE(first_bit_difference(nan, std::vector<float>{std::nanf("2")}), "");
}

TEST(Poison, ValueAndCheckAgree) {
  EXPECT_TRUE(std::isnan(poison_value<float>()));
  EXPECT_EQ(poison_value<bf16>().bits, 0xFFFF);
  EXPECT_EQ(poison_value<int32_t>(0x80), int32_t(0x80808080u));
  EXPECT_TRUE(is_poison(poison_value<float>()));
  EXPECT_TRUE(is_poison(poison_value<int32_t>(0x5A), 0x5A));
  EXPECT_FALSE(is_poison(1.f));
  EXPECT_FALSE(is_poison(std::nanf("")));  // a computed NaN is not the poison
}

TEST(Poison, PoolImageKeepsPageZeroAndIsReproducible) {
  Rng a(7), b(7);
  const std::vector<uint8_t> image = random_pool_image(a, 4096, 1000);
  ASSERT_EQ(image.size(), 4096u);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(image[i], 0) << i;
  EXPECT_EQ(image, random_pool_image(b, 4096, 1000));
  const std::vector<uint32_t> words = random_bytes<uint32_t>(a, 3);
  EXPECT_EQ(words.size(), 3u);
}

TEST(CacheWriteSlots, EdgePaddedAndOutOfPoolLists) {
  constexpr int32_t P = kernels::kPageSize;
  const std::vector<int32_t> edge = edge_slots(4);
  ASSERT_EQ(edge.size(), size_t(P));  // 2 ends + P - 2 inner offsets
  EXPECT_EQ(edge[0], P);
  EXPECT_EQ(edge[1], 4 * P - 1);
  EXPECT_EQ(edge[2], 2 * P + 1);
  EXPECT_EQ(edge.back(), 3 * P - 2);
  const std::vector<int32_t> padded = padded_consecutive_slots(11);
  EXPECT_EQ(padded, (std::vector<int32_t>{-1, P + 1, P + 2, P + 3, P + 4, -1, P + 6, P + 7, P + 8,
                                          P + 9, -1}));
  std::vector<int32_t> perm(40);
  for (int32_t t = 0; t < 40; ++t) perm[size_t(t)] = 1000 + t;
  const std::vector<int32_t> mixed = slots_with_out_of_pool(perm, 40, 5);
  for (int32_t t = 0; t < 40; ++t) {
    const int32_t s = mixed[size_t(t)];
    if (t % 4 == 2) {
      EXPECT_EQ(s, -1) << t;
    } else if (t % 4 == 1) {
      EXPECT_TRUE(s != -1 && !kernels::slot_in_pool(s, 5, P)) << t << ": " << s;
    } else {
      EXPECT_EQ(s, 1000 + t) << t;
    }
  }
}

TEST(Bf16Values, LiteralsAndStressKinds) {
  const std::vector<bf16> v = bf16s({1.f, -2.f, 0.5f});
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(bf16_to_float(v[1]), -2.f);
  Rng rng(11);
  std::vector<bf16> x(256);
  for (int kind = 0; kind < kStressKinds; ++kind) {
    fill_stress_block(rng, x.data(), int(x.size()), kind, 4.f);
    for (size_t d = 0; d < x.size(); ++d) {
      const uint16_t bits = x[d].bits;
      const bool finite = (bits & 0x7F80u) != 0x7F80u;
      if (kind != 0 && kind != 5) {
        ASSERT_TRUE(finite) << kind << " " << d;
      }
      if (kind == 2) {
        ASSERT_EQ(bits & 0x7FFFu, 0u) << d;
      }
      if (kind == 5 && d % 2) {
        ASSERT_TRUE((bits & 0x7F80u) == 0 && (bits & 0x7Fu) != 0) << d;  // subnormal
      }
    }
  }
}

}  // namespace
}  // namespace dsa::testing
