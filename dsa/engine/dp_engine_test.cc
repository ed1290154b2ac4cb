// DP attention end to end on the CPU (docs/multi_gpu.md, SPEC.md §7, §9 bug classes 2 and 10):
// N engines over N instances of the tiny model, on N threads with a LocalGroup between them.
// Greedy output per request equals the single-engine output token for token whichever rank owns
// it (the CPU reference is exact and padded rows are inert), with ranks idle from the start and
// going idle mid-run; every rank runs the same forwards (mode, B_pad, rows_pad) in every step;
// and a rank idle for over a thousand steps beside a decoding one neither hangs nor errs under
// the group's watchdog.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <thread>

#include "dsa/engine/dp_engine_group.h"
#include "dsa/engine/dp_test_util.h"
#include "dsa/engine/engine_test_util.h"

namespace dsa::engine {
namespace {

using namespace std::chrono_literals;
using testing::expect_same_forwards;
using testing::heldout_prompts;
using testing::tiny_model;

using Models = std::vector<std::unique_ptr<model::DsaModel>>;

Models tiny_models(int32_t world, int32_t d, int32_t max_requests, std::vector<int32_t> buckets) {
  Models out;
  for (int32_t r = 0; r < world; ++r) out.push_back(tiny_model(d, max_requests, 0, buckets));
  return out;
}

std::vector<model::DsaModel*> ptrs(const Models& m) {
  std::vector<model::DsaModel*> out;
  for (const auto& p : m) out.push_back(p.get());
  return out;
}

int64_t padded_forwards(const Engine& e) {
  int64_t n = 0;
  for (const ForwardRecord& f : e.forward_trace()) n += f.requests == 0;
  return n;
}

struct Case {
  int32_t world, d;
  std::vector<int32_t> lengths, max_new, buckets;
};

// Prompts of different lengths (some over a prefill chunk of 16) and budgets, so requests finish
// at different steps and ranks go idle mid-run; three ranks for two requests leaves one idle from
// the start. Without buckets B_pad is the largest B over the ranks, which a rank with fewer
// requests must take as given.
TEST(DpEngine, GreedyOutputEqualsTheSingleEngineOnEveryRank) {
  const std::vector<Case> cases = {
      {2, 0, {24, 9, 15, 5, 12}, {9, 3, 6, 11, 2}, {}},
      {2, 3, {24, 9, 15, 5, 12}, {9, 3, 6, 11, 2}, {}},
      {3, 0, {24, 9, 15, 5, 12}, {9, 3, 6, 11, 2}, {2, 4}},
      {3, 3, {21, 7}, {8, 4}, {2, 4}},
  };
  EngineOptions options;
  options.prefill_chunk = 16;
  options.record_forwards = true;
  std::map<std::pair<int32_t, std::vector<int32_t>>, testing::RunResult> singles;
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("world {}, d = {}, {} requests", c.world, c.d, c.lengths.size()));
    const auto prompts = heldout_prompts(c.lengths);
    auto [it, fresh] = singles.try_emplace({c.d, c.lengths});
    if (fresh) {  // one engine, every request in one batch
      auto single = tiny_model(c.d, int32_t(prompts.size()));
      it->second = testing::generate(*single, prompts, c.max_new, {}, options);
    }
    const testing::RunResult& want = it->second;

