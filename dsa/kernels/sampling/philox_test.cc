// Philox-4x32 against Random123's known-answer vectors (kat_vectors, 7 and 10 rounds), the key and
// counter layout of SPEC.md §6.3, and the exact U / gamma mapping.
#include "dsa/kernels/common/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsa/kernels/sampling/sampler.h"
#include "dsa/kernels/sampling/sampler_test_util.h"

namespace dsa::kernels {
namespace {

using namespace sampler_test;

struct Kat {
  PhiloxCounter ctr;
  PhiloxKey key;
  int rounds;
  PhiloxCounter want;
};

// Random123 kat_vectors, "philox4x32 R ctr[4] key[2] -> out[4]".
const Kat kKats[] = {
    {{{0, 0, 0, 0}}, {{0, 0}}, 10, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
     {{0xffffffff, 0xffffffff}},
     10,
     {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
     {{0xa4093822, 0x299f31d0}},
     10,
     {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
    {{{0, 0, 0, 0}}, {{0, 0}}, 7, {{0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
     {{0xffffffff, 0xffffffff}},
     7,
     {{0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
     {{0xa4093822, 0x299f31d0}},
     7,
     {{0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}}},
};

TEST(Philox, Random123KnownAnswers) {
  for (const Kat& k : kKats) {
    const PhiloxCounter got = philox4x32(k.ctr, k.key, k.rounds);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got.w[i], k.want.w[i])
          << "rounds " << k.rounds << " ctr[0] = " << std::hex << k.ctr.w[0] << " word " << i;
    }
  }
}

TEST(Philox, TenRoundsIsTheDefault) {
  const PhiloxCounter got = philox4x32_10(kKats[2].ctr, kKats[2].key);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.w[i], kKats[2].want.w[i]);
}

TEST(Philox, SeedIsKeyLowWordFirst) {
  const PhiloxKey k = philox_key(0x299f31d0a4093822ull);
  EXPECT_EQ(k.w[0], 0xa4093822u);
  EXPECT_EQ(k.w[1], 0x299f31d0u);
}

// uniform_noise is word (v mod 4) of Philox(key = seed, counter = (v / 4, p, 0, 0)).
TEST(Philox, UniformNoiseUsesTheSpecCounter) {
  const uint64_t seed = 0x299f31d0a4093822ull;
  for (int32_t v : {0, 1, 2, 3, 13, 6143}) {
    for (int64_t p : {0, 1, 77, 0x7fffffff}) {
      const PhiloxCounter c{{uint32_t(v / 4), uint32_t(p), 0, 0}};
      const uint32_t w = philox4x32_10(c, PhiloxKey{{0xa4093822u, 0x299f31d0u}}).w[v % 4];
      const float want = static_cast<float>((static_cast<double>(w >> 9) + 0.5) * 0x1p-23);
      EXPECT_EQ(uniform_noise(seed, p, v), want) << "v = " << v << " p = " << p;
    }
  }
  const PhiloxCounter c = sampling_counter(3, 77);
  EXPECT_EQ(c.w[0], 3u);
  EXPECT_EQ(c.w[1], 77u);
  EXPECT_EQ(c.w[2], 0u);
  EXPECT_EQ(c.w[3], 0u);
}

TEST(Philox, UniformEndsAndExactness) {
  EXPECT_EQ(uniform_from_word(0u), 0x1p-24f);
  EXPECT_EQ(uniform_from_word(0x1FFu), 0x1p-24f);  // the low 9 bits are dropped
  EXPECT_EQ(uniform_from_word(0x200u), 3 * 0x1p-24f);
  EXPECT_EQ(uniform_from_word(0xFFFFFFFFu), 1.f - 0x1p-24f);
  for (uint32_t w : {0u, 1u, 0x200u, 0x12345678u, 0x80000000u, 0xFFFFFE00u, 0xFFFFFFFFu}) {
    const float u = uniform_from_word(w);
    EXPECT_GT(u, 0.f);
    EXPECT_LT(u, 1.f);
    EXPECT_EQ(static_cast<double>(u), (static_cast<double>(w >> 9) + 0.5) * 0x1p-23) << w;
  }
}

TEST(Philox, NoiseIsInTheOpenIntervalAndExact) {
  for (uint64_t seed : {0ull, 1ull, 0xDEADBEEFCAFEF00Dull}) {
    for (int64_t p = 0; p < 64; ++p) {
      for (int32_t v = 0; v < 256; ++v) {
        const float u = uniform_noise(seed, p, v);
        ASSERT_GT(u, 0.f);
        ASSERT_LT(u, 1.f);
        const double m = static_cast<double>(u) * 0x1p23 - 0.5;  // exact in fp64
        ASSERT_EQ(m, std::floor(m)) << "U * 2^23 - 1/2 must be an integer: U = " << u;
        const float g = gumbel_noise(seed, p, v);
        ASSERT_EQ(g, static_cast<float>(-std::log(-std::log(static_cast<double>(u)))));
      }
    }
  }
}

TEST(Philox, GumbelRange) {
  const double lo = gumbel_from_uniform(uniform_from_word(0u));
  const double hi = gumbel_from_uniform(uniform_from_word(0xFFFFFFFFu));
  EXPECT_NEAR(lo, -std::log(24 * std::log(2.0)), 1e-6);  // -ln(-ln 2^-24)
  EXPECT_NEAR(hi, 16.6355, 1e-3);
  EXPECT_GT(lo, -2.82);
  EXPECT_LT(hi, 16.64);
}

// U binned into 64 cells over 2^18 draws (8 seeds x 128 positions x 256 tokens): uniform.
TEST(Philox, UniformIsUniform) {
  std::vector<int64_t> counts(64, 0);
  for (uint64_t s = 0; s < 8; ++s) {
    for (int64_t p = 0; p < 128; ++p) {
      for (int32_t v = 0; v < 256; ++v) ++counts[size_t(uniform_noise(mix64(s), p, v) * 64)];
    }
  }
  const std::vector<double> probs(64, 1.0 / 64);
  const ChiSquare c = chi_square(counts, probs);
  EXPECT_TRUE(c.pass()) << c.report;
  std::cout << "U uniformity: " << c.report << "\n";
}

// Gumbel(0, 1) has mean = Euler's gamma and variance pi^2 / 6; 2^16 draws, 6-sigma bound.
TEST(Philox, GumbelMoments) {
  double sum = 0, sum2 = 0;
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) {
    const double g = gumbel_noise(42, i / 64, i % 64);
    sum += g;
    sum2 += g * g;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  const double pi2_6 = M_PI * M_PI / 6;
  EXPECT_NEAR(mean, 0.5772156649, 6 * std::sqrt(pi2_6 / n));
  EXPECT_NEAR(var, pi2_6, 0.2);  // sd of the sample variance is about 0.03
}

}  // namespace
}  // namespace dsa::kernels
