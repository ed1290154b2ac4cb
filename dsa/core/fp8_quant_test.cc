// The power-of-two scale rule of SPEC.md §2.1, checked against an independent formulation
// (frexp in double) and for the exactness of dequantisation.
#include "dsa/core/fp8_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace dsa {
namespace {

int exponent_by_frexp(float amax) {
  float a = std::max(amax, 1e-4f);
  float v = a / 448.0f;
  int e2;
  float m = std::frexp(v, &e2);  // v = m * 2^e2, m in [0.5, 1)
  return m == 0.5f ? e2 - 1 : e2;
}

TEST(Pow2Scale, HandComputed) {
  EXPECT_EQ(pow2_scale_exponent(448.f), 0);  // v = 1 exactly -> e = 0
  EXPECT_EQ(pow2_scale_exponent(449.f), 1);  // just above -> next power
  EXPECT_EQ(pow2_scale_exponent(224.f), -1);
  EXPECT_EQ(pow2_scale_exponent(3.f), -7);   // 3/448 = 1.71 * 2^-8 -> ceil = -7
  EXPECT_EQ(pow2_scale_exponent(0.f), -22);  // floor 1e-4 -> 2.23e-7 = 1.87 * 2^-23
  EXPECT_EQ(pow2_float(-7), 0.0078125f);
}

TEST(Pow2Scale, MatchesFrexpOverSweep) {
  for (uint32_t u = float_bits(1e-4f); u < 0x7F000000u; u += 0x1234u) {
    float a = bits_float(u);
    ASSERT_EQ(pow2_scale_exponent(a), exponent_by_frexp(a)) << a;
  }
}

// SPEC.md §2.1: v = a' * fp32(1/448) yields the same exponent as the division, for all a'.
TEST(Pow2Scale, ReciprocalMultiplyGivesSameExponent) {
  const float inv = 1.0f / 448.0f;
  for (uint32_t u = float_bits(1e-4f); u < 0x7F000000u; u += 0x101u) {
    float a = bits_float(u);
    float v = a * inv;
    int e2;
    float m = std::frexp(v, &e2);
    int e = m == 0.5f ? e2 - 1 : e2;
    ASSERT_EQ(pow2_scale_exponent(a), e) << a;
  }
}

TEST(QuantizeBlock, DequantIsWithinHalfUlpAndScaleIsPowerOfTwo) {
  std::mt19937 gen(1234);
  for (int trial = 0; trial < 200; ++trial) {
    float x[128];
    uint8_t q[128];
    std::normal_distribution<float> dist(0.f, std::ldexp(1.f, trial % 40 - 20));
    for (auto& v : x) v = dist(gen);
    float s = quantize_block_pow2(x, 128, q);
    int e2;
    EXPECT_EQ(std::frexp(s, &e2), 0.5f) << "scale is not a power of two";
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (int i = 0; i < 128; ++i) {
      float back = e4m3_to_float(e4m3{q[i]}) * s;
      // e4m3 has 3 mantissa bits: relative error <= 2^-4, absolute floor 2^-10 * s (subnormals).
      EXPECT_LE(std::fabs(back - x[i]), std::fabs(x[i]) * 0.0625f + s * 0.001f) << i;
      EXPECT_LE(std::fabs(back), 448.f * s);
    }
    EXPECT_LE(amax / s, 448.f);
    if (amax >= 1e-4f) EXPECT_GT(amax / s, 224.f - 1e-3f) << "scale not the smallest power of two";
  }
}

}  // namespace
}  // namespace dsa
