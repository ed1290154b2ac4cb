// The sampler (SPEC.md §6.2, §6.3): parameter validation, greedy argmax and its tie rule, the
// temperature / top-k / top-p filter on hand-computed tiny vocabularies, agreement with §6.3's
// formula on a V = 6144 row, determinism and independence of the noise across positions and seeds.
#include "dsa/kernels/sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dsa/kernels/sampling/sampler_test_util.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using namespace sampler_test;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

SamplingParams sampled(float t, int32_t top_k = 0, float top_p = 1.f, uint64_t seed = 7) {
  return SamplingParams{.temperature = t, .top_p = top_p, .top_k = top_k, .seed = seed};
}

void expect_pi(const std::vector<float>& logits, const SamplingParams& p,
               const std::vector<double>& want) {
  const std::vector<double> pi = sampling_distribution(logits, p);
  ASSERT_EQ(pi.size(), want.size());
  for (size_t v = 0; v < want.size(); ++v) {
    EXPECT_NEAR(pi[v], want[v], 1e-7) << "pi[" << v << "] (T = " << p.temperature
                                      << ", top_k = " << p.top_k << ", top_p = " << p.top_p << ")";
    if (want[v] == 0) EXPECT_EQ(pi[v], 0.0) << "token " << v << " must be filtered out";
  }
}

// ---- validate ----------------------------------------------------------------------------------

