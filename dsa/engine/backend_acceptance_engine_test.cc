// The engine's backend path (EngineOptions::accept_on = kBackend: every forward's sampled rows are
// decided where the logits are — the d = 0 token, the first token after a prompt, the verify's
// acceptance, a simulated step's rows and the MTP layer's greedy drafts — by the op table's
// accept_drafts; only counts and tokens come back) against the host rules (kHost), on the CPU
// backend, where the op is its reference: the same outputs and the same accept lengths, greedy
// and sampled (top-k / top-p), d = 0, 1 and 3, simulated acceptance, and under a padded
// vocabulary (the op reads ids [0, sampleable) of rows vocab_size wide). No logits row reaches
// the host on the backend path. On the CUDA backend kAuto takes it (for the target rows unless a
// request filters by top-k / top-p); the GPU tests of the op cover the kernel.
#include <gtest/gtest.h>

#include "dsa/engine/engine_test_util.h"

namespace dsa::engine {
namespace {

TEST(BackendAcceptance, EqualsTheHostRuleInTheEngine) {
  const auto prompts = testing::heldout_prompts({9, 30});
  const std::vector<int32_t> max_new = {16, 20};
  EngineOptions host, backend;
  host.accept_on = AcceptOn::kHost;
  backend.accept_on = AcceptOn::kBackend;
  const SamplingParams greedy{}, sampled{0.8f, 0.9f, 50, 1234}, hot{1.5f, 1.f, 0, 99};
  for (int32_t d : {0, 1, 3}) {
    auto m = testing::tiny_model(d, 2);
    for (const SamplingParams& s :
         d == 1 ? std::vector{sampled} : std::vector{greedy, sampled, hot}) {
      const auto h = testing::generate(*m, prompts, max_new, s, host);
      const auto b = testing::generate(*m, prompts, max_new, s, backend);
      EXPECT_EQ(b.outputs, h.outputs) << "d = " << d << ", T = " << s.temperature;
      EXPECT_EQ(b.accept_lengths, h.accept_lengths) << "d = " << d << ", T = " << s.temperature;
      if (d > 0) EXPECT_GT(b.metrics.verify_steps, 0);
      EXPECT_GT(h.metrics.host_logit_rows, 0) << "d = " << d;
      EXPECT_EQ(b.metrics.host_logit_rows, 0) << "d = " << d << ", T = " << s.temperature;
    }
  }
}

// A simulated accept length (benchmarks): the forced counts and the target's token at the forced
// row are the same on the backend as on the host, and no logits row reaches the host.
TEST(BackendAcceptance, SimulatedStepsEqualTheHostPath) {
  const auto prompts = testing::heldout_prompts({9, 30});
  const std::vector<int32_t> max_new = {16, 20};
  EngineOptions host, backend;
  host.accept_on = AcceptOn::kHost;
  backend.accept_on = AcceptOn::kBackend;
  host.simulate_accept_length = backend.simulate_accept_length = 2.5;
  auto m = testing::tiny_model(3, 2);
  for (const SamplingParams& s : {SamplingParams{}, SamplingParams{0.7f, 1.f, 0, 5}}) {
    const auto h = testing::generate(*m, prompts, max_new, s, host);
    const auto b = testing::generate(*m, prompts, max_new, s, backend);
    EXPECT_EQ(b.outputs, h.outputs) << "T = " << s.temperature;
    EXPECT_EQ(b.accept_lengths, h.accept_lengths) << "T = " << s.temperature;
    EXPECT_GT(b.metrics.verify_steps, 0);
    EXPECT_EQ(b.metrics.host_logit_rows, 0);
  }
}

// kAuto on the CPU backend is the host path (the op there is the host rule, run on a copy).
TEST(BackendAcceptance, AutoIsTheHostPathOnTheCpu) {
  const auto prompts = testing::heldout_prompts({9});
  auto m = testing::tiny_model(3, 2);
  const auto r = testing::generate(*m, prompts, {8}, SamplingParams{}, EngineOptions{});
  EXPECT_GT(r.metrics.host_logit_rows, 0);
}

}  // namespace
}  // namespace dsa::engine
