// The overlapped decode (EngineOptions::overlap, overlapped_decode.cc) on the CPU backend, where
// the backend sampling op is the host rule: with the tokens decided on the backend (accept_on =
// kBackend) every d = 0 step after the first is launched before the previous step's tokens are
// read. It must give the same tokens and finish reasons as reading every step first — greedy and
// sampled, with buckets, with requests joining mid-run (a launch mixing host tokens and gathered
// ones), with a stop token found one launch late (that launch's work discarded) and with a
// request aborted while in flight — and leave every page free at the end.
#include <gtest/gtest.h>

#include "dsa/engine/engine_test_util.h"

namespace dsa::engine {
namespace {

EngineOptions overlap_options(bool on) {
  EngineOptions o;
  o.accept_on = AcceptOn::kBackend;
  o.overlap = on;
  return o;
}

struct Finished {
  std::vector<std::vector<int32_t>> outputs;
  std::vector<FinishReason> reasons;
  int64_t launches = 0;
};

// Requests added before the first step; request i joins at step join[i] (0: at once).
Finished run(model::DsaModel& m, const std::vector<GenerationRequest>& reqs, bool overlap,
             const std::vector<int32_t>& join = {}) {
  Engine e(m, overlap_options(overlap));
  const int32_t free_before = m.pages().num_free_pages();
  std::vector<int64_t> ids(reqs.size(), -1);
  for (int64_t step = 0;; ++step) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (ids[i] < 0 && (join.empty() || join[i] <= step)) {
        auto id = e.add_request(reqs[i]);
        EXPECT_TRUE(id.ok()) << id.status().to_string();
        ids[i] = *id;
      }
    }
    const bool pending = std::any_of(ids.begin(), ids.end(), [](int64_t id) { return id < 0; });
    if (!e.has_work() && !pending) break;
    const Status s = e.step();
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok() || step > 10000) break;
  }
  Finished f;
  for (int64_t id : ids) {
    f.outputs.push_back(e.request(id).output);
    f.reasons.push_back(e.request(id).finish);
  }
  f.launches = e.metrics().overlapped_launches;
  EXPECT_EQ(m.pages().num_free_pages(), free_before) << "overlap " << overlap;
  return f;
}

std::vector<GenerationRequest> requests(const SamplingParams& s) {
  const auto prompts = testing::heldout_prompts({9, 30, 5, 17});
  const std::vector<int32_t> max_new = {16, 7, 25, 1};
  std::vector<GenerationRequest> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r{prompts[i], max_new[i], s};
    r.sampling.seed = s.seed + i;
    out.push_back(r);
  }
  return out;
}

TEST(OverlappedDecode, SameTokensAsReadingEveryStep) {
  const SamplingParams greedy{}, sampled{0.8f, 0.9f, 50, 1234}, hot{1.5f, 1.f, 0, 99};
  for (const std::vector<int32_t>& buckets : {std::vector<int32_t>{}, {2, 4}}) {
    auto m = testing::tiny_model(0, 4, 0, buckets);
    for (const SamplingParams& s : {greedy, sampled, hot}) {
      const Finished off = run(*m, requests(s), false);
      const Finished on = run(*m, requests(s), true);
      EXPECT_EQ(on.outputs, off.outputs) << "T = " << s.temperature;
      EXPECT_EQ(on.reasons, off.reasons) << "T = " << s.temperature;
      EXPECT_EQ(off.launches, 0);
      EXPECT_GT(on.launches, 10) << "T = " << s.temperature;
      EXPECT_EQ(on.outputs[0].size(), 16u);  // counted stops launch no token too many
      EXPECT_EQ(on.outputs[3].size(), 1u);
    }
  }
}

// Requests that join while others decode: a launch whose rows take host tokens (just prefilled)
// and gathered ones (sampled by the launch in flight).
TEST(OverlappedDecode, RequestsJoiningMidRun) {
  auto m = testing::tiny_model(0, 4);
  const SamplingParams s{0.7f, 1.f, 0, 7};
  const std::vector<int32_t> join = {0, 3, 4, 9};
  const Finished off = run(*m, requests(s), false, join);
  const Finished on = run(*m, requests(s), true, join);
  EXPECT_EQ(on.outputs, off.outputs);
  EXPECT_EQ(on.reasons, off.reasons);
  EXPECT_GT(on.launches, 0);
}

