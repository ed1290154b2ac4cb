// Simulated acceptance (simulated_acceptance.h): the drawn counts have the requested mean, are
// deterministic per (seed, position), stay in [0, d], and the forced step emits the drafts it
// accepted then the target's own token from the verify row after them.
#include "dsa/engine/simulated_acceptance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace dsa::engine {
namespace {

// Over N (seed, position) draws the mean accept length is within kTol of L. The per-draw variance
// of the two-point distribution is at most 1/4, so the standard error is <= 0.5 / sqrt(N) = 0.0035
// at N = 20000 and kTol = 0.02 is more than 5 of them; the draws are a fixed hash, so the test is
// deterministic either way.
TEST(SimulatedAcceptance, MeanAcceptLengthConvergesToTheRequestedOne) {
  constexpr int kN = 20000;
  constexpr double kTol = 0.02;
  for (int32_t d : {1, 3, 7}) {
    for (double L : {1.0, 1.3, 2.0, 2.5, 2.7, 3.9, 4.0, 8.0}) {
      if (L > d + 1) continue;
      double sum = 0;
      for (int i = 0; i < kN; ++i) {
        const int32_t a = simulated_accepted(L, d, /*seed=*/uint64_t(i % 7), /*position=*/i + 1);
        ASSERT_GE(a, 0);
        ASSERT_LE(a, d);
        // Two-point: floor(L - 1) or the integer above it, nothing else.
        ASSERT_TRUE(a == int32_t(std::floor(L - 1)) || a == int32_t(std::floor(L - 1)) + 1)
            << "L " << L << " a " << a;
        sum += a + 1;
      }
      EXPECT_NEAR(sum / kN, L, kTol) << "d = " << d << ", L = " << L;
    }
  }
}

TEST(SimulatedAcceptance, IntegerLengthsAreExact) {
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(simulated_accepted(1.0, 3, 5, i), 0);
    EXPECT_EQ(simulated_accepted(3.0, 3, 5, i), 2);
    EXPECT_EQ(simulated_accepted(4.0, 3, 5, i), 3);
  }
}

TEST(SimulatedAcceptance, DeterministicPerSeedAndPosition) {
  std::vector<int32_t> a, b, c;
  for (int64_t p = 1; p <= 200; ++p) {
    a.push_back(simulated_accepted(2.5, 3, 42, p));
    b.push_back(simulated_accepted(2.5, 3, 42, p));
    c.push_back(simulated_accepted(2.5, 3, 43, p));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c) << "another seed should draw another sequence";
}

TEST(SimulatedAcceptance, RefusesLengthsOutsideOneToDPlusOne) {
  EXPECT_TRUE(validate_simulated_accept_length(1.0, 1).ok());
  EXPECT_TRUE(validate_simulated_accept_length(4.0, 3).ok());
  for (double bad :
       {0.0, 0.99, 4.01, 100.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    const Status s = validate_simulated_accept_length(bad, 3);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
  }
  const Status no_spec = validate_simulated_accept_length(2.0, 0);
  EXPECT_EQ(no_spec.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_spec.message().find("speculative"), std::string::npos) << no_spec.message();
}

// Forced a: the emitted tokens are g_1..g_a, then the target's greedy token of row a, whatever the
// drafts and the other rows say.
TEST(SimulatedAcceptance, ForcedStepEmitsTheAcceptedDraftsThenTheTargetsToken) {
  constexpr int32_t kVocab = 8, kD = 3;
  std::vector<float> logits(size_t(kD + 1) * kVocab, 0.0f);
  for (int32_t j = 0; j <= kD; ++j) logits[size_t(j) * kVocab + size_t(j + 4)] = 5.0f;  // y = j + 4
  const std::vector<int32_t> drafts = {1, 2, 3};  // none is what the target predicts
  const SamplingParams greedy{};
  for (int32_t a = 0; a <= kD; ++a) {
    AcceptResult r = force_acceptance(logits, kVocab, drafts, greedy, 10, a);
    EXPECT_EQ(r.accepted, a);
    std::vector<int32_t> want(drafts.begin(), drafts.begin() + a);
    want.push_back(a + 4);
    EXPECT_EQ(r.emitted, want) << "a = " << a;
  }
  // Real acceptance rejects the first draft here: the forced count really overrides it.
  EXPECT_EQ(accept_drafts(logits, kVocab, drafts, greedy, 10).accepted, 0);
}

}  // namespace
}  // namespace dsa::engine