void expect_rejected(const SamplingParams& p, const std::string& needle) {
  const Status s = validate(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
}

TEST(SamplerValidate, AcceptsTheBoundaries) {
  EXPECT_TRUE(validate(SamplingParams{}).ok());
  EXPECT_TRUE(validate(sampled(1e-30f)).ok());
  EXPECT_TRUE(validate(sampled(1e30f, 0, 1.f)).ok());
  EXPECT_TRUE(validate(sampled(1.f, 0, 1e-9f)).ok());
  EXPECT_TRUE(validate(sampled(1.f, std::numeric_limits<int32_t>::max(), 1.f)).ok());
}
TEST(SamplerValidate, NegativeTemperature) {
  expect_rejected(sampled(-1.f), "temperature = -1: must be >= 0");
}
TEST(SamplerValidate, NanTemperature) {
  expect_rejected(sampled(kNan), "temperature = nan: must be finite");
}
TEST(SamplerValidate, InfiniteTemperature) {
  expect_rejected(sampled(kInf), "temperature = inf: must be finite");
  expect_rejected(sampled(-kInf), "temperature = -inf: must be finite");
}
TEST(SamplerValidate, TopPZero) {
  expect_rejected(sampled(1.f, 0, 0.f), "top_p = 0: must be in (0, 1]");
}
TEST(SamplerValidate, TopPNegative) {
  expect_rejected(sampled(1.f, 0, -0.5f), "top_p = -0.5: must be in (0, 1]");
}
TEST(SamplerValidate, TopPAboveOne) {
  expect_rejected(sampled(1.f, 0, 1.5f), "top_p = 1.5: must be in (0, 1]");
}
TEST(SamplerValidate, TopPNan) {
  expect_rejected(sampled(1.f, 0, kNan), "top_p = nan: must be in (0, 1]");
}
TEST(SamplerValidate, TopKNegative) {
  expect_rejected(sampled(1.f, -1), "top_k = -1: must be >= 0 (0 = off)");
}
// The rules also apply at temperature 0, where top-k and top-p are unused.
TEST(SamplerValidate, GreedyStillChecksFilters) {
  expect_rejected(sampled(0.f, -3), "top_k = -3");
  expect_rejected(sampled(0.f, 0, 2.f), "top_p = 2");
}

// ---- greedy ------------------------------------------------------------------------------------

int32_t greedy(const std::vector<float>& logits, uint64_t seed = 0, int64_t pos = 0) {
  return sample_token(logits, SamplingParams{.seed = seed}, pos);
}

TEST(SamplerGreedy, ArgmaxAndLowestIdOnTies) {
  EXPECT_EQ(greedy({1, 3, 3, 2}), 1);
  EXPECT_EQ(greedy({5, 1, 5}), 0);
  EXPECT_EQ(greedy({-2, -1, -3}), 1);
  EXPECT_EQ(greedy({kInf, kInf, 1}), 0);
  EXPECT_EQ(greedy({1, kInf, kInf}), 1);
}
TEST(SamplerGreedy, NanNeverWins) {
  EXPECT_EQ(greedy({kNan, 1, kNan, 0}), 1);
  EXPECT_EQ(greedy({0, kNan, 9}), 2);
  EXPECT_EQ(greedy({kNan, -kInf, -5}), 2);
}
TEST(SamplerGreedy, NoEligibleToken) {
  EXPECT_EQ(greedy({}), kNoToken);
  EXPECT_EQ(greedy({kNan, kNan}), kNoToken);
  EXPECT_EQ(greedy({-kInf, kNan, -kInf}), kNoToken);
  EXPECT_EQ(sampling_distribution(std::vector<float>{kNan}, SamplingParams{}),
            std::vector<double>{0.0});
}
TEST(SamplerGreedy, IgnoresSeedAndPositionAndIsOneHot) {
  testing::Rng rng(testing::test_seed());
  std::vector<float> logits = rng.normal_vector(6144);
  logits[4321] = 10.f;
  for (uint64_t seed : {0ull, 1ull, 99ull}) {
    for (int64_t pos : {0, 5, 100000}) EXPECT_EQ(greedy(logits, seed, pos), 4321);
  }
  const std::vector<double> pi = sampling_distribution(logits, SamplingParams{});
  EXPECT_EQ(pi[4321], 1.0);
  double total = 0;
  for (double x : pi) total += x;
  EXPECT_EQ(total, 1.0);
}

// ---- the filter, hand-computed -----------------------------------------------------------------

TEST(SamplerFilter, Temperature) {
  // logits {0, 2 ln 2} at T = 2 -> scaled {0, ln 2} -> pi {1/3, 2/3}.
  expect_pi({0.f, static_cast<float>(2 * std::log(2.0))}, sampled(2.f), {1.0 / 3, 2.0 / 3});
  // T = 1: plain softmax.
  const double z = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  expect_pi({1, 2, 3, 0}, sampled(1.f),
            {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z, 1 / z});
}

TEST(SamplerFilter, TopK) {
  const double e = std::exp(1.0);
  expect_pi({1, 2, 3, 0}, sampled(1.f, 2), {0, 1 / (1 + e), e / (1 + e), 0});
  expect_pi({1, 2, 3, 0}, sampled(1.f, 1), {0, 0, 1, 0});
  // top_k >= V is off.
  const double z = 1 + e + e * e + e * e * e;
  for (int32_t k : {4, 5, 1000}) {
    expect_pi({1, 2, 3, 0}, sampled(1.f, k), {e / z, e * e / z, e * e * e / z, 1 / z});
  }
}

// Ties at the top-k boundary keep the lower ids.
TEST(SamplerFilter, TopKTiesKeepLowerIds) {
  expect_pi({1, 5, 5, 5, 0}, sampled(1.f, 2), {0, 0.5, 0.5, 0, 0});
  expect_pi({1, 5, 5, 5, 0}, sampled(1.f, 3), {0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
  expect_pi({7, 7, 7, 7}, sampled(3.f, 1), {1, 0, 0, 0});
}

// Probabilities of {1, 2, 3, 0} sorted: 0.64391, +0.23688 = 0.88079, +0.08714 = 0.96793, +0.03207.
TEST(SamplerFilter, TopPSmallestPrefixReachingP) {
  const double e = std::exp(1.0), z2 = e * e + e * e * e, z3 = e + z2;
  expect_pi({1, 2, 3, 0}, sampled(1.f, 0, 0.6f), {0, 0, 1, 0});
  expect_pi({1, 2, 3, 0}, sampled(1.f, 0, 0.88f), {0, e * e / z2, e * e * e / z2, 0});
  expect_pi({1, 2, 3, 0}, sampled(1.f, 0, 0.881f), {e / z3, e * e / z3, e * e * e / z3, 0});
  expect_pi({1, 2, 3, 0}, sampled(1.f, 0, 0.967f), {e / z3, e * e / z3, e * e * e / z3, 0});
  const double z4 = 1 + z3;
  expect_pi({1, 2, 3, 0}, sampled(1.f, 0, 0.968f), {e / z4, e * e / z4, e * e * e / z4, 1 / z4});
}

// A prefix whose mass equals top_p exactly is enough; ties are ordered by lower id.
TEST(SamplerFilter, TopPExactBoundaryAndTies) {
  expect_pi({2, 2, 2, 2}, sampled(1.f, 0, 0.5f), {0.5, 0.5, 0, 0});
  expect_pi({2, 2, 2, 2}, sampled(1.f, 0, 0.25f), {1, 0, 0, 0});
  expect_pi({2, 2, 2, 2}, sampled(1.f, 0, 0.5000001f), {1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
  expect_pi({0, 3, 0, 3}, sampled(1.f, 0, 0.1f), {0, 1, 0, 0});
}

// top-p acts on the distribution renormalised after top-k: after top_k = 2 token 2 alone has mass
// 0.731 >= 0.7 (on the unfiltered distribution it would have 0.644 and token 1 would stay).
TEST(SamplerFilter, TopPAfterTopK) {
  expect_pi({1, 2, 3, 0}, sampled(1.f, 2, 0.7f), {0, 0, 1, 0});
  const double e = std::exp(1.0);
  expect_pi({1, 2, 3, 0}, sampled(1.f, 2, 0.75f), {0, 1 / (1 + e), e / (1 + e), 0});
}

TEST(SamplerFilter, NonFiniteLogits) {
  expect_pi({kNan, 0, 0, -kInf}, sampled(1.f), {0, 0.5, 0.5, 0});
  expect_pi({0, kInf, 3, kInf}, sampled(0.5f), {0, 0.5, 0, 0.5});
  expect_pi({kNan, -kInf}, sampled(1.f), {0, 0});
  EXPECT_EQ(sample_token(std::vector<float>{kNan, -kInf}, sampled(1.f), 3), kNoToken);
  EXPECT_EQ(sample_token(std::vector<float>{}, sampled(1.f), 3), kNoToken);
  for (int64_t pos = 0; pos < 50; ++pos) {
    const int32_t y = sample_token(std::vector<float>{0, kInf, 3, kInf}, sampled(1.f), pos);
    EXPECT_TRUE(y == 1 || y == 3) << y;
  }
}

// A tiny temperature scales logits past fp32 range; the fp64 scaling keeps the order.
TEST(SamplerFilter, TinyTemperatureIsGreedyLike) {
  for (int64_t pos = 0; pos < 50; ++pos) {
    EXPECT_EQ(sample_token(std::vector<float>{1e30f, 2e30f, -3e38f}, sampled(1e-30f), pos), 1);
  }
  expect_pi({1e30f, 2e30f, -3e38f}, sampled(1e-30f), {0, 1, 0});
}

// ---- sampling ----------------------------------------------------------------------------------

// §6.3 verbatim: argmax over pi(v) > 0 of log pi(v) + gamma_p(v), ties to the lowest id.
int32_t spec_sample(std::span<const float> logits, const SamplingParams& p, int64_t pos) {
  const std::vector<double> pi = sampling_distribution(logits, p);
  int32_t best = kNoToken;
  double best_score = 0;
  for (int32_t v = 0; v < static_cast<int32_t>(pi.size()); ++v) {
    if (pi[size_t(v)] <= 0) continue;
    const double s = std::log(pi[size_t(v)]) + static_cast<double>(gumbel_noise(p.seed, pos, v));
    if (best == kNoToken || s > best_score) best = v, best_score = s;
  }
  return best;
}

TEST(SamplerSample, MatchesSpecFormulaOnFullVocabulary) {
  const uint64_t seed = testing::test_seed();
  testing::Rng rng(seed);
  int checked = 0;
  for (float scale : {0.5f, 3.f, 30.f}) {
    const std::vector<float> logits = rng.normal_vector(6144, scale);
    for (const SamplingParams& p :
         {sampled(1.f, 0, 1.f, seed), sampled(0.7f, 0, 1.f, seed + 1), sampled(1.3f, 50, 1.f, 3),
          sampled(1.f, 0, 0.9f, 4), sampled(0.8f, 400, 0.95f, 5), sampled(2.f, 6143, 1.f, 6)}) {
      for (int64_t pos = 0; pos < 24; ++pos) {
        EXPECT_EQ(sample_token(logits, p, pos), spec_sample(logits, p, pos))
            << "scale " << scale << " T " << p.temperature << " top_k " << p.top_k << " top_p "
            << p.top_p << " pos " << pos;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * 6 * 24);
}

TEST(SamplerSample, TopKOneAndTinyTopPAreArgmax) {
  testing::Rng rng(testing::test_seed());
  const std::vector<float> logits = rng.normal_vector(6144, 2.f);
  const int32_t want = greedy(logits);
  for (int64_t pos = 0; pos < 32; ++pos) {
    EXPECT_EQ(sample_token(logits, sampled(1.5f, 1, 1.f, uint64_t(pos)), pos), want);
    EXPECT_EQ(sample_token(logits, sampled(1.5f, 0, 1e-7f, uint64_t(pos)), pos), want);
  }
}

TEST(SamplerSample, OnlyTokensInTheSupport) {
  const std::vector<float> logits = {1, 2, 3, 0, -1, 2.5f};
  const SamplingParams p = sampled(1.f, 3, 0.9f, 11);
  const std::vector<double> pi = sampling_distribution(logits, p);
  for (int64_t pos = 0; pos < 2000; ++pos) {
    const int32_t y = sample_token(logits, p, pos);
    ASSERT_GT(pi[size_t(y)], 0) << "token " << y << " at position " << pos;
  }
}

TEST(SamplerSample, DeterministicInSeedAndPosition) {
  testing::Rng rng(testing::test_seed());
  const std::vector<float> logits = rng.normal_vector(6144);
  int differs_by_position = 0, differs_by_seed = 0;
  for (int64_t pos = 0; pos < 64; ++pos) {
    const SamplingParams p = sampled(1.f, 0, 1.f, 1234);
    const int32_t y = sample_token(logits, p, pos);
    EXPECT_EQ(sample_token(logits, p, pos), y);
    EXPECT_EQ(sample_token(logits, SamplingParams(p), pos), y);
    differs_by_position += sample_token(logits, p, pos + 1) != y;
    differs_by_seed += sample_token(logits, sampled(1.f, 0, 1.f, 1235), pos) != y;
  }
  // Near-uniform over 6144 tokens: a repeat has probability ~1e-3 per pair.
  EXPECT_GE(differs_by_position, 60);
  EXPECT_GE(differs_by_seed, 60);
}

// Pairs of tokens from a uniform pi over 4 tokens, 2^16 pairs: (position 2i, 2i + 1) under one
// seed, and (seed s, seed s + 1) at one position, must be uniform over the 16 pairs.
TEST(SamplerSample, IndependentAcrossPositionsAndSeeds) {
  const std::vector<float> logits = {0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<double> uniform16(16, 1.0 / 16);
  std::vector<int64_t> by_position(16, 0), by_seed(16, 0);
  for (int64_t i = 0; i < (1 << 16); ++i) {
    const SamplingParams p = sampled(1.f, 0, 1.f, 0x5EED);
    ++by_position[size_t(4 * sample_token(logits, p, 2 * i) + sample_token(logits, p, 2 * i + 1))];
    const int32_t a = sample_token(logits, sampled(1.f, 0, 1.f, mix64(2 * uint64_t(i))), 1000);
    const int32_t b = sample_token(logits, sampled(1.f, 0, 1.f, mix64(2 * uint64_t(i) + 1)), 1000);
    ++by_seed[size_t(4 * a + b)];
  }
  const ChiSquare cp = chi_square(by_position, uniform16), cs = chi_square(by_seed, uniform16);
  EXPECT_TRUE(cp.pass()) << "positions: " << cp.report;
  EXPECT_TRUE(cs.pass()) << "seeds: " << cs.report;
  std::cout << "pairs over positions: " << cp.report << "\npairs over seeds: " << cs.report << "\n";
}

}  // namespace
}  // namespace dsa::kernels