// A stop token is seen only when its launch is read, after the next launch took the request:
// that launch's token is dropped, so the output still ends at the stop token.
TEST(OverlappedDecode, AStopTokenReadLateDropsTheNextLaunch) {
  auto m = testing::tiny_model(0, 4);
  std::vector<GenerationRequest> reqs = requests(SamplingParams{});
  const Finished plain = run(*m, reqs, false);
  ASSERT_GE(plain.outputs[0].size(), 6u);
  const int32_t stop = plain.outputs[0][5];
  reqs[0].stop_token_ids = {stop};
  reqs[2].stop_token_ids = {stop};
  const Finished off = run(*m, reqs, false);
  const Finished on = run(*m, reqs, true);
  EXPECT_EQ(on.outputs, off.outputs);
  EXPECT_EQ(on.reasons, off.reasons);
  EXPECT_EQ(on.reasons[0], FinishReason::kStopToken);
  EXPECT_LE(on.outputs[0].size(), 6u);
  EXPECT_EQ(on.outputs[0].back(), stop);
}

// A request aborted while its token is in flight: the launch is read first (SPEC.md §6.7: no page
// is freed while a launched step may write it), the others go on unchanged, its pages come back.
TEST(OverlappedDecode, AbortWhileInFlight) {
  auto m = testing::tiny_model(0, 4);
  const std::vector<GenerationRequest> reqs = requests(SamplingParams{});
  const Finished off = run(*m, reqs, false);
  Engine e(*m, overlap_options(true));
  const int32_t free_before = m->pages().num_free_pages();
  std::vector<int64_t> ids;
  for (const GenerationRequest& r : reqs) ids.push_back(*e.add_request(r));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(e.step().ok());
  ASSERT_GT(e.request(ids[2]).in_flight, 0);
  const size_t before = e.request(ids[2]).output.size();
  ASSERT_TRUE(e.abort(ids[2]).ok());
  // The launch holding it was read first (its token emitted), then its pages were freed.
  EXPECT_EQ(e.request(ids[2]).in_flight, 0);
  const size_t cut = e.request(ids[2]).output.size();
  EXPECT_EQ(cut, before + 1);
  ASSERT_TRUE(e.run_to_completion().ok());
  EXPECT_EQ(e.request(ids[2]).finish, FinishReason::kAborted);
  EXPECT_EQ(e.request(ids[2]).output.size(), cut);
  EXPECT_EQ(e.request(ids[2]).output,
            std::vector<int32_t>(off.outputs[2].begin(), off.outputs[2].begin() + long(cut)));
  for (size_t i : {0u, 1u, 3u}) EXPECT_EQ(e.request(ids[i]).output, off.outputs[i]) << i;
  EXPECT_EQ(m->pages().num_free_pages(), free_before);
  EXPECT_TRUE(e.release(ids[2]).ok());
}

// A pool with room for two requests at a time (bug class 12's setting): requests wait for the
// pages of finished ones, which come back only once the launch still holding them is read, and
// every launch's rows cross page boundaries of a tightly packed pool.
TEST(OverlappedDecode, AMinimalPoolReusesPagesOnlyAfterTheLaunchIsRead) {
  std::vector<GenerationRequest> reqs = requests(SamplingParams{});
  int32_t most = 0;
  for (const GenerationRequest& r : reqs) {
    const int32_t total = int32_t(r.prompt.size()) + r.max_new_tokens + 2;  // + 2n, n = 1
    most = std::max(most, (total + kernels::kPageSize - 1) / kernels::kPageSize);
  }
  auto m = testing::tiny_model(0, 4, 1 + 2 * most);
  const Finished off = run(*m, reqs, false);
  const Finished on = run(*m, reqs, true);
  EXPECT_EQ(on.outputs, off.outputs);
  EXPECT_EQ(on.reasons, off.reasons);
  EXPECT_GT(on.launches, 0);
}

// A step that must read its logits on the host (kHost) reads the launch in flight first; the
// engine can be switched per step only through its requests, so here: top-k on the device path
// is still overlapped (kBackend), and kAuto on the CPU never overlaps.
TEST(OverlappedDecode, OnlyStepsSampledOnTheBackendOverlap) {
  auto m = testing::tiny_model(0, 4);
  EngineOptions o;  // kAuto: the host path on the CPU
  o.overlap = true;
  const auto r = testing::generate(*m, testing::heldout_prompts({9}), {8}, SamplingParams{}, o);
  EXPECT_EQ(r.metrics.overlapped_launches, 0);
  const auto b = testing::generate(*m, testing::heldout_prompts({9}), {8}, SamplingParams{},
                                   overlap_options(true));
  EXPECT_EQ(b.outputs, r.outputs);
  EXPECT_EQ(b.metrics.overlapped_launches, 7);  // the first token comes from the prefill
}

}  // namespace
}  // namespace dsa::engine
