// DP attention over many steps (SPEC.md §7, §9 bug classes 2 and 10): N ranks in one process
// (threads over a LocalGroup, the stand-in for NCCL) go idle and busy with random arrivals placed
// by load and random finishes. Every rank must run the same forwards with the same shapes (graph
// keys) in every step, every rank's metadata must pass the validator with its padded rows inert,
// and a rank that skips a collective must be reported by the group's watchdog, not hang.
#include <gtest/gtest.h>

#include <cstdio>

#include "dsa/engine/dp_test_sim.h"
#include "dsa/engine/dp_test_util.h"
#include "dsa/testing/random.h"
#include "dsa/testing/watchdog.h"

namespace dsa::engine {
namespace {

using namespace std::chrono_literals;

runtime::MetadataConfig metadata_config(int32_t d) {
  runtime::MetadataConfig c;
  c.num_draft_tokens = d;
  c.topk = 128;
  c.page_table_width = 12;
  c.num_consumers = 8;
  c.max_requests = 12;
  c.max_extend_rows = 512;
  c.max_extend_kv = 2048;
  c.num_rows = 16;
  c.num_pages = 160;
  return c;
}

DpStepConfig step_config(int32_t d) {
  DpStepConfig c;
  c.num_draft_tokens = d;
  c.buckets = {1, 2, 4, 8};  // B above 8 runs eagerly at the largest B (max_requests is 12)
  c.max_requests = 12;
  c.max_extend_rows = 512;
  return c;
}

using Arrivals = std::vector<std::vector<testing::Arrival>>;

// Arrivals per step in phases of 150 steps — a burst (every rank fills to B_max, decode batches
// above the largest bucket), a trickle, silence (the ranks drain one by one: idle ranks beside
// busy ones), a moderate rate — and a silent last 250 steps; prompts from 1 token to several
// chunks, at and around page boundaries. The first 30 steps bring one long request only: rank 0
// takes it and every other rank runs idle beside it.
Arrivals fuzz_arrivals(uint64_t seed, int64_t steps, int32_t world) {
  dsa::testing::Rng rng(seed);
  static const double kRates[] = {1.0, 0.03, 0.0, 0.2};
  static const int32_t kPrompts[] = {1, 2, 63, 64, 65, 129};
  Arrivals out(static_cast<size_t>(steps));
  out[0].push_back({400, 48});
  for (int64_t s = 30; s < steps; ++s) {
    if (s >= steps - 250 || rng.uniform(0, 1) >= kRates[(s / 150) % 4]) continue;
    for (int64_t k = rng.randint(1, 2 * world); k > 0; --k) {
      const int32_t prompt =
          rng.randint(0, 2) ? kPrompts[rng.randint(0, 5)] : int32_t(rng.randint(1, 400));
      out[size_t(s)].push_back({prompt, int32_t(rng.randint(1, 48))});
    }
  }
  return out;
}

// One request per step: rank 0 gets the first, so every other rank starts idle beside a busy one.
Arrivals trickle(int64_t steps) {
  return Arrivals(static_cast<size_t>(steps), {testing::Arrival{70, 20}});
}

struct SimRun {
  std::vector<testing::RankLog> logs;
  std::vector<Status> status;
};

SimRun simulate(int32_t world, int32_t d, const Arrivals& arrive, uint64_t seed,
                testing::Fault fault, std::chrono::milliseconds timeout) {
  auto group = dist::LocalGroup::create(world, timeout);
  DSA_CHECK(group.ok());
  const int64_t steps = int64_t(arrive.size());
  std::vector<testing::RankSim> sims;
  for (int32_t r = 0; r < world; ++r) {
    sims.emplace_back(metadata_config(d), step_config(d), seed * 131 + uint64_t(r));
  }
  SimRun run;
  run.status = testing::run_ranks<Status>(**group, [&](dist::Collective& g) -> Status {
    testing::RankSim& sim = sims[size_t(g.rank())];
    for (int64_t s = 0; s < steps; ++s) {
      if (fault.kind == testing::Fault::kLeave && sim.log.faulted) return ok_status();
      DSA_RETURN_IF_ERROR(sim.step(g, s, arrive[size_t(s)], fault));
    }
    return ok_status();
  });
  for (auto& sim : sims) run.logs.push_back(sim.log);
  return run;
}

struct FuzzCase {
  int32_t world, d;
  int64_t steps;
};

// 10,400 steps in all, over N = 2, 3 and 8 and d = 0 (DECODE), 1 (no chain) and 3 (a chain of 2).
TEST(DpFuzz, EveryRankRunsTheSameForwardsAndItsMetadataIsValid) {
  const uint64_t seed = dsa::testing::test_seed();
  const FuzzCase cases[] = {{2, 3, 3000}, {2, 0, 1200}, {3, 1, 2400}, {3, 3, 1400}, {8, 3, 2400}};
  dsa::testing::within_seconds(60, [&] {
    for (const FuzzCase& c : cases) {
      SCOPED_TRACE(::testing::Message()
                   << "N = " << c.world << ", d = " << c.d << ", seed " << seed);
      const uint64_t s = seed + uint64_t(c.world * 10 + c.d);
      SimRun run = simulate(c.world, c.d, fuzz_arrivals(s, c.steps, c.world), s, {}, 5000ms);
      for (const Status& s : run.status) ASSERT_TRUE(s.ok()) << s.to_string();
      const testing::RankLog& first = run.logs[0];
      int64_t idle = 0, busy = 0, padded = 0, extend = 0, uniform = 0, eager = 0, mixed = 0;
      for (const testing::RankLog& log : run.logs) {
        EXPECT_EQ(log.steps, c.steps);
        ASSERT_EQ(log.kinds, first.kinds);
        ASSERT_EQ(log.forwards.size(), first.forwards.size());
        for (size_t i = 0; i < log.forwards.size(); ++i) {
          ASSERT_EQ(log.forwards[i], first.forwards[i]) << "forward " << i;
        }
        idle += log.idle_forwards;
        busy += log.busy_forwards;
        padded += log.padded_rows;
        mixed += log.idle_forwards > 0 && log.busy_forwards > 0;
      }
      for (StepKind k : first.kinds)
        (k == StepKind::kExtend ? extend : uniform) += k != StepKind::kNone;
      for (const ForwardShape& f : first.forwards) eager += f.batch_pad > 8;
      // The run exercised what it claims: idle ranks next to busy ones, both step kinds, padding,
      // and uniform steps above the largest bucket.
      EXPECT_GE(idle, 3);
      EXPECT_GT(busy, c.steps / 4);
      EXPECT_GT(padded, 0);
      EXPECT_GT(extend, 0);
      EXPECT_GT(uniform, 0);
      EXPECT_GT(eager, 0);
      EXPECT_GE(mixed, c.world - 1);
      std::printf(
          "N = %d d = %d: %lld steps, %zu forwards per rank (%lld extend / %lld uniform "
          "steps, %lld eager), %lld idle and %lld busy rank-forwards, %lld padded rows\n",
          c.world, c.d, (long long)c.steps, first.forwards.size(), (long long)extend,
          (long long)uniform, (long long)eager, (long long)idle, (long long)busy,
          (long long)padded);
    }
  });
}

// Each way a rank can fall out of step is reported on the ranks that kept going, within the
// timeout: leaving (watchdog), skipping the step agreement (the next collectives do not match),
// and an idle rank skipping the forwards (vLLM's dummy-run bug).
TEST(DpFuzz, ABrokenRankIsDetectedNotAHang) {
  const uint64_t seed = dsa::testing::test_seed();
  struct Case {
    testing::Fault::Kind kind;
    int32_t world;
    std::vector<std::string> expect;  // any of them
  } cases[] = {{testing::Fault::kLeave, 3, {"watchdog"}},
               // The skipping rank's next call meets the others' forward cross-check (the group
               // sees another size, or the tags differ) or their next agreement (the step
               // counters differ): each is a report, none a hang or a silent pairing.
               {testing::Fault::kSkipAgreement,
                2,
                {"not making the same call", "made a different one", "span steps"}},
               {testing::Fault::kIdleSkipsForwards,
                8,
                {"not making the same call", "made a different one"}}};
  dsa::testing::within_seconds(30, [&] {
    for (const Case& k : cases) {
      SCOPED_TRACE(::testing::Message() << "fault " << int(k.kind) << ", seed " << seed);
      testing::Fault fault{k.kind, k.world - 1,
                           k.kind == testing::Fault::kIdleSkipsForwards ? 0 : 200};
      SimRun run = simulate(k.world, 3, trickle(600), seed, fault, 300ms);
      ASSERT_TRUE(run.logs[size_t(fault.rank)].faulted) << "the fault was never injected";
      for (int32_t r = 0; r < k.world; ++r) {
        if (r == fault.rank) continue;
        const Status& s = run.status[size_t(r)];
        ASSERT_FALSE(s.ok()) << "rank " << r << " did not notice";
        bool named = false;
        for (const std::string& e : k.expect) named |= s.message().find(e) != std::string::npos;
        EXPECT_TRUE(named) << s.to_string();
        EXPECT_LT(run.logs[size_t(r)].steps, 600);
        std::printf("rank %d: %s\n", r, s.to_string().c_str());
      }
    }
  });
}

}  // namespace
}  // namespace dsa::engine
