#include "dsa/kernels/hadamard/hadamard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/hadamard/hadamard_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

// A unit vector e_v maps to the column (-1)^popcount(u & v) / sqrt(128); 1/sqrt(128) =
// 0.0883883 rounds to the bf16 value 181 * 2^-11 = 0.08837890625.
TEST(Hadamard, HandComputedUnitVectors) {
  std::vector<bf16> x(2 * kHadamardDim, float_to_bf16(0.f)), y(x.size(), float_to_bf16(NAN));
  x[0] = float_to_bf16(1.f);                 // row 0: e_0
  x[kHadamardDim + 3] = float_to_bf16(1.f);  // row 1: e_3
  ASSERT_TRUE(hadamard_ref({x.data(), y.data(), 2}).ok());
  const float c = 0.08837890625f;
  for (int32_t u = 0; u < kHadamardDim; ++u) EXPECT_EQ(bf16_to_float(y[u]), c) << u;
  // Sylvester order: sign of e_3's column at u is (-1)^(bit0(u) + bit1(u)).
  const float expected_row1[8] = {c, -c, -c, c, c, -c, -c, c};
  for (int32_t u = 0; u < 8; ++u) EXPECT_EQ(bf16_to_float(y[kHadamardDim + u]), expected_row1[u]);
  EXPECT_EQ(bf16_to_float(y[kHadamardDim + 127]), c);  // popcount(127 & 3) = 2
}

// All ones: y_0 = 128 / sqrt(128) = 11.3137 -> bf16 11.3125; every other output is exactly 0.
TEST(Hadamard, HandComputedConstantRow) {
  std::vector<bf16> x(kHadamardDim, float_to_bf16(1.f)), y(kHadamardDim, float_to_bf16(NAN));
  ASSERT_TRUE(hadamard_ref({x.data(), y.data(), 1}).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 11.3125f);
  for (int32_t u = 1; u < kHadamardDim; ++u) EXPECT_EQ(bf16_to_float(y[u]), 0.f) << u;
}

// The explicit O(n^2) sum of the definition as the independent formulation.
TEST(Hadamard, RandomRowsMatchExplicitSum) {
  Status s = check_hadamard(hadamard_ref, 64, testing::test_seed());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

// The normalised transform is an involution: applying it twice returns x up to two bf16
// roundings (|error| <= 2^-7 of the row's largest value is ample).
TEST(Hadamard, AppliedTwiceIsIdentity) {
  Rng rng(testing::test_seed());
  auto x = rng.bf16_vector(4 * kHadamardDim, 2.f);
  std::vector<bf16> y(x.size()), z(x.size());
  ASSERT_TRUE(hadamard_ref({x.data(), y.data(), 4}).ok());
  ASSERT_TRUE(hadamard_ref({y.data(), z.data(), 4}).ok());
  for (int32_t r = 0; r < 4; ++r) {
    float amax = 0;
    for (int32_t j = 0; j < kHadamardDim; ++j)
      amax = std::max(amax, std::fabs(bf16_to_float(x[r * kHadamardDim + j])));
    for (int32_t j = 0; j < kHadamardDim; ++j) {
      size_t i = size_t(r) * kHadamardDim + j;
      EXPECT_NEAR(bf16_to_float(z[i]), bf16_to_float(x[i]), amax * 0x1p-7) << i;
    }
  }
}

TEST(Hadamard, InPlaceEqualsOutOfPlace) {
  Rng rng(testing::test_seed());
  auto x = rng.bf16_vector(3 * kHadamardDim);
  std::vector<bf16> y(x.size()), inplace = x;
  ASSERT_TRUE(hadamard_ref({x.data(), y.data(), 3}).ok());
  ASSERT_TRUE(hadamard_ref({inplace.data(), inplace.data(), 3}).ok());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(inplace[i].bits, y[i].bits) << i;
}

TEST(Hadamard, ZeroRowsIsNoOpWithoutPointers) { EXPECT_TRUE(hadamard_ref({}).ok()); }

TEST(Hadamard, Rejects) {
  std::vector<bf16> buf(kHadamardDim);
  struct Case {
    HadamardParams p;
    const char* needle;
  } cases[] = {{{buf.data(), buf.data(), -1}, "num_rows = -1"},
               {{nullptr, buf.data(), 1}, "x is null"},
               {{buf.data(), nullptr, 1}, "y is null"}};
  for (const auto& c : cases) {
    Status s = hadamard_ref(c.p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.to_string();
  }
}

}  // namespace
}  // namespace dsa::kernels
