#include "dsa/kernels/rmsnorm/rmsnorm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/rmsnorm/rmsnorm_check.h"
#include "dsa/kernels/rmsnorm/rmsnorm_test_util.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using rmsnorm_test::gather_entries;
using testing::Rng;

std::vector<bf16> to_bf16(std::initializer_list<float> v) {
  std::vector<bf16> out;
  for (float f : v) out.push_back(float_to_bf16(f));
  return out;
}

RmsNormParams params(const std::vector<bf16>& x, const std::vector<bf16>& w, std::vector<bf16>& y,
                     int32_t tokens) {
  RmsNormParams p;
  p.x = x.data();
  p.weight = w.data();
  p.y = y.data();
  p.num_tokens = tokens;
  p.dim = static_cast<int32_t>(w.size());
  return p;
}

// x = [3, 4]: mean(x^2) = 12.5, rsqrt = 0.2828427; y = [0.848528, 1.131371], which round to the
// bf16 values 217 * 2^-8 and 145 * 2^-7.
TEST(RmsNorm, HandComputedPair) {
  auto x = to_bf16({3.f, 4.f}), w = to_bf16({1.f, 1.f});
  std::vector<bf16> y(2, float_to_bf16(NAN));
  ASSERT_TRUE(rmsnorm_ref(params(x, w, y, 1)).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 0.84765625f);
  EXPECT_EQ(bf16_to_float(y[1]), 1.1328125f);
}

// x = [2, 2, 2, 2]: rms = 2 (eps moves it by 1e-7 relative, below bf16 resolution), so y = w.
TEST(RmsNorm, HandComputedWeightIsApplied) {
  auto x = to_bf16({2.f, 2.f, 2.f, 2.f}), w = to_bf16({1.f, 0.5f, 2.f, -1.f});
  std::vector<bf16> y(4, float_to_bf16(NAN));
  ASSERT_TRUE(rmsnorm_ref(params(x, w, y, 1)).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 1.f);
  EXPECT_EQ(bf16_to_float(y[1]), 0.5f);
  EXPECT_EQ(bf16_to_float(y[2]), 2.f);
  EXPECT_EQ(bf16_to_float(y[3]), -1.f);
}

// eps enters under the root: x = [1, 1], eps = 0.25 -> y = 1/sqrt(1.25) = 0.894427 -> 229 * 2^-8.
// With a zero row the result is 0, not NaN.
TEST(RmsNorm, EpsUnderTheRoot) {
  auto x = to_bf16({1.f, 1.f, 0.f, 0.f}), w = to_bf16({1.f, 1.f});
  std::vector<bf16> y(4, float_to_bf16(NAN));
  auto p = params(x, w, y, 2);
  p.eps = 0.25f;
  ASSERT_TRUE(rmsnorm_ref(p).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 0.89453125f);
  EXPECT_EQ(bf16_to_float(y[1]), 0.89453125f);
  EXPECT_EQ(bf16_to_float(y[2]), 0.f);
  EXPECT_EQ(bf16_to_float(y[3]), 0.f);
}

// Independent long-double formulation on random rows (strided input, mixed row scales).
TEST(RmsNorm, RandomRowsMatchIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, dim] : {std::pair{37, 512}, {5, 1536}, {9, 256}, {3, 7}}) {
    Status s = check_rmsnorm(rmsnorm_ref, tokens, dim, seed + dim);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " D=" << dim << ": " << s.to_string();
  }
}

// In place (y == x) equals out of place; a row alone equals the same row inside a batch.
TEST(RmsNorm, InPlaceAndBatchInvariant) {
  Rng rng(testing::test_seed());
  const int32_t tokens = 6, dim = 96;
  auto x = rng.bf16_vector(size_t(tokens) * dim, 3.f), w = rng.bf16_vector(dim);
  std::vector<bf16> y(x.size());
  ASSERT_TRUE(rmsnorm_ref(params(x, w, y, tokens)).ok());
  std::vector<bf16> inplace = x;
  auto p = params(inplace, w, inplace, tokens);
  ASSERT_TRUE(rmsnorm_ref(p).ok());
  std::vector<bf16> alone(dim);
  p = params(x, w, alone, 1);
  p.x = x.data() + 4 * dim;
  ASSERT_TRUE(rmsnorm_ref(p).ok());
  for (int32_t i = 0; i < tokens * dim; ++i) EXPECT_EQ(inplace[i].bits, y[i].bits) << i;
  for (int32_t d = 0; d < dim; ++d) EXPECT_EQ(alone[d].bits, y[4 * dim + d].bits) << d;
}

