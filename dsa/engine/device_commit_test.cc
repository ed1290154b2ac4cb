// The device-committed speculative step (EngineOptions::device_commit, SPEC.md §6.7) on the CPU
// backend, which takes the device's path (the acceptance op, the step commit op and the gathers
// run over backend buffers): the same tokens and accept lengths as reading the acceptance before
// the draft extend, greedy and sampled, d = 1, 3, 4 and 6, with padded buckets, prompts joining
// mid-run and a pool so small that accepted tokens cross page boundaries of pages just reused;
// one read per speculative step; and the paths that must not commit on the device do not.
// With EngineOptions::overlap (F = 1) the next step is launched before the step in flight is read
// (built as if it accepted nothing, moved by its counts on the backend): the same tokens, accept
// lengths and finish reasons as reading every step, with a stop token found a step late (that
// step's tokens discarded), an abort while in flight, and every page free at the end.
#include <gtest/gtest.h>

#include "dsa/engine/engine_test_util.h"

namespace dsa::engine {
namespace {

EngineOptions backend(bool device_commit, bool overlap = true) {
  EngineOptions o;
  o.accept_on = AcceptOn::kBackend;
  o.device_commit = device_commit;
  o.overlap = overlap;
  return o;
}

struct Finished {
  std::vector<std::vector<int32_t>> outputs, accepts;
  std::vector<FinishReason> reasons;
  EngineMetrics metrics;
};

// Every request added at once, run to the end; every page must be free again.
Finished run(model::DsaModel& m, const std::vector<GenerationRequest>& reqs, EngineOptions o) {
  Engine e(m, o);
  const int32_t free_before = m.pages().num_free_pages();
  std::vector<int64_t> ids;
  for (const GenerationRequest& r : reqs) ids.push_back(*e.add_request(r));
  const Status s = e.run_to_completion();
  EXPECT_TRUE(s.ok()) << s.message();
  Finished f;
  for (int64_t id : ids) {
    f.outputs.push_back(e.request(id).output);
    f.accepts.push_back(e.request(id).accept_lengths);
    f.reasons.push_back(e.request(id).finish);
  }
  f.metrics = e.metrics();
  EXPECT_EQ(m.pages().num_free_pages(), free_before);
  return f;
}

std::vector<GenerationRequest> requests(const SamplingParams& s) {
  const auto prompts = testing::heldout_prompts({9, 30, 5, 17});
  const std::vector<int32_t> max_new = {16, 23, 40, 3};
  std::vector<GenerationRequest> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    out.push_back({prompts[i], max_new[i], s});
    out.back().sampling.seed += i;
  }
  return out;
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

TEST(DeviceCommit, OverlappedStepsEqualReadingEveryStep) {
  for (int32_t d : {1, 3, 4, 6}) {
    auto m = testing::tiny_model(d, 4, 0, {1, 2, 4});
    for (const SamplingParams& s : {SamplingParams{}, SamplingParams{0.8f, 0.9f, 50, 1234}}) {
      const std::vector<GenerationRequest> reqs = requests(s);
      const int64_t waits = m->staging_ring_waits();
      const Finished on = run(*m, reqs, backend(true, true));
      // Two steps' uploads fit the staging ring: an overlapped step never waits for it.
      EXPECT_EQ(m->staging_ring_waits(), waits) << "d = " << d;
      const Finished off = run(*m, reqs, backend(true, false));
      const std::string what =
          "d = " + std::to_string(d) + ", T = " + std::to_string(s.temperature);
      EXPECT_EQ(on.outputs, off.outputs) << what;
      EXPECT_EQ(on.accepts, off.accepts) << what;
      EXPECT_EQ(on.reasons, off.reasons) << what;
      // Most steps overlap: every one over the same requests as the one before.
      EXPECT_GT(on.metrics.shifted_steps, on.metrics.device_commits / 3) << what;
      EXPECT_EQ(off.metrics.shifted_steps, 0) << what;
      EXPECT_EQ(on.metrics.host_logit_rows, 0) << what;
    }
  }
}

// A stop token met in the step in flight: the step launched after it carries the request, and
// its tokens are discarded when read; the request ends exactly where reading every step ends it.
TEST(DeviceCommit, AStopTokenReadLateDiscardsTheNextStep) {
  auto m = testing::tiny_model(3, 4, 0, {1, 2, 4});
  std::vector<GenerationRequest> reqs = requests(SamplingParams{});
  const Finished plain = run(*m, reqs, backend(true, false));
  // Stop at tokens each request emits mid-run (the 9th of request 2, the 5th of request 1).
  for (GenerationRequest& r : reqs) {
    r.stop_token_ids = {plain.outputs[2][8], plain.outputs[1][4]};
  }
  const Finished on = run(*m, reqs, backend(true, true));
  const Finished off = run(*m, reqs, backend(true, false));
  EXPECT_EQ(on.outputs, off.outputs);
  EXPECT_EQ(on.reasons, off.reasons);
  EXPECT_GT(on.metrics.shifted_steps, 0);
  int stopped = 0;
  for (FinishReason f : off.reasons) stopped += f == FinishReason::kStopToken ? 1 : 0;
  EXPECT_GE(stopped, 2);
}

// An abort of a request in the step in flight reads that step first (its tokens are emitted),
// then frees its pages; the others finish as when reading every step.
TEST(DeviceCommit, AbortWhileInFlight) {
  auto m = testing::tiny_model(3, 4, 0, {1, 2, 4});
  const std::vector<GenerationRequest> reqs = requests(SamplingParams{});
  const Finished off = run(*m, reqs, backend(true, false));
  Engine e(*m, backend(true, true));
  const int32_t free_before = m->pages().num_free_pages();
  std::vector<int64_t> ids;
  for (const GenerationRequest& r : reqs) ids.push_back(*e.add_request(r));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(e.step().ok());
  ASSERT_EQ(e.request(ids[2]).in_flight, 1);
  ASSERT_GT(e.metrics().shifted_steps, 0);
  const size_t before = e.request(ids[2]).output.size();
  ASSERT_TRUE(e.abort(ids[2]).ok());
  EXPECT_EQ(e.request(ids[2]).in_flight, 0);
  const size_t cut = e.request(ids[2]).output.size();
  EXPECT_GT(cut, before);
  ASSERT_TRUE(e.run_to_completion().ok());
  EXPECT_EQ(e.request(ids[2]).finish, FinishReason::kAborted);
  EXPECT_EQ(e.request(ids[2]).output,
            std::vector<int32_t>(off.outputs[2].begin(), off.outputs[2].begin() + long(cut)));
  for (size_t i : {0u, 1u, 3u}) EXPECT_EQ(e.request(ids[i]).output, off.outputs[i]) << i;
  EXPECT_EQ(m->pages().num_free_pages(), free_before);
}

}  // namespace
}  // namespace dsa::engine