    const Models models = tiny_models(c.world, c.d, 4, c.buckets);
    EngineOptions dp_options = options;
    dp_options.check_forwards = c.world == 3;  // the per-forward cross-check agrees, too
    auto group = DpEngineGroup::create(ptrs(models), dp_options, 10s);
    ASSERT_TRUE(group.ok()) << group.status().message();
    std::vector<DpRequestId> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto id = (*group)->add_request({prompts[i], c.max_new[i], {}});
      ASSERT_TRUE(id.ok()) << id.status().message();
      ids.push_back(*id);
    }
    const Status s = (*group)->run_to_completion();
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<int32_t> per_rank(size_t(c.world), 0);
    int64_t padded = 0, padded_on_busy = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      ++per_rank[size_t(ids[i].rank)];
      EXPECT_EQ((*group)->engine(ids[i].rank).request(ids[i].id).output, want.outputs[i])
          << "request " << i << " on rank " << ids[i].rank;
    }
    for (int32_t r = 0; r < c.world; ++r) {
      EXPECT_EQ((*group)->steps()[size_t(r)], (*group)->steps()[0]) << "rank " << r;
      // Placement by load spreads the requests: no rank is left without one it could take.
      EXPECT_EQ(per_rank[size_t(r)] > 0, r < int32_t(prompts.size())) << "rank " << r;
      padded += padded_forwards((*group)->engine(r));
      if (per_rank[size_t(r)] > 0) padded_on_busy += padded_forwards((*group)->engine(r));
      if (per_rank[size_t(r)] == 0) {  // idle from the start: only padded forwards
        EXPECT_EQ(padded_forwards((*group)->engine(r)),
                  int64_t((*group)->engine(r).forward_trace().size()));
      }
    }
    // Ranks finish at different steps, so some rank ran padded forwards beside a busier one.
    EXPECT_GT(padded, 0);
    // With more requests than ranks, a rank that had requests goes idle while another works.
    if (prompts.size() > size_t(c.world)) EXPECT_GT(padded_on_busy, 0);
    expect_same_forwards(**group);
  }
}

// A stop seen by the ranks at different moments (a counter shared by their threads) still ends
// every rank after the same step, with work left; a later run finishes it. The ranks' metrics
// merge into the group's: tokens, latencies and accept steps add up, steps are the group's.
TEST(DpEngine, StopEndsEveryRankAfterTheSameStepAndMetricsMerge) {
  const Models models = tiny_models(2, 3, 4, {});
  auto group = DpEngineGroup::create(ptrs(models), {}, 10s);
  ASSERT_TRUE(group.ok()) << group.status().message();
  const auto prompts = heldout_prompts({12, 7, 9});
  std::vector<DpRequestId> ids;
  for (const auto& p : prompts) {
    GenerationRequest req{p, 24, {}};
    req.ignore_eos = true;
    auto id = (*group)->add_request(std::move(req));
    ASSERT_TRUE(id.ok()) << id.status().message();
    ids.push_back(*id);
  }
  std::atomic<int> calls{0};
  Status s = (*group)->run_to_completion([&] { return calls.fetch_add(1) >= 5; });
  ASSERT_TRUE(s.ok()) << s.message();
  const int64_t stopped_at = (*group)->steps()[0];
  EXPECT_EQ((*group)->steps()[1], stopped_at);
  EXPECT_GT(stopped_at, 0);
  EXPECT_TRUE((*group)->engine(0).has_work() || (*group)->engine(1).has_work());
  s = (*group)->run_to_completion();
  ASSERT_TRUE(s.ok()) << s.message();
  EngineMetrics merged(3);
  for (int32_t r = 0; r < 2; ++r) merged.merge_rank((*group)->engine(r).metrics());
  int64_t emitted = 0, accept_steps = 0;
  for (const DpRequestId& id : ids) {
    const RequestState& r = (*group)->engine(id.rank).request(id.id);
    EXPECT_EQ(r.output.size(), 24u);
    emitted += int64_t(r.output.size());
    accept_steps += int64_t(r.accept_lengths.size());
  }
  EXPECT_EQ(merged.emitted, emitted);
  EXPECT_EQ(merged.accept.steps(), accept_steps);
  EXPECT_EQ(merged.ttft_s.size(), prompts.size());
  EXPECT_EQ(merged.steps, stopped_at + (*group)->steps()[0]);
}