// y_stride > D: the gap between output rows is not written.
TEST(RmsNorm, StridedOutputLeavesGap) {
  Rng rng(testing::test_seed());
  auto x = rng.bf16_vector(2 * 8), w = rng.bf16_vector(8);
  std::vector<bf16> y(2 * 10, float_to_bf16(-7.f));
  auto p = params(x, w, y, 2);
  p.y_stride = 10;
  ASSERT_TRUE(rmsnorm_ref(p).ok());
  for (int i : {8, 9, 18, 19}) EXPECT_EQ(bf16_to_float(y[i]), -7.f) << i;
  for (int i : {0, 7, 10, 17}) EXPECT_NE(bf16_to_float(y[i]), -7.f) << i;
}

TEST(RmsNorm, ZeroTokensIsNoOpWithoutPointers) {
  RmsNormParams p;
  p.dim = 16;
  EXPECT_TRUE(rmsnorm_ref(p).ok());
}

TEST(RmsNorm, NanPropagatesToItsRowOnly) {
  auto x = to_bf16({1.f, NAN, 1.f, 2.f}), w = to_bf16({1.f, 1.f});
  std::vector<bf16> y(4);
  ASSERT_TRUE(rmsnorm_ref(params(x, w, y, 2)).ok());
  EXPECT_TRUE(std::isnan(bf16_to_float(y[0])));
  EXPECT_FALSE(std::isnan(bf16_to_float(y[2])));
}

class RmsNormRejects : public ::testing::Test {
 protected:
  RmsNormRejects() : x(8, float_to_bf16(1.f)), w(4, float_to_bf16(1.f)), y(8) {}
  void expect(const RmsNormParams& p, const std::string& needle) {
    Status s = rmsnorm_ref(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  }
  RmsNormParams good() { return params(x, w, y, 2); }
  std::vector<bf16> x, w, y;
};

TEST_F(RmsNormRejects, NegativeTokens) {
  auto p = good();
  p.num_tokens = -2;
  expect(p, "num_tokens = -2");
}
TEST_F(RmsNormRejects, ZeroDim) {
  auto p = good();
  p.dim = 0;
  expect(p, "dim = 0");
}
TEST_F(RmsNormRejects, ZeroEps) {
  auto p = good();
  p.eps = 0.f;
  expect(p, "eps = 0");
}
TEST_F(RmsNormRejects, NanEps) {
  auto p = good();
  p.eps = NAN;
  expect(p, "eps = nan");
}
TEST_F(RmsNormRejects, InputStrideBelowDim) {
  auto p = good();
  p.x_stride = 3;
  expect(p, "x_stride = 3");
}
TEST_F(RmsNormRejects, OutputStrideBelowDim) {
  auto p = good();
  p.y_stride = 2;
  expect(p, "y_stride = 2");
}
TEST_F(RmsNormRejects, NullX) {
  auto p = good();
  p.x = nullptr;
  expect(p, "x is null");
}
TEST_F(RmsNormRejects, NullWeight) {
  auto p = good();
  p.weight = nullptr;
  expect(p, "weight is null");
}
TEST_F(RmsNormRejects, NullY) {
  auto p = good();
  p.y = nullptr;
  expect(p, "y is null");
}

// ---- gathered rmsnorm (x_rows) ----

// x rows [3, 4] and [1, 1]; entries 1, 0, 5 (out of range), -1: y = [1, 1],
// RmsNorm.HandComputedPair's [217 * 2^-8, 145 * 2^-7], then two zero rows; x_copy holds the
// gathered rows and zeros.
TEST(RmsNormGathered, HandComputed) {
  ScopedCheckedMode unchecked(false);
  auto x = to_bf16({3.f, 4.f, 1.f, 1.f}), w = to_bf16({1.f, 1.f});
  const std::vector<int32_t> rows = {1, 0, 5, -1};
  std::vector<bf16> y(8, float_to_bf16(NAN)), copy(8, float_to_bf16(NAN));
  auto p = params(x, w, y, 4);
  p.x_rows = rows.data();
  p.x_row_bound = 2;
  p.x_copy = copy.data();
  ASSERT_TRUE(rmsnorm_ref(p).ok());
  const float want_y[] = {1.f, 1.f, 0.84765625f, 1.1328125f, 0.f, 0.f, 0.f, 0.f};
  const float want_copy[] = {1.f, 1.f, 3.f, 4.f, 0.f, 0.f, 0.f, 0.f};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(bf16_to_float(y[i]), want_y[i]) << i;
    EXPECT_EQ(bf16_to_float(copy[i]), want_copy[i]) << i;
  }
}

