// Simulated acceptance in the engine on the tiny model (CPU): the measured mean accept length
// follows the requested one, runs are deterministic, and the cache stays consistent with the
// emitted tokens — every token the target itself chose (the first, and the last of each step) is
// what plain greedy decoding of the emitted prefix gives.
#include <gtest/gtest.h>

#include <cstdio>

#include "dsa/engine/engine.h"
#include "dsa/engine/engine_test_util.h"

namespace dsa::engine {
namespace {

using testing::generate;
using testing::heldout_prompts;
using testing::tiny_model;

EngineOptions simulated(double L) {
  EngineOptions o;
  o.simulate_accept_length = L;
  return o;
}

// L = 1 forces a = 0: each step emits the target's token of verify row 0, which is plain greedy
// decoding; L = d + 1 with drafts that are the greedy continuation accepts them all, again greedy.
TEST(EngineSimulatedAcceptance, ExtremesReproduceGreedyDecoding) {
  auto prompts = heldout_prompts({25, 50});
  const std::vector<int32_t> max_new = {22, 17};
  auto base_model = tiny_model(0, 2);
  auto base = generate(*base_model, prompts, max_new);
  const int32_t d = 3;
  auto m = tiny_model(d, 2);
  auto one = generate(*m, prompts, max_new, {}, simulated(1.0));
  EngineOptions full = simulated(d + 1);
  full.draft_override = [&](const RequestState& r, std::vector<int32_t>& drafts) {
    const auto& out = base.outputs[size_t(r.id)];
    for (int32_t j = 0; j < d; ++j) {
      const int32_t k = r.committed + 1 + j - r.prompt_len();
      drafts[size_t(j)] = k < int32_t(out.size()) ? out[size_t(k)] : 0;
    }
  };
  auto all = generate(*m, prompts, max_new, {}, full);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(one.outputs[i], base.outputs[i]) << "request " << i;
    EXPECT_EQ(all.outputs[i], base.outputs[i]) << "request " << i;
    for (int32_t x : one.accept_lengths[i]) EXPECT_EQ(x, 1);
    for (int32_t x : all.accept_lengths[i]) EXPECT_EQ(x, d + 1);
  }
}

// L = 2.5 at d = 3 over 4 requests x 60 tokens (~90 verify steps): the draws' standard error is
// at most 0.5 / sqrt(90) = 0.053, so 0.2 is ~4 of them (the draws are a fixed hash: no flake).
TEST(EngineSimulatedAcceptance, MeasuredMeanFollowsTheRequestedLengthDeterministically) {
  auto prompts = heldout_prompts({30, 20, 40, 10});
  const std::vector<int32_t> max_new(4, 60);
  auto m = tiny_model(3, 4);
  auto r1 = generate(*m, prompts, max_new, {}, simulated(2.5));
  auto r2 = generate(*m, prompts, max_new, {}, simulated(2.5));
  EXPECT_EQ(r1.outputs, r2.outputs);
  EXPECT_EQ(r1.accept_lengths, r2.accept_lengths);
  std::printf("simulated 2.5: measured mean accept length %.3f over %lld verify steps\n",
              r1.metrics.mean_accept_length(), (long long)r1.metrics.verify_steps);
  EXPECT_GT(r1.metrics.verify_steps, 60);
  EXPECT_NEAR(r1.metrics.mean_accept_length(), 2.5, 0.2);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(r1.outputs[i].size(), 60u);
    for (int32_t x : r1.accept_lengths[i]) EXPECT_TRUE(x == 2 || x == 3) << x;
  }
  auto other = generate(*m, prompts, max_new, {0, 1, 0, 777}, simulated(2.5));
  EXPECT_NE(other.accept_lengths, r1.accept_lengths) << "another seed should draw other counts";
}

// The target-chosen tokens (output[0] from prefill, then the last token of each step) equal plain
// greedy decoding of the prompt plus the output before them: the KV cache the verify forwards
// read held exactly the emitted tokens.
TEST(EngineSimulatedAcceptance, TargetTokensFollowTheEmittedPrefix) {
  auto prompts = heldout_prompts({30});
  auto m = tiny_model(3, 1);
  auto r = generate(*m, prompts, {24}, {}, simulated(2.7));
  const std::vector<int32_t>& out = r.outputs[0];
  ASSERT_EQ(out.size(), 24u);
  auto plain = tiny_model(0, 1);
  size_t k = 0;
  std::vector<size_t> checked;
  for (size_t s = 0;; ++s) {
    if (k >= out.size()) break;
    std::vector<int32_t> prefix = prompts[0];
    prefix.insert(prefix.end(), out.begin(), out.begin() + long(k));
    auto next = generate(*plain, {prefix}, {1});
    EXPECT_EQ(next.outputs[0][0], out[k]) << "output token " << k;
    checked.push_back(k);
    if (s >= r.accept_lengths[0].size()) break;
    k += size_t(r.accept_lengths[0][s]);
  }
  EXPECT_GE(checked.size(), 8u);
}

TEST(EngineSimulatedAcceptance, RefusedWithoutSpeculationOrOutOfRange) {
  auto plain = tiny_model(0, 1);
  Engine e0(*plain, simulated(2.0));
  auto id = e0.add_request(GenerationRequest{{1, 2, 3}, 4, {}});
  EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
  auto m = tiny_model(3, 1);
  Engine e1(*m, simulated(4.5));
  EXPECT_EQ(e1.add_request(GenerationRequest{{1, 2, 3}, 4, {}}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsa::engine
