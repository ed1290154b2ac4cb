// The engine's backend acceptance path (EngineOptions::accept_on = kBackend: the verify logits
// stay in the model's backend memory, the op table's accept_drafts decides, only counts and tokens
// come back) against the host rule (kHost), on the CPU backend, where the op is its reference: the
// same outputs and the same accept lengths, greedy and sampled (top-k / top-p), d = 1 and 3, and
// under a padded vocabulary (the op reads ids [0, sampleable) of rows vocab_size wide). On the
// CUDA backend kAuto takes this path; the GPU tests of the op cover the kernel.
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
  for (int32_t d : {1, 3}) {
    auto m = testing::tiny_model(d, 2);
    for (const SamplingParams& s :
         d == 1 ? std::vector{sampled} : std::vector{greedy, sampled, hot}) {
      const auto h = testing::generate(*m, prompts, max_new, s, host);
      const auto b = testing::generate(*m, prompts, max_new, s, backend);
      EXPECT_EQ(b.outputs, h.outputs) << "d = " << d << ", T = " << s.temperature;
      EXPECT_EQ(b.accept_lengths, h.accept_lengths) << "d = " << d << ", T = " << s.temperature;
      EXPECT_GT(b.metrics.verify_steps, 0);
    }
  }
}

}  // namespace
}  // namespace dsa::engine