// Gathered rmsnorm_ref equals the rows gathered by hand into a zeroed dense buffer followed by the
// plain rmsnorm_ref, bit for bit (y with its strided gaps, x_copy), on fresh random rows: strides
// wider than D, D not a multiple of 8, V3.2's hidden width; -1, repeats and out-of-range entries
// read as zero rows in unchecked mode, with skip_minus_one or without.
TEST(RmsNormGathered, EqualsGatherIntoZerosThenRmsNorm) {
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  const bf16 sentinel{0xFFFF};  // a NaN no finite input produces
  struct Shape {
    int32_t tokens, dim, bound;
    int64_t xs, ys;  // 0 = dim
  } shapes[] = {{1, 256, 4, 0, 0},     {5, 256, 9, 264, 0},   {33, 256, 40, 0, 260},
                {1, 7168, 2, 7171, 0}, {5, 7168, 3, 0, 7176}, {33, 7168, 50, 7176, 0},
                {1, 77, 1, 0, 0},      {5, 77, 6, 80, 79},    {33, 77, 20, 0, 0}};
  int variant = 0;
  for (const Shape& s : shapes) {
    const int64_t xs = s.xs == 0 ? s.dim : s.xs, ys = s.ys == 0 ? s.dim : s.ys;
    auto x = rng.bf16_vector(size_t(s.bound) * xs, 3.f), w = rng.bf16_vector(size_t(s.dim));
    const std::vector<int32_t> rows = gather_entries(rng, s.tokens, s.bound);
    std::vector<bf16> dense(size_t(s.tokens) * s.dim, bf16{});
    int zero_rows = 0;
    for (int32_t t = 0; t < s.tokens; ++t) {
      if (rows[t] < 0 || rows[t] >= s.bound) {
        ++zero_rows;
        continue;
      }
      std::copy_n(x.begin() + rows[t] * xs, s.dim, dense.begin() + size_t(t) * s.dim);
    }
    std::vector<bf16> want(size_t(s.tokens) * ys, sentinel);
    auto plain = params(dense, w, want, s.tokens);
    plain.y_stride = s.ys;
    ASSERT_TRUE(rmsnorm_ref(plain).ok());

    for (bool with_copy : {false, true}) {
      const bool skip = variant++ % 2 == 1;
      const std::string what = "T=" + std::to_string(s.tokens) + " D=" + std::to_string(s.dim) +
                               " xs=" + std::to_string(xs) + " ys=" + std::to_string(ys) +
                               (with_copy ? " x_copy" : "") + (skip ? " skip_minus_one" : "");
      std::vector<bf16> y(want.size(), sentinel), copy(dense.size(), sentinel);
      auto p = params(x, w, y, s.tokens);
      p.x_stride = s.xs;
      p.y_stride = s.ys;
      p.x_rows = rows.data();
      p.x_row_bound = s.bound;
      p.skip_minus_one = skip;
      p.x_copy = with_copy ? copy.data() : nullptr;
      ASSERT_TRUE(rmsnorm_ref(p).ok()) << what;
      EXPECT_EQ(testing::first_bit_difference(y, want), "") << what << ": y";
      if (with_copy) {
        EXPECT_EQ(testing::first_bit_difference(copy, dense), "") << what << ": x_copy";
      } else {
        EXPECT_TRUE(
            std::all_of(copy.begin(), copy.end(), [&](bf16 v) { return v.bits == sentinel.bits; }))
            << what << ": x_copy written without being set";
      }
      // The zero rows' norm is +-0 everywhere, whatever the source row under the bad entry.
      for (int32_t t = 0; t < s.tokens; ++t) {
        if (rows[t] >= 0 && rows[t] < s.bound) continue;
        for (int32_t d = 0; d < s.dim; ++d)
          ASSERT_EQ(y[size_t(t) * ys + d].bits & 0x7FFF, 0) << what << ": y[" << t << "][" << d;
      }
    }
    if (s.tokens >= 5) {
      EXPECT_GT(zero_rows, 0) << "no bad entry drawn";
    }
  }
}

