// warm_up (engine/warmup.h): the throwaway request leaves the model as it found it. The requests
// run after it give the same tokens and accept lengths as on a model that never ran one (greedy
// and sampled; d = 0 and 3; the host path and the backend one with the overlapped step and the
// device commit), the model's forward counts start over, and bad arguments are refused by name.
#include "dsa/engine/warmup.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dsa/engine/engine_test_util.h"

namespace dsa::engine {
namespace {

TEST(WarmUp, LeavesNoTraceInTheRequestsAfterIt) {
  const std::vector<std::vector<int32_t>> prompts = testing::heldout_prompts({12, 5, 30});
  const std::vector<int32_t> max_new = {9, 14, 6};
  const SamplingParams greedy{}, sampled{0.8f, 0.9f, 50, 1234};
  for (const int32_t d : {0, 3}) {
    for (const AcceptOn on : {AcceptOn::kHost, AcceptOn::kBackend}) {
      EngineOptions o;
      o.accept_on = on;
      auto fresh = testing::tiny_model(d);
      auto warmed = testing::tiny_model(d);
      const std::string what =
          "d " + std::to_string(d) + (on == AcceptOn::kBackend ? " backend" : " host");
      const Status st = warm_up(*warmed, o, testing::heldout_prompts({7})[0], d + 3);
      ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
      EXPECT_EQ(warmed->timing().forwards, 0) << what << ": the warm-up's forwards still counted";
      for (const SamplingParams& s : {greedy, sampled}) {
        const testing::RunResult a = testing::generate(*fresh, prompts, max_new, s, o);
        const testing::RunResult b = testing::generate(*warmed, prompts, max_new, s, o);
        EXPECT_EQ(b.outputs, a.outputs) << what << " T = " << s.temperature;
        EXPECT_EQ(b.accept_lengths, a.accept_lengths) << what << " T = " << s.temperature;
        EXPECT_EQ(b.metrics.steps, a.metrics.steps) << what << " T = " << s.temperature;
      }
      EXPECT_GT(warmed->timing().forwards, 0) << what;
    }
  }
}

TEST(WarmUp, RefusesAnEmptyPromptAndNoTokens) {
  auto m = testing::tiny_model(0);
  Status st = warm_up(*m, EngineOptions{}, {}, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("prompt is empty"), std::string::npos) << st.to_string();
  st = warm_up(*m, EngineOptions{}, {3, 4}, 0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("new_tokens = 0"), std::string::npos) << st.to_string();
  EXPECT_EQ(m->timing().forwards, 0) << "a refused warm-up ran a forward";
}

}  // namespace
}  // namespace dsa::engine
