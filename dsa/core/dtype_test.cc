// Exhaustive and sweep tests of the bf16 and e4m3 conversions against independent formulations:
// the nearest representable value found by search over the whole code table, ties to even.
#include "dsa/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace dsa {
namespace {

// All 254 finite e4m3 values decoded from the definition: (-1)^s * 2^(E-7) * (1 + M/8), or
// 2^-6 * M/8 for E = 0.
double e4m3_by_definition(int code) {
  int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

TEST(E4m3, DecodesEveryCode) {
  for (int c = 0; c < 256; ++c) {
    float f = e4m3_to_float(e4m3{uint8_t(c)});
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(double(f), e4m3_by_definition(c)) << c;
    EXPECT_EQ(std::signbit(f), bool(c & 0x80)) << c;
  }
  EXPECT_EQ(e4m3_to_float(e4m3{0x7E}), 448.f);
  EXPECT_EQ(e4m3_to_float(e4m3{0x01}), std::ldexp(1.f, -9));
}

TEST(E4m3, RoundTripsEveryFiniteCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(e4m3{uint8_t(c)})).bits, c) << c;
  }
}

// Reference encoder: clamp to +-448, then the nearest of the non-negative codes 0..0x7E,
// ties to the even code (even mantissa LSB), sign applied afterwards.
uint8_t e4m3_reference(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  double a = std::min(std::fabs(double(x)), 448.0);
  int best = 0;
  double best_err = INFINITY;
  for (int c = 0; c <= 0x7E; ++c) {
    double err = std::fabs(e4m3_by_definition(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return uint8_t(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(E4m3, MatchesNearestEvenOnSweep) {
  std::vector<float> xs = {0.f,
                           -0.f,
                           448.f,
                           -448.f,
                           449.f,
                           464.f,
                           465.f,
                           1e9f,
                           -1e9f,
                           INFINITY,
                           -INFINITY,
                           std::ldexp(1.f, -10),
                           std::ldexp(3.f, -11),
                           std::ldexp(1.f, -11),
                           1e-30f};
  // Every midpoint between adjacent codes and its float neighbours: the tie cases.
  for (int c = 0; c < 0x7E; ++c) {
    float mid = float((e4m3_by_definition(c) + e4m3_by_definition(c + 1)) / 2);
    for (float v : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) {
      xs.push_back(v);
      xs.push_back(-v);
    }
  }
  // A sweep of fp32 bit patterns over the whole magnitude range.
  for (uint32_t u = 0x30000000u; u < 0x44000000u; u += 0x1F3u) {
    xs.push_back(bits_float(u));
    xs.push_back(-bits_float(u));
  }
  for (float x : xs) EXPECT_EQ(float_to_e4m3(x).bits, e4m3_reference(x)) << x;
}

TEST(E4m3, SaturatesAndKeepsSignOfZeroAndNaN) {
  EXPECT_EQ(float_to_e4m3(1e6f).bits, 0x7E);
  EXPECT_EQ(float_to_e4m3(-INFINITY).bits, 0xFE);
  EXPECT_EQ(float_to_e4m3(-0.f).bits, 0x80);
  EXPECT_EQ(float_to_e4m3(NAN).bits & 0x7F, 0x7F);
}

TEST(Bf16, RoundTripsEveryCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    float f = bf16_to_float(bf16{uint16_t(c)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f)))) << c;
      continue;
    }
    EXPECT_EQ(float_to_bf16(f).bits, c) << c;
  }
}

// Reference: the two bf16 neighbours of x by truncation, the nearer wins, ties to even, computed
// in double.
uint16_t bf16_reference(float x) {
  uint32_t u = float_bits(x);
  uint16_t lo = uint16_t(u >> 16);
  uint16_t hi = uint16_t(lo + 1);
  double dl = std::fabs(double(x) - double(bf16_to_float(bf16{lo})));
  double dh = std::fabs(double(bf16_to_float(bf16{hi})) - double(x));
  if ((u & 0xFFFF) == 0) return lo;
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Bf16, MatchesNearestEvenOnSweep) {
  int checked = 0;
  for (uint64_t u = 0; u < 0x7F7F0000ull; u += 0x3FF1ull) {  // finite, below the top binade
    for (uint32_t v : {uint32_t(u), uint32_t(u) | 0x8000u, uint32_t(u) | 0x80000000u}) {
      float x = bits_float(v);
      ASSERT_EQ(float_to_bf16(x).bits, bf16_reference(x)) << std::hex << v;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100000);
  EXPECT_EQ(float_to_bf16(1.00390625f).bits, 0x3F80);  // tie: 1 + 2^-8 -> even (1.0)
  EXPECT_EQ(float_to_bf16(1.01171875f).bits, 0x3F82);  // tie: 1 + 3 * 2^-8 -> even (0x3F82)
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()).bits, 0x7F80);  // rounds to inf
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

}  // namespace
}  // namespace dsa