// The check entry: the independent long-double norm of each gathered row, x_copy, the gaps; in
// either mode (checked mode leaves the out-of-range entries out).
TEST(RmsNormGathered, MatchesIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  for (bool checked : {false, true}) {
    ScopedCheckedMode mode(checked);
    for (auto [tokens, dim, bound] : {std::tuple{37, 256, 50}, {9, 77, 4}, {4, 1536, 3}}) {
      for (bool with_copy : {false, true}) {
        Status s = check_rmsnorm_gathered(rmsnorm_ref, tokens, dim, bound, with_copy, seed + dim);
        EXPECT_TRUE(s.ok()) << "T=" << tokens << " D=" << dim << " bound=" << bound
                            << (with_copy ? " x_copy" : "") << (checked ? " checked" : "") << ": "
                            << s.to_string();
      }
    }
  }
}

// Checked mode: an entry outside [0, x_row_bound) is OutOfRange naming the position and the
// entry, -1 too unless skip_minus_one; nothing is written (y and x_copy keep their poison). The
// last row (bound - 1) and -1 with skip_minus_one pass and give the unchecked result.
TEST(RmsNormGathered, CheckedModeRejectsBadEntriesBeforeWriting) {
  ScopedCheckedMode checked(true);
  Rng rng(testing::test_seed());
  const int32_t dim = 8, bound = 4;
  auto x = rng.bf16_vector(size_t(bound) * dim), w = rng.bf16_vector(dim);
  const bf16 sentinel{0xFFFF};
  struct Case {
    int32_t entry;
    bool skip;
    bool ok;
  } cases[] = {{3, false, true},         {-1, true, true},         {-1, false, false},
               {4, false, false},        {4, true, false},         {-2, true, false},
               {INT32_MIN, true, false}, {INT32_MAX, false, false}};
  for (const Case& c : cases) {
    const std::string what = "entry " + std::to_string(c.entry) + (c.skip ? " skip" : "");
    const std::vector<int32_t> rows = {0, 2, c.entry, 1};
    std::vector<bf16> y(4 * dim, sentinel), copy(4 * dim, sentinel);
    auto p = params(x, w, y, 4);
    p.x_rows = rows.data();
    p.x_row_bound = bound;
    p.skip_minus_one = c.skip;
    p.x_copy = copy.data();
    Status s = rmsnorm_ref(p);
    if (c.ok) {
      ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
      std::vector<bf16> y2(y.size(), sentinel), copy2(copy.size(), sentinel);
      ScopedCheckedMode unchecked(false);
      p.y = y2.data();
      p.x_copy = copy2.data();
      ASSERT_TRUE(rmsnorm_ref(p).ok()) << what;
      EXPECT_EQ(testing::first_bit_difference(y, y2), "") << what << ": y checked vs unchecked";
      EXPECT_EQ(testing::first_bit_difference(copy, copy2), "") << what << ": x_copy";
      EXPECT_NE(y[2 * dim].bits, sentinel.bits) << what << ": y[2] not written";
      continue;
    }
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << what << ": " << s.to_string();
    EXPECT_NE(s.message().find("x_rows[2] = " + std::to_string(c.entry)), std::string::npos)
        << what << ": " << s.to_string();
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y[i].bits, sentinel.bits) << what << ": y[" << i << "] written";
      ASSERT_EQ(copy[i].bits, sentinel.bits) << what << ": x_copy[" << i << "] written";
    }
  }
}