// A rank with nothing to do for over a thousand steps while another decodes one long request:
// it steps with the others, runs every agreed forward on padding only, and the group's watchdog
// (armed far below the run's length) never fires.
TEST(DpEngine, RankIdleForAThousandStepsBesideADecodingRank) {
  constexpr int32_t kNew = 1010;
  Models models;
  for (int32_t r = 0; r < 2; ++r) {
    model::ModelOptions o;
    o.max_context = 1088;
    o.max_requests = 1;
    o.max_extend_rows = 64;
    auto m = model::DsaModel::load(testing::repo("models/tiny-dsa"), o, kernels::cpu_ops());
    ASSERT_TRUE(m.ok()) << m.status().message();
    models.push_back(std::move(*m));
  }
  EngineOptions options;
  options.record_forwards = true;
  auto group = DpEngineGroup::create(ptrs(models), options, 2s);
  ASSERT_TRUE(group.ok()) << group.status().message();
  GenerationRequest req{heldout_prompts({6})[0], kNew, {}};
  req.ignore_eos = true;
  auto id = (*group)->add_request(std::move(req));
  ASSERT_TRUE(id.ok()) << id.status().message();
  ASSERT_EQ(id->rank, 0);  // placement: both loads 0, ties to the lowest rank
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = (*group)->run_to_completion();
  ASSERT_TRUE(s.ok()) << s.message();
  std::printf("%lld steps in %.1f s\n", (long long)(*group)->steps()[0],
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_EQ((*group)->engine(0).request(id->id).output.size(), size_t(kNew));
  EXPECT_GE((*group)->steps()[1], 1000);
  EXPECT_EQ((*group)->steps()[1], (*group)->steps()[0]);
  const Engine& idle = (*group)->engine(1);
  EXPECT_EQ(padded_forwards(idle), int64_t(idle.forward_trace().size()));
  EXPECT_GE(padded_forwards(idle), 1000);
  EXPECT_EQ(padded_forwards((*group)->engine(0)), 0);
  expect_same_forwards(**group);
}

// Bug class 10 at the engine: a rank that stops stepping (it crashed, or skipped the step
// because it was idle) leaves the others in the step agreement; the watchdog ends their step
// with an error naming the missing rank instead of a hang.
TEST(DpEngine, ARankThatStopsSteppingIsReportedNotWaitedFor) {
  const Models models = tiny_models(2, 0, 2, {});
  auto group = DpEngineGroup::create(ptrs(models), {}, 2s);  // far above a forward
  ASSERT_TRUE(group.ok()) << group.status().message();
  auto id = (*group)->add_request_on(0, {heldout_prompts({5})[0], 6, {}});
  ASSERT_TRUE(id.ok()) << id.status().message();
  Status busy, idle;
  std::thread t0([&] {
    while ((*group)->engine(0).has_work() && busy.ok()) busy = (*group)->engine(0).step();
  });
  std::thread t1([&] { idle = (*group)->engine(1).step(); });  // one step, then gone
  t0.join();
  t1.join();
  EXPECT_TRUE(idle.ok()) << idle.message();
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.message().find("watchdog"), std::string::npos) << busy.message();
  EXPECT_NE(busy.message().find("ranks [1] missing"), std::string::npos) << busy.message();
  EXPECT_LT((*group)->engine(0).request(id->id).output.size(), 6u);
}

TEST(DpEngine, CreateNamesTheBadArgument) {
  auto none = DpEngineGroup::create({}, {}, 1s);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("models is empty"), std::string::npos);
  auto null = DpEngineGroup::create({nullptr}, {}, 1s);
  ASSERT_FALSE(null.ok());
  EXPECT_NE(null.status().message().find("models[0] is null"), std::string::npos);
  auto a = tiny_model(0, 2), b = tiny_model(1, 2);
  auto differ = DpEngineGroup::create({a.get(), b.get()}, {}, 1s);
  ASSERT_FALSE(differ.ok());
  EXPECT_NE(differ.status().message().find("models[1] differs"), std::string::npos);
  auto timeout = DpEngineGroup::create({a.get()}, {}, 0ms);
  EXPECT_FALSE(timeout.ok());
  auto group = DpEngineGroup::create({a.get(), a.get()}, {}, 1s);
  ASSERT_TRUE(group.ok());
  auto bad_rank = (*group)->add_request_on(2, {{5, 6}, 3, {}});
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_NE(bad_rank.status().message().find("rank = 2"), std::string::npos);
}

}  // namespace
}  // namespace dsa::engine
