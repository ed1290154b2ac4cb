// SPEC.md §6.6's acceptance distribution test, deterministic (fixed Philox seeds): for a one-hot
// draft g, accept_drafts (d = 1) accepts with frequency pi(g), and after a rejection emits tokens
// distributed as pi restricted to v != g. Pearson chi-square at alpha = 1e-6 (critical values by
// Wilson–Hilferty, printed), with the sampler tests' helpers. pi comes from the sampler tests'
// independent oracle (sampler_oracle.h), not from the sampler's own sampling_distribution().
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "dsa/engine/acceptance.h"
#include "dsa/kernels/sampling/sampler.h"
#include "dsa/kernels/sampling/sampler_oracle.h"
#include "dsa/kernels/sampling/sampler_test_util.h"

namespace dsa::engine {
namespace {

using namespace kernels::sampler_test;
using kernels::SamplingParams;
namespace oracle = kernels::sampler_oracle;

// Runs accept_drafts with drafts {g} on rows [row0, row1] at first positions 2i (disjoint noise per
// trial) over the fixed seeds, and checks: P(accept) = pi0(g); after a rejection the correction is
// pi0 restricted to v != g; after an acceptance the bonus is pi1; overall the first emitted token
// is pi0 (the target's distribution).
void expect_acceptance_matches(const std::vector<float>& row0, const std::vector<float>& row1,
                               int32_t g, SamplingParams p) {
  const auto vocab = static_cast<int32_t>(row0.size());
  std::vector<float> verify(row0);
  verify.insert(verify.end(), row1.begin(), row1.end());
  const std::vector<double> pi0 = oracle::distribution(row0, p);
  const std::vector<double> pi1 = oracle::distribution(row1, p);
  std::vector<double> residual(pi0);
  residual[size_t(g)] = 0;
  for (double& x : residual) x /= 1 - pi0[size_t(g)];

  std::vector<int64_t> accepts(2, 0), corrections(size_t(vocab), 0), bonus(size_t(vocab), 0),
      first(size_t(vocab), 0);
  const int32_t drafts[] = {g};
  for (uint64_t seed : kSeeds) {
    p.seed = seed;
    for (int64_t i = 0; i < kDrawsPerSeed; ++i) {
      const AcceptResult r = accept_drafts(verify, vocab, drafts, p, 2 * i);
      ASSERT_EQ(r.emitted.size(), size_t(r.accepted) + 1);
      ++accepts[size_t(r.accepted)];
      ++first[size_t(r.emitted[0])];
      if (r.accepted == 1) {
        ASSERT_EQ(r.emitted[0], g);
        ++bonus[size_t(r.emitted[1])];
      } else {
        ASSERT_NE(r.emitted[0], g);
        ++corrections[size_t(r.emitted[0])];
      }
    }
  }
  const std::vector<double> accept_pi = {1 - pi0[size_t(g)], pi0[size_t(g)]};
  const ChiSquare ca = chi_square(accepts, accept_pi), cc = chi_square(corrections, residual),
                  cb = chi_square(bonus, pi1), cf = chi_square(first, pi0);
  if (pi0[size_t(g)] == 0) {
    EXPECT_EQ(accepts[1], 0) << "a draft with pi(g) = 0 must never be accepted";
  } else {
    EXPECT_TRUE(ca.pass()) << "acceptance frequency vs pi(g) = " << pi0[size_t(g)] << ": "
                           << ca.report;
    EXPECT_TRUE(cb.pass()) << "bonus tokens vs pi1: " << cb.report;
  }
  EXPECT_TRUE(cc.pass()) << "corrections vs pi restricted to v != g: " << cc.report;
  EXPECT_TRUE(cf.pass()) << "first emitted token vs pi0: " << cf.report;
  std::cout << "g = " << g << ", pi(g) = " << pi0[size_t(g)] << ", accepted " << accepts[1] << " / "
            << accepts[0] + accepts[1] << "\n  accept: " << ca.report
            << "\n  residual: " << cc.report << "\n  bonus: " << cb.report
            << "\n  first: " << cf.report << "\n";
}

TEST(AcceptanceDistribution, OfALikelyDraft) {
  const std::vector<float> row0 = synthetic_logits(7), row1 = synthetic_logits(8);
  const SamplingParams p{.temperature = 1.f};
  const std::vector<double> pi0 = oracle::distribution(row0, p);
  int32_t g = 0;  // the most likely token
  for (int32_t v = 1; v < 16; ++v) g = pi0[size_t(v)] > pi0[size_t(g)] ? v : g;
  expect_acceptance_matches(row0, row1, g, p);
}

TEST(AcceptanceDistribution, OfAnUnlikelyDraft) {
  const std::vector<float> row0 = synthetic_logits(9), row1 = synthetic_logits(10);
  const SamplingParams p{.temperature = 1.f};
  const std::vector<double> pi0 = oracle::distribution(row0, p);
  int32_t g = 0;  // the least likely token
  for (int32_t v = 1; v < 16; ++v) g = pi0[size_t(v)] < pi0[size_t(g)] ? v : g;
  expect_acceptance_matches(row0, row1, g, p);
}

TEST(AcceptanceDistribution, WithTopKAndTopP) {
  const std::vector<float> row0 = synthetic_logits(11), row1 = synthetic_logits(12);
  const SamplingParams p{.temperature = 0.9f, .top_p = 0.85f, .top_k = 6};
  const std::vector<double> pi0 = oracle::distribution(row0, p);
  int32_t g = -1;  // the second most likely kept token
  std::vector<int32_t> order;
  for (int32_t v = 0; v < 16; ++v) order.push_back(v);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return pi0[size_t(a)] > pi0[size_t(b)]; });
  g = order[1];
  ASSERT_GT(pi0[size_t(g)], 0);
  expect_acceptance_matches(row0, row1, g, p);
}

// A draft outside the filtered support is never accepted, and the corrections are pi itself.
TEST(AcceptanceDistribution, OfAFilteredDraft) {
  const std::vector<float> row0 = synthetic_logits(13), row1 = synthetic_logits(14);
  const SamplingParams p{.temperature = 1.f, .top_k = 4};
  const std::vector<double> pi0 = oracle::distribution(row0, p);
  int32_t g = 0;
  while (pi0[size_t(g)] > 0) ++g;
  expect_acceptance_matches(row0, row1, g, p);
}

}  // namespace
}  // namespace dsa::engine