// Host checks of the gather fields.
TEST_F(RmsNormRejects, GatherFields) {
  const std::vector<int32_t> rows = {1, 0};
  std::vector<bf16> copy(8);
  auto gathered = [&] {
    auto p = good();
    p.x_rows = rows.data();
    p.x_row_bound = 2;
    return p;
  };
  EXPECT_TRUE(validate(gathered()).ok());
  auto p = gathered();
  p.x_row_bound = 0;
  expect(p, "x_row_bound = 0");
  p.num_tokens = 0;  // refused even with no rows to read
  expect(p, "x_row_bound = 0");
  p = gathered();
  p.x_row_bound = -3;
  expect(p, "x_row_bound = -3");
  p = good();
  p.x_copy = copy.data();  // x_copy without x_rows
  expect(p, "x_copy");
  // y over the gathered x: in place is fine for the plain norm, not for the gathered one.
  p = good();
  p.y = x.data();
  EXPECT_TRUE(validate(p).ok());
  p = gathered();
  p.y = x.data();
  expect(p, "y overlaps");
  // The gathered x spans x_row_bound rows: with one source row, y may be x's second row.
  p = gathered();
  p.num_tokens = 1;
  p.y = x.data() + 4;
  expect(p, "y overlaps");
  p.x_row_bound = 1;
  EXPECT_TRUE(validate(p).ok());
  p = gathered();
  p.x_copy = y.data() + 4;  // x_copy's first row is y's second
  expect(p, "x_copy overlaps");
  p = gathered();
  p.x_copy = x.data() + 7;  // x_copy's first element is x's last
  expect(p, "x_copy overlaps");
  p = gathered();
  p.x_copy = copy.data();
  EXPECT_TRUE(validate(p).ok());
}

// ---- rmsnorm_pair ----

// The MTP layer's form: two gathered norms writing the halves of one [T, 2D] row, the second with
// skip_minus_one. rmsnorm_pair_ref equals the two norms run alone into their halves, bit for bit,
// on fresh random rows with -1, repeated and out-of-range entries.
TEST(RmsNormPair, EqualsEachNormAloneIntoItsHalf) {
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  for (const int32_t tokens : {1, 4, 37}) {
    const int32_t D = 256, bound_a = 300, bound_b = 40;
    const auto xa = rng.bf16_vector(size_t(bound_a) * D, 3.f);
    const auto xb = rng.bf16_vector(size_t(bound_b) * D, 3.f);
    const auto wa = rng.bf16_vector(size_t(D)), wb = rng.bf16_vector(size_t(D));
    const std::vector<int32_t> ra = gather_entries(rng, tokens, bound_a);
    const std::vector<int32_t> rb = gather_entries(rng, tokens, bound_b);
    const bf16 sentinel{0xFFFF};
    std::vector<bf16> pair(size_t(tokens) * 2 * D, sentinel), alone(pair);
    const auto norm = [&](const std::vector<bf16>& x, const std::vector<bf16>& w,
                          const std::vector<int32_t>& rows, int32_t bound, bf16* y, bool skip) {
      RmsNormParams p;
      p.x = x.data();
      p.weight = w.data();
      p.y = y;
      p.num_tokens = tokens;
      p.dim = D;
      p.y_stride = 2 * D;
      p.x_rows = rows.data();
      p.x_row_bound = bound;
      p.skip_minus_one = skip;
      return p;
    };
    const Status st = rmsnorm_pair_ref(norm(xa, wa, ra, bound_a, pair.data(), false),
                                       norm(xb, wb, rb, bound_b, pair.data() + D, true));
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(rmsnorm_ref(norm(xa, wa, ra, bound_a, alone.data(), false)).ok());
    ASSERT_TRUE(rmsnorm_ref(norm(xb, wb, rb, bound_b, alone.data() + D, true)).ok());
    EXPECT_EQ(testing::first_bit_difference(pair, alone), "") << "T = " << tokens;
    EXPECT_EQ(std::count_if(pair.begin(), pair.end(), [](bf16 v) { return v.bits == 0xFFFF; }), 0)
        << "T = " << tokens << ": a half left unwritten";
  }
}

