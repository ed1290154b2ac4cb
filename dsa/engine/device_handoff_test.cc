// The device hand-off between a speculative step's forwards (model::ForwardInputs, SPEC.md §6.7)
// on the CPU backend, which takes the same path as a device: the MTP forwards' hidden rows are
// gathered from the previous forward's outputs in backend memory, and with the drafts decided on
// the backend (accept_on kBackend) the chain's tokens too, so the chain reads back only its d
// drafts, once (with the draft_override hook these tests trace the drafts with; without it the
// drafts stay on the backend, ReadsBackOnlyCountsAndTokens). Against the host hand-off
// (EngineOptions::host_handoff: every forward's hidden states and drafts through host vectors): the
// same tokens, accept lengths and drafts, draft for draft, greedy and sampled, d = 1, 3, 4 and 6,
// with padded buckets; and the bytes read back per step are exactly the acceptance's counts and
// tokens plus the drafts.
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "dsa/engine/dp_engine_group.h"
#include "dsa/engine/engine_test_util.h"

namespace dsa::engine {
namespace {

struct Traced {
  testing::RunResult run;
  std::map<int64_t, std::vector<std::vector<int32_t>>> drafts;  // per request, every chain's
  int64_t ring_waits = 0;
};

// generate() with every chain's drafts recorded (the override hook, changing nothing).
Traced traced(model::DsaModel& m, const std::vector<std::vector<int32_t>>& prompts,
              const std::vector<int32_t>& max_new, SamplingParams s, EngineOptions o) {
  Traced t;
  o.draft_override = [&t](const RequestState& r, std::vector<int32_t>& drafts) {
    t.drafts[r.id].push_back(drafts);
  };
  const int64_t waits = m.staging_ring_waits();
  t.run = testing::generate(m, prompts, max_new, s, o);
  t.ring_waits = m.staging_ring_waits() - waits;
  return t;
}

TEST(DeviceHandoff, ChainEqualsTheHostHandoffDraftForDraft) {
  const auto prompts = testing::heldout_prompts({9, 30, 17});
  const std::vector<int32_t> max_new = {12, 14, 9};
  const SamplingParams greedy{}, sampled{0.8f, 0.9f, 50, 1234};
  for (int32_t d : {1, 3, 4, 6}) {
    // Three requests in buckets {1, 2, 4}: a padded request in every full forward.
    auto m = testing::tiny_model(d, 4, 0, {1, 2, 4});
    for (AcceptOn where : {AcceptOn::kBackend, AcceptOn::kHost}) {
      const bool both = d != 6 && where == AcceptOn::kBackend;
      for (const SamplingParams& s : both ? std::vector{greedy, sampled} : std::vector{greedy}) {
        EngineOptions dev, host;
        dev.accept_on = host.accept_on = where;
        host.host_handoff = true;
        const Traced a = traced(*m, prompts, max_new, s, dev);
        const Traced b = traced(*m, prompts, max_new, s, host);
        const std::string what = "d = " + std::to_string(d) +
                                 (where == AcceptOn::kBackend ? ", backend" : ", host") +
                                 ", T = " + std::to_string(s.temperature);
        EXPECT_EQ(a.run.outputs, b.run.outputs) << what;
        EXPECT_EQ(a.run.accept_lengths, b.run.accept_lengths) << what;
        ASSERT_EQ(a.drafts.size(), prompts.size()) << what;
        // Request ids differ between the two engines only by their order of addition.
        auto ia = a.drafts.begin(), ib = b.drafts.begin();
        for (; ia != a.drafts.end() && ib != b.drafts.end(); ++ia, ++ib) {
          EXPECT_EQ(ia->second, ib->second) << what << ", request " << ia->first;
          EXPECT_GT(ia->second.size(), size_t(1)) << what;
        }
        EXPECT_GT(a.run.metrics.verify_steps, 0) << what;
        // No upload waited for the staging ring: each chain fits it.
        EXPECT_EQ(a.ring_waits, 0) << what;
        // The device hand-off copies no hidden state back; the host hand-off copies them all.
        EXPECT_LT(a.run.metrics.readback_bytes, b.run.metrics.readback_bytes) << what;
      }
    }
  }
}

// d = 3 on the backend path: per request, a completed prompt reads its first token (count and
// token: 2 ints); a verify step its count and its n = 4 emitted entries. The drafts stay in the
// draft slots, where the next verify, its acceptance and its draft extend gather them (both
// prompts complete in the first step, so no prefill part ever reads them). Nothing else: no
// hidden state, no logits, no drafts. The host hand-off reads the hidden states besides.
TEST(DeviceHandoff, ReadsBackOnlyCountsAndTokens) {
  const auto prompts = testing::heldout_prompts({9, 30});
  const std::vector<int32_t> max_new = {16, 20};
  auto m = testing::tiny_model(3, 2);
  EngineOptions o;
  o.accept_on = AcceptOn::kBackend;
  const testing::RunResult r = testing::generate(*m, prompts, max_new, SamplingParams{}, o);
  const int64_t P = int64_t(prompts.size()), V = r.metrics.verify_steps;
  ASSERT_GT(V, 0);
  const int64_t n = 4, d = 3, word = 4;
  EXPECT_EQ(r.metrics.readback_bytes, P * 2 * word + V * (1 + n) * word);
  EXPECT_EQ(r.metrics.host_logit_rows, 0);
  // Reads: each phase that ran at most two (the acceptance's, the chain's), and at least one per
  // step (every step decodes or completes a prompt here).
  EXPECT_LE(r.metrics.readbacks, 4 * r.metrics.steps);
  EXPECT_GE(r.metrics.readbacks, r.metrics.steps);
  const double per_request_step = double(r.metrics.readback_bytes) / double(V + P);
  std::printf(
      "d = 3 device hand-off: %lld reads, %lld bytes over %lld steps (%.1f bytes per "
      "request and step)\n",
      (long long)r.metrics.readbacks, (long long)r.metrics.readback_bytes,
      (long long)r.metrics.steps, per_request_step);
  EXPECT_LE(per_request_step, 20.0);
  (void)d;

  EngineOptions host = o;
  host.host_handoff = true;
  const testing::RunResult h = testing::generate(*m, prompts, max_new, SamplingParams{}, host);
  EXPECT_EQ(h.outputs, r.outputs);
  const int64_t hidden_row = int64_t(m->config().hidden_size) * 2;
  EXPECT_GE(h.metrics.readback_bytes, r.metrics.readback_bytes + V * hidden_row);
}

// d = 0 on the backend: a decode step reads its count and token, 8 bytes per request, once; the
// overlapped decode (engine.h) only its token, 4 bytes, one step later. The first token of a
// prompt is its prefill's (count and token).
TEST(DeviceHandoff, PlainDecodeReadsOneTokenPerRequest) {
  const auto prompts = testing::heldout_prompts({9, 30});
  const std::vector<int32_t> max_new = {10, 12};
  auto m = testing::tiny_model(0, 2);
  for (bool overlap : {false, true}) {
    EngineOptions o;
    o.accept_on = AcceptOn::kBackend;
    o.overlap = overlap;
    const testing::RunResult r = testing::generate(*m, prompts, max_new, SamplingParams{}, o);
    // No stop token ends a request early, so no overlapped token is read and dropped.
    ASSERT_EQ(r.outputs[0].size(), 10u);
    ASSERT_EQ(r.outputs[1].size(), 12u);
    const int64_t P = int64_t(prompts.size());
    EXPECT_EQ(r.metrics.readback_bytes,
              overlap ? P * 8 + (r.metrics.emitted - P) * 4 : r.metrics.emitted * 8)
        << "overlap " << overlap;
    // One read per phase that ran (the step that completes the prompts also decodes them; an
    // overlapped step reads the launch before it, the last step only reads).
    EXPECT_GE(r.metrics.readbacks, r.metrics.steps - (overlap ? 1 : 0)) << "overlap " << overlap;
    EXPECT_LE(r.metrics.readbacks, r.metrics.steps + 1) << "overlap " << overlap;
    EXPECT_EQ(r.metrics.overlapped_launches > 0, overlap);
  }
}

// Drafts kept in the draft slots across a prefill part: a prompt that arrives while others
// verify runs its own chain, which rewrites the slots, so the kept drafts are read first
// (Engine::read_kept_drafts). The same tokens and accept lengths as the host rules (kHost, which
// never keeps them), greedy and sampled, d = 1 and 3.
TEST(DeviceHandoff, KeptDraftsSurviveAPrefillPart) {
  const auto prompts = testing::heldout_prompts({9, 30, 17, 5});
  const std::vector<int32_t> max_new = {20, 14, 9, 12};
  const std::vector<int64_t> join = {0, 2, 5, 6};
  for (int32_t d : {1, 3}) {
    auto m = testing::tiny_model(d, 4, 0, {1, 2, 4});
    for (const SamplingParams& s : {SamplingParams{}, SamplingParams{0.8f, 0.9f, 50, 77}}) {
      std::vector<std::vector<int32_t>> outputs[2], accepts[2];
      int64_t readbacks[2] = {0, 0};
      for (AcceptOn where : {AcceptOn::kBackend, AcceptOn::kHost}) {
        const int k = where == AcceptOn::kBackend ? 0 : 1;
        EngineOptions o;
        o.accept_on = where;
        Engine e(*m, o);
        std::vector<int64_t> ids(prompts.size(), -1);
        for (int64_t step = 0; step < 1000; ++step) {
          for (size_t i = 0; i < prompts.size(); ++i) {
            if (ids[i] < 0 && join[i] <= step) {
              GenerationRequest r{prompts[i], max_new[i], s};
              r.sampling.seed += i;
              ids[i] = *e.add_request(r);
            }
          }
          if (!e.has_work() && ids.back() >= 0) break;
          ASSERT_TRUE(e.step().ok());
        }
        for (int64_t id : ids) {
          outputs[k].push_back(e.request(id).output);
          accepts[k].push_back(e.request(id).accept_lengths);
        }
        readbacks[k] = e.metrics().readback_bytes;
      }
      const std::string what =
          "d = " + std::to_string(d) + ", T = " + std::to_string(s.temperature);
      EXPECT_EQ(outputs[0], outputs[1]) << what;
      EXPECT_EQ(accepts[0], accepts[1]) << what;
      EXPECT_GT(readbacks[0], 0) << what;
    }
  }
}

// Two DP ranks on the backend path, one of them idle: the idle rank's chain forwards are IDLE,
// take an empty draft slot and gather no rows, and the busy rank's output equals one engine's.
TEST(DeviceHandoff, AnIdleDpRankRunsTheChainOnPadding) {
  const auto prompts = testing::heldout_prompts({12});
  EngineOptions o;
  o.accept_on = AcceptOn::kBackend;
  auto single = testing::tiny_model(3, 2, 0, {1, 2});
  const testing::RunResult base = testing::generate(*single, prompts, {14}, SamplingParams{}, o);
  std::vector<std::unique_ptr<model::DsaModel>> models;
  for (int32_t r = 0; r < 2; ++r) models.push_back(testing::tiny_model(3, 2, 0, {1, 2}));
  auto group =
      DpEngineGroup::create({models[0].get(), models[1].get()}, o, std::chrono::milliseconds(5000));
  ASSERT_TRUE(group.ok()) << group.status().message();
  auto id = (*group)->add_request_on(0, GenerationRequest{prompts[0], 14, SamplingParams{}});
  ASSERT_TRUE(id.ok()) << id.status().message();
  const Status s = (*group)->run_to_completion();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ((*group)->engine(0).request(id->id).output, base.outputs[0]);
  EXPECT_EQ((*group)->engine(0).request(id->id).accept_lengths, base.accept_lengths[0]);
  EXPECT_GT((*group)->engine(1).metrics().steps, 0);
  EXPECT_EQ((*group)->engine(1).metrics().emitted, 0);
}

}  // namespace
}  // namespace dsa::engine
