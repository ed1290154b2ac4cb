// SPEC.md §6.6's distribution test, deterministic (fixed Philox seeds): the sampler's tokens for a
// synthetic row match pi, also under top-k and top-p. pi comes from the test-only oracle
// (sampler_oracle.h), not from sampling_distribution(), so a wrong filter rule in the sampler
// cannot hide behind the same rule in the expectation. Pearson chi-square at alpha = 1e-6, critical
// values by Wilson–Hilferty (printed). Acceptance: dsa/engine/acceptance_distribution_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <vector>

#include "dsa/kernels/sampling/sampler.h"
#include "dsa/kernels/sampling/sampler_oracle.h"
#include "dsa/kernels/sampling/sampler_test_util.h"

namespace dsa::kernels {
namespace {

using namespace sampler_test;

void expect_samples_match(const std::vector<float>& logits, SamplingParams p) {
  const std::vector<double> pi = sampler_oracle::distribution(logits, p);
  std::vector<int64_t> counts(logits.size(), 0);
  for (uint64_t seed : kSeeds) {
    p.seed = seed;
    for (int64_t pos = 0; pos < kDrawsPerSeed; ++pos)
      ++counts[size_t(sample_token(logits, p, pos))];
  }
  const ChiSquare c = chi_square(counts, pi);
  EXPECT_TRUE(c.pass()) << c.report;
  std::cout << "T = " << p.temperature << ", top_k = " << p.top_k << ", top_p = " << p.top_p << ": "
            << c.report << "\n";
}

TEST(SamplerDistribution, CriticalValues) {
  // Printed for the record; Wilson–Hilferty with z = 4.7534 (P(N > z) = 1e-6).
  EXPECT_NEAR(normal_upper_quantile(1e-6), 4.753424, 1e-5);
  EXPECT_NEAR(chi_square_critical(15, 1e-6), 57.358, 1e-2);
  EXPECT_NEAR(chi_square_critical(1, 1e-6), 27.504, 1e-2);
  for (int k : {1, 2, 4, 15}) {
    std::cout << "chi-square critical value, alpha = 1e-6, dof = " << k << ": "
              << chi_square_critical(k, 1e-6) << "\n";
  }
}

// The test must be able to fail: the same counts judged against a slightly wrong pi fail.
TEST(SamplerDistribution, DetectsAWrongDistribution) {
  const std::vector<float> logits = synthetic_logits(1);
  SamplingParams p{.temperature = 1.f};
  std::vector<double> pi = sampler_oracle::distribution(logits, p);
  std::vector<int64_t> counts(logits.size(), 0);
  for (uint64_t seed : kSeeds) {
    p.seed = seed;
    for (int64_t pos = 0; pos < kDrawsPerSeed; ++pos)
      ++counts[size_t(sample_token(logits, p, pos))];
  }
  // Temperature 1.1 instead of 1: a mild error the test must see.
  const std::vector<double> wrong =
      sampler_oracle::distribution(logits, SamplingParams{.temperature = 1.1f});
  EXPECT_FALSE(chi_square(counts, wrong).pass()) << chi_square(counts, wrong).report;
  EXPECT_TRUE(chi_square(counts, pi).pass()) << chi_square(counts, pi).report;
}

TEST(SamplerDistribution, PlainSoftmax) {
  expect_samples_match(synthetic_logits(1), {.temperature = 1.f});
}
TEST(SamplerDistribution, Temperature) {
  expect_samples_match(synthetic_logits(2), {.temperature = 0.6f});
  expect_samples_match(synthetic_logits(3), {.temperature = 2.5f});
}
TEST(SamplerDistribution, TopK) {
  expect_samples_match(synthetic_logits(4), {.temperature = 1.f, .top_k = 5});
}
TEST(SamplerDistribution, TopP) {
  expect_samples_match(synthetic_logits(5), {.temperature = 1.f, .top_p = 0.8f});
}
TEST(SamplerDistribution, TopKAndTopP) {
  expect_samples_match(synthetic_logits(6), {.temperature = 0.8f, .top_p = 0.9f, .top_k = 8});
}
// Ties in the logits: pi splits evenly, and Gumbel-max must too.
TEST(SamplerDistribution, TiedLogits) {
  expect_samples_match({1, 1, 1, 0, 0, 2, 2, -1}, {.temperature = 1.f});
}
// top-k cutting through a tie keeps the lower ids; NaN and -inf are never drawn.
TEST(SamplerDistribution, TopKThroughATieWithNanAndMinusInf) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float minus_inf = -std::numeric_limits<float>::infinity();
  expect_samples_match({1, nan, 1, 1, minus_inf, 2, 0.5f, 2}, {.temperature = 1.f, .top_k = 4});
}

}  // namespace
}  // namespace dsa::kernels