// Host checks of the pair: each norm's own (named by its place), the shapes, and one norm writing
// what the other reads.
TEST_F(RmsNormRejects, PairFields) {
  std::vector<bf16> x2(8, float_to_bf16(1.f)), y2(8);
  const auto second = [&] { return params(x2, w, y2, 2); };
  EXPECT_TRUE(validate_pair(good(), second()).ok());
  const auto expect_pair = [](const RmsNormParams& a, const RmsNormParams& b,
                              const std::string& needle) {
    for (const Status& s : {validate_pair(a, b), rmsnorm_pair_ref(a, b)}) {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
      EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
    }
  };
  auto b = second();
  b.eps = 0.f;
  expect_pair(good(), b, "norm 1");
  expect_pair(good(), b, "eps = 0");
  b = second();
  b.num_tokens = 1;
  expect_pair(good(), b, "num_tokens 2 and 1");
  b = second();
  b.dim = 3;
  expect_pair(good(), b, "dim 4 and 3");
  b = second();
  b.y = x.data();  // the second norm writes the first one's x
  expect_pair(good(), b, "norm 1's y overlaps norm 0's x");
  auto a = good();
  a.y = x2.data() + 4;  // the first norm's second row lands on the second one's x
  expect_pair(a, second(), "norm 0's y overlaps norm 1's x");
  const std::vector<int32_t> rows = {0, 1};
  b = second();
  b.x_rows = rows.data();
  b.x_row_bound = 2;
  b.x_copy = x.data();  // the second norm's gathered copy over the first one's x
  expect_pair(good(), b, "norm 1's x_copy overlaps norm 0's x");
  // Outputs: the MTP layer's interleaved halves are fine; rows that collide are not.
  std::vector<bf16> cat(16);
  a = good();
  a.y = cat.data();
  a.y_stride = 8;
  b = second();
  b.y = cat.data() + 4;
  b.y_stride = 8;
  EXPECT_TRUE(validate_pair(a, b).ok());
  b.y = cat.data() + 2;  // each row's half starts inside the other's
  expect_pair(a, b, "the two norms' y share elements");
  b.y = cat.data() + 6;
  expect_pair(a, b, "the two norms' y share elements");
  b.y = cat.data() + 4;
  b.y_stride = 12;  // other strides: any overlap of the spans is refused
  expect_pair(a, b, "the two norms' y share elements");
  b = second();
  b.x_rows = rows.data();
  b.x_row_bound = 2;
  b.x_copy = y.data() + 4;  // the second norm's gathered copy over the first one's y
  expect_pair(good(), b, "norm 1's x_copy overlaps norm 0's y");
  b = second();
  b.num_tokens = 0;
  a = good();
  a.num_tokens = 0;
  EXPECT_TRUE(rmsnorm_pair_ref(a, b).ok());
}

// The check entry (an independent long-double norm of each gathered row, x_copy, the gaps) on the
// reference pair, in both modes (checked: no out-of-range entries).
TEST(RmsNormPair, MatchesIndependentFormulation) {
  for (const bool checked : {false, true}) {
    ScopedCheckedMode mode(checked);
    const Status s = check_rmsnorm_pair(rmsnorm_pair_ref, 37, 256, 50, testing::test_seed());
    EXPECT_TRUE(s.ok()) << (checked ? "checked: " : "") << s.to_string();
  }
}

// ---- residual add ----

// One fp32 add, one RNE rounding: 1 + 2^-8 is a bf16 tie and goes to the even 1.0;
// (1 + 2^-7) + 2^-8 is a tie too and goes up to the even 1 + 2^-6; 3 + (-1.5) = 1.5 exactly.
TEST(ResidualAdd, HandComputedTiesRoundToEven) {
  auto h = to_bf16({1.f, 1.f + 0x1p-7f, 3.f}), x = to_bf16({0x1p-8f, 0x1p-8f, -1.5f});
  ResidualAddParams p{h.data(), x.data(), 1, 3};
  ASSERT_TRUE(residual_add_ref(p).ok());
  EXPECT_EQ(bf16_to_float(h[0]), 1.f);
  EXPECT_EQ(bf16_to_float(h[1]), 1.f + 0x1p-6f);
  EXPECT_EQ(bf16_to_float(h[2]), 1.5f);
}

