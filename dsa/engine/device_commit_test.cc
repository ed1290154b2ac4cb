// The device-committed speculative step (EngineOptions::device_commit, SPEC.md §6.7) on the CPU
// backend, which takes the device's path (the acceptance op, the step commit op and the gathers
// run over backend buffers): the same tokens and accept lengths as reading the acceptance before
// the draft extend, greedy and sampled, d = 1, 3, 4 and 6, with padded buckets, prompts joining
// mid-run and a pool so small that accepted tokens cross page boundaries of pages just reused;
// one read per speculative step; and the paths that must not commit on the device do not.
#include <gtest/gtest.h>

#include "dsa/engine/engine_test_util.h"

namespace dsa::engine {
namespace {

EngineOptions backend(bool device_commit) {
  EngineOptions o;
  o.accept_on = AcceptOn::kBackend;
  o.device_commit = device_commit;
  return o;
}

int64_t accepted_drafts(const testing::RunResult& r) {
  int64_t sum = 0;
  for (const auto& lengths : r.accept_lengths) {
    for (int32_t l : lengths) sum += l - 1;
  }
  return sum;
}

TEST(DeviceCommit, SameTokensAsReadingTheAcceptanceFirst) {
  const auto prompts = testing::heldout_prompts({9, 30, 17});
  const std::vector<int32_t> max_new = {12, 14, 9};
  const SamplingParams greedy{}, sampled{0.8f, 0.9f, 50, 1234};
  for (int32_t d : {1, 3, 4, 6}) {
    auto m = testing::tiny_model(d, 4, 0, {1, 2, 4});  // a padded request in every full forward
    for (const SamplingParams& s : {greedy, sampled}) {
      const testing::RunResult on = testing::generate(*m, prompts, max_new, s, backend(true));
      const testing::RunResult off = testing::generate(*m, prompts, max_new, s, backend(false));
      const std::string what =
          "d = " + std::to_string(d) + ", T = " + std::to_string(s.temperature);
      EXPECT_EQ(on.outputs, off.outputs) << what;
      EXPECT_EQ(on.accept_lengths, off.accept_lengths) << what;
      // Every speculative step was committed on the device, and some accepted drafts, so the
      // patches mattered (an unpatched a = 0 build would give other drafts and tokens).
      EXPECT_GT(on.metrics.device_commits, 0) << what;
      EXPECT_EQ(off.metrics.device_commits, 0) << what;
      if (s.temperature == 0.f) EXPECT_GT(accepted_drafts(on), 0) << what;
      // One read per speculative step either way; the commit moves it to the step's end.
      EXPECT_EQ(on.metrics.readbacks, off.metrics.readbacks) << what;
      EXPECT_EQ(on.metrics.readback_bytes, off.metrics.readback_bytes) << what;
      EXPECT_EQ(on.metrics.host_logit_rows, 0) << what;
    }
  }
}

// Requests joining while others verify (their prefill part rewrites the draft slots, so the kept
// drafts are read first) and a pool with room for two requests at a time: pages are reused as
// requests finish, and the chain's positions C + a + s cross page boundaries.
TEST(DeviceCommit, JoiningRequestsAndAMinimalPool) {
  const auto prompts = testing::heldout_prompts({9, 30, 17, 5});
  const std::vector<int32_t> max_new = {40, 30, 33, 27};
  const int32_t d = 3, n = d + 1;
  int32_t most = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int32_t total = int32_t(prompts[i].size()) + max_new[i] + 2 * n;
    most = std::max(most, (total + kernels::kPageSize - 1) / kernels::kPageSize);
  }
  auto m = testing::tiny_model(d, 4, 1 + 2 * most, {1, 2, 4});
  for (const SamplingParams& s : {SamplingParams{}, SamplingParams{0.7f, 0.95f, 0, 99}}) {
    std::vector<std::vector<int32_t>> outputs[2];
    int64_t commits[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      Engine e(*m, backend(k == 0));
      std::vector<int64_t> ids(prompts.size(), -1);
      for (int64_t step = 0; step < 2000; ++step) {
        for (size_t i = 0; i < prompts.size(); ++i) {
          if (ids[i] < 0 && int64_t(2 * i) <= step) {
            GenerationRequest r{prompts[i], max_new[i], s};
            r.sampling.seed += i;
            ids[i] = *e.add_request(r);
          }
        }
        if (!e.has_work() && ids.back() >= 0) break;
        const Status st = e.step();
        ASSERT_TRUE(st.ok()) << st.message();
      }
      for (int64_t id : ids) outputs[k].push_back(e.request(id).output);
      commits[k] = e.metrics().device_commits;
    }
    EXPECT_EQ(outputs[0], outputs[1]) << "T = " << s.temperature;
    EXPECT_GT(commits[0], 0);
    EXPECT_EQ(commits[1], 0);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(outputs[0][i].size(), size_t(max_new[i])) << i;
    }
  }
}

// The paths that decide on the host, simulate acceptance, hand off through the host or replace
// the drafts never commit on the device.
TEST(DeviceCommit, OnlyBackendDecidedStepsCommitOnTheDevice) {
  auto m = testing::tiny_model(3, 2);
  const auto prompts = testing::heldout_prompts({12});
  EngineOptions host;
  host.accept_on = AcceptOn::kHost;
  EngineOptions sim = backend(true);
  sim.simulate_accept_length = 2.5;
  EngineOptions handoff = backend(true);
  handoff.host_handoff = true;
  EngineOptions override_drafts = backend(true);
  override_drafts.draft_override = [](const RequestState&, std::vector<int32_t>&) {};
  for (const EngineOptions& o : {host, sim, handoff, override_drafts}) {
    const testing::RunResult r = testing::generate(*m, prompts, {10}, SamplingParams{}, o);
    EXPECT_GT(r.metrics.verify_steps, 0);
    EXPECT_EQ(r.metrics.device_commits, 0);
  }
  const testing::RunResult r =
      testing::generate(*m, prompts, {10}, SamplingParams{}, backend(true));
  EXPECT_EQ(r.metrics.device_commits, r.metrics.verify_steps);  // one request: a step each
}

}  // namespace
}  // namespace dsa::engine