TEST(ResidualAdd, RandomMatchesExactSumRoundedTwice) {
  Status s = check_residual_add(residual_add_ref, 19, 256, testing::test_seed());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(ResidualAdd, Rejects) {
  std::vector<bf16> h(4), x(4);
  struct Case {
    ResidualAddParams p;
    const char* needle;
  } cases[] = {{{h.data(), x.data(), -1, 4}, "num_tokens = -1"},
               {{h.data(), x.data(), 1, 0}, "dim = 0"},
               {{nullptr, x.data(), 1, 4}, "h is null"},
               {{h.data(), nullptr, 1, 4}, "x is null"}};
  for (const auto& c : cases) {
    Status s = residual_add_ref(c.p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
  }
}

// ---- add_rmsnorm: residual_add then rmsnorm, fused ----

// Rows of h with scales 2^-6..2^6 and adds 2^-8..2^2 of their row's scale, so the fp32 add rounds
// to bf16 in many places and the norm sees rounded sums of every magnitude.
struct AddRows {
  std::vector<bf16> h, add, w;
};

AddRows random_add_rows(Rng& rng, int32_t tokens, int32_t dim) {
  AddRows r;
  for (int32_t t = 0; t < tokens; ++t) {
    const float scale = std::ldexp(1.f, int(rng.randint(-6, 6)));
    for (int32_t d = 0; d < dim; ++d) {
      r.h.push_back(float_to_bf16(rng.normal() * scale));
      r.add.push_back(
          float_to_bf16(rng.normal() * scale * std::ldexp(1.f, int(rng.randint(-8, 2)))));
    }
  }
  r.w = rng.bf16_vector(size_t(dim), 0.5f);
  return r;
}

AddRmsNormParams add_params(std::vector<bf16>& h, const std::vector<bf16>& add,
                            const std::vector<bf16>& w, std::vector<bf16>& y, int32_t tokens,
                            int64_t y_stride) {
  AddRmsNormParams p;
  p.h = h.data();
  p.add = add.data();
  p.weight = w.data();
  p.y = y.data();
  p.num_tokens = tokens;
  p.dim = static_cast<int32_t>(w.size());
  p.y_stride = y_stride;
  return p;
}

// The fused reference is the unfused pair bit for bit (h and the whole strided y), on fresh random
// rows: T = 0 and 1, D not a multiple of 8, V3.2's hidden width, output strides wider than D.
TEST(AddRmsNorm, EqualsResidualAddThenRmsNorm) {
  Rng rng(testing::test_seed());
  const bf16 sentinel{0xFFFF};  // a NaN no finite input produces
  struct Shape {
    int32_t tokens, dim;
    int64_t y_stride;  // 0 = dim
  } shapes[] = {{0, 64, 0},   {1, 7168, 0},    {1, 7, 0},   {3, 7, 0},    {5, 100, 103},
                {37, 512, 0}, {4, 7168, 7171}, {9, 13, 20}, {6, 96, 104}, {64, 7168, 0}};
  for (const Shape& s : shapes) {
    const std::string what = "T=" + std::to_string(s.tokens) + " D=" + std::to_string(s.dim) +
                             " ys=" + std::to_string(s.y_stride);
    const int64_t ys = s.y_stride == 0 ? s.dim : s.y_stride;
    AddRows r = random_add_rows(rng, s.tokens, s.dim);
    std::vector<bf16> fused_h = r.h, fused_y(size_t(s.tokens) * ys, sentinel);
    ASSERT_TRUE(
        add_rmsnorm_ref(add_params(fused_h, r.add, r.w, fused_y, s.tokens, s.y_stride)).ok())
        << what;

    std::vector<bf16> pair_h = r.h, pair_y(fused_y.size(), sentinel);
    ASSERT_TRUE(residual_add_ref({pair_h.data(), r.add.data(), s.tokens, s.dim}).ok()) << what;
    RmsNormParams n = params(pair_h, r.w, pair_y, s.tokens);
    n.y_stride = s.y_stride;
    ASSERT_TRUE(rmsnorm_ref(n).ok()) << what;

    EXPECT_EQ(testing::first_bit_difference(fused_h, pair_h), "") << what << ": h";
    EXPECT_EQ(testing::first_bit_difference(fused_y, pair_y), "") << what << ": y";
    for (int32_t t = 0; t < s.tokens; ++t) {
      for (int64_t j = 0; j < ys; ++j) {
        const bool gap = j >= s.dim;
        EXPECT_EQ(fused_y[size_t(t) * ys + j].bits == sentinel.bits, gap)
            << what << ": y[" << t << "][" << j << "]" << (gap ? " (gap) written" : " not written");
      }
    }
    if (s.tokens > 0) {
      EXPECT_NE(testing::first_bit_difference(fused_h, r.h), "") << what << ": h not updated";
    }
  }
}

// [2.5, 4] + [0.5, 0] = [3, 4], whose norm is RmsNorm.HandComputedPair's [217 * 2^-8, 145 * 2^-7];
// the add rounds as residual_add's does: 1 + 2^-8 is a tie and stays at the even 1.0.
TEST(AddRmsNorm, HandComputed) {
  auto h = to_bf16({2.5f, 4.f, 1.f, 1.f}), add = to_bf16({0.5f, 0.f, 0x1p-8f, 0.f});
  auto w = to_bf16({1.f, 1.f});
  std::vector<bf16> y(4, float_to_bf16(NAN));
  ASSERT_TRUE(add_rmsnorm_ref(add_params(h, add, w, y, 2, 0)).ok());
  EXPECT_EQ(bf16_to_float(h[0]), 3.f);
  EXPECT_EQ(bf16_to_float(h[1]), 4.f);
  EXPECT_EQ(bf16_to_float(h[2]), 1.f);
  EXPECT_EQ(bf16_to_float(y[0]), 0.84765625f);
  EXPECT_EQ(bf16_to_float(y[1]), 1.1328125f);
  EXPECT_EQ(bf16_to_float(y[2]), 1.f);  // [1, 1]: rms 1, y = w
  EXPECT_EQ(bf16_to_float(y[3]), 1.f);
}

// The check entry: h against the exact sum, y against the independent long-double norm.
TEST(AddRmsNorm, RandomRowsMatchIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, dim] : {std::pair{37, 512}, {1, 7168}, {3, 7}, {9, 100}}) {
    Status s = check_add_rmsnorm(add_rmsnorm_ref, tokens, dim, seed + dim);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " D=" << dim << ": " << s.to_string();
  }
}

TEST(AddRmsNorm, ZeroTokensIsNoOpWithoutPointers) {
  AddRmsNormParams p;
  p.dim = 16;
  EXPECT_TRUE(add_rmsnorm_ref(p).ok());
}

class AddRmsNormRejects : public ::testing::Test {
 protected:
  AddRmsNormRejects() : h(8, float_to_bf16(1.f)), add(8, float_to_bf16(1.f)), w(4), y(8) {}
  void expect(const AddRmsNormParams& p, const std::string& needle) {
    Status s = add_rmsnorm_ref(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_EQ(s.message().rfind("add_rmsnorm: ", 0), 0u) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  }
  AddRmsNormParams good() { return add_params(h, add, w, y, 2, 0); }
  std::vector<bf16> h, add, w, y;
};

TEST_F(AddRmsNormRejects, GoodParamsPass) { EXPECT_TRUE(validate(good()).ok()); }
TEST_F(AddRmsNormRejects, NegativeTokens) {
  auto p = good();
  p.num_tokens = -3;
  expect(p, "num_tokens = -3");
}
TEST_F(AddRmsNormRejects, ZeroDim) {
  auto p = good();
  p.dim = 0;
  expect(p, "dim = 0");
}
TEST_F(AddRmsNormRejects, BadEps) {
  auto p = good();
  p.eps = 0.f;
  expect(p, "eps = 0");
  p.eps = -1e-6f;
  expect(p, "eps = -1e-06");
  p.eps = NAN;
  expect(p, "eps = nan");
  p.eps = INFINITY;
  expect(p, "eps = inf");
}
TEST_F(AddRmsNormRejects, OutputStrideBelowDim) {
  auto p = good();
  p.y_stride = 3;
  expect(p, "y_stride = 3");
  p.y_stride = -4;
  expect(p, "y_stride = -4");
}
TEST_F(AddRmsNormRejects, NullPointers) {
  auto p = good();
  p.h = nullptr;
  expect(p, "h is null");
  p = good();
  p.add = nullptr;
  expect(p, "add is null");
  p = good();
  p.weight = nullptr;
  expect(p, "weight is null");
  p = good();
  p.y = nullptr;
  expect(p, "y is null");
}
// y in place of h would lose the residual stream; y over add (or any overlap) races in the kernel.
TEST_F(AddRmsNormRejects, OutputOverlappingAnInput) {
  auto p = good();
  p.y = h.data();
  expect(p, "overlaps h");
  p.y = h.data() + 7;  // the last element of h is y's first
  expect(p, "overlaps h");
  p.y = const_cast<bf16*>(add.data());
  expect(p, "overlaps add");
  p = good();
  p.num_tokens = 1;
  p.y = h.data() + 4;  // one row: y is h's second row, which this call leaves alone
  EXPECT_TRUE(validate(p).ok());
}

TEST_F(AddRmsNormRejects, AddPartlyOverlappingH) {
  auto p = good();
  p.add = h.data() + 1;  // h shifted: row t + 1 of the add would read a row t already written
  expect(p, "partly overlaps h");
  p.add = h.data();  // h + h: every element reads only its own
  EXPECT_TRUE(validate(p).ok());
}

}  // namespace
}  // namespace dsa::kernels
