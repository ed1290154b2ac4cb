// The engine on the GPU with CUDA graphs (what `dsa generate --device cuda` runs) against the same
// engine with --no-graphs (the same bucket-padded forwards, eager): token for token identical for
// d in {0, 1, 3, 4}, for single prompts and concurrent batches (more prompts than B_max, so
// requests enter and leave and buckets change). Against the CPU: identical up to the first
// divergence, which must be a near-tie (of the logits or of the MoE router). And d > 0 against d =
// 0 on the GPU: how far the outputs agree, and whether each divergence starts at a near-tie
// (SPEC.md §6.2).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "dsa/model/dsa_model.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"
#include "tests/e2e/model_compare.h"
#include "tests/e2e/router_margin.h"

namespace dsa::e2e {
namespace {

constexpr int32_t kNewTokens = 48;
constexpr int32_t kMaxRequests = 6;

// The golden prompts plus random token prompts of assorted lengths (some past a page and K).
std::vector<std::vector<int32_t>> prompt_set() {
  auto prompts = golden_prompt_ids();
  testing::Rng rng(testing::test_seed());
  for (int32_t len : {3, 17, 64, 65, 130, 200}) {
    std::vector<int32_t> p = {0};
    for (int32_t i = 1; i < len; ++i) p.push_back(int32_t(rng.randint(2, 6143)));
    prompts.push_back(p);
  }
  return prompts;
}

LoadOptions options(int32_t d, bool graphs) {
  return {
      .d = d, .max_requests = kMaxRequests, .max_context = 1024, .buckets = true, .graphs = graphs};
}

struct Outputs {
  std::vector<std::vector<int32_t>> batch, single;
};

Outputs run(model::DsaModel& m, const std::vector<std::vector<int32_t>>& prompts) {
  Outputs o;
  o.batch = generate(m, prompts, kNewTokens);
  o.single = generate(m, {prompts[0]}, kNewTokens);
  return o;
}

TEST(EngineGraphs, GraphsEqualEagerTokenForTokenAndCpuUpToNearTies) {
  DSA_SKIP_WITHOUT_GPU();
  const auto prompts = prompt_set();
  std::vector<std::vector<int32_t>> d0;
  std::unique_ptr<model::DsaModel> gpu_d0;
  for (int32_t d : {0, 1, 3, 4}) {
    auto graph = load_tiny(*cuda_table(), options(d, true));
    auto eager = load_tiny(*cuda_table(), options(d, false));
    auto cpu =
        load_tiny(probed_cpu_ops(), {.d = d, .max_requests = kMaxRequests, .max_context = 1024});
    ASSERT_TRUE(graph && eager && cpu);
    const Outputs g = run(*graph, prompts), e = run(*eager, prompts);
    const auto c = generate(*cpu, prompts, kNewTokens);
    ASSERT_EQ(g.batch.size(), prompts.size());
    ASSERT_EQ(e.batch.size(), prompts.size());
    ASSERT_EQ(c.size(), prompts.size());
    EXPECT_GT(graph->timing().replays, 0);
    EXPECT_EQ(eager->timing().replays, 0);
    std::printf(
        "d = %d: graphs %d (%zu nodes, captured in %.2f s); %lld of %lld forwards replayed\n", d,
        graph->graph_stats().graphs, graph->graph_stats().nodes, graph->graph_stats().capture_s,
        (long long)graph->timing().replays, (long long)graph->timing().forwards);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(g.batch[i], e.batch[i]) << "d = " << d << ", prompt " << i << ": graphs != eager";
    }
    EXPECT_EQ(g.single[0], e.single[0]) << "d = " << d << ": single prompt, graphs != eager";
    EXPECT_EQ(divergences_without_near_tie("cpu vs cuda graphs, d = " + std::to_string(d), *cpu,
                                           *graph, prompts, c, g.batch),
              0);
    if (d == 0) {
      d0 = g.batch;
      gpu_d0 = std::move(graph);
    } else {
      // Reported: d > 0 against d = 0 on the GPU (batch shapes differ, so roundings may).
      const int32_t bad = divergences_without_near_tie(
          "cuda graphs d = 0 vs d = " + std::to_string(d), *gpu_d0, *gpu_d0, prompts, d0, g.batch);
      EXPECT_EQ(bad, 0);
    }
  }
}

// The overlapped decode (engine.h, EngineOptions::overlap; on by default, so the test above runs
// it) against reading every step's tokens before the next launch: the same forwards over the
// same batches, so the same greedy tokens bit for bit, graphs on and off.
TEST(EngineGraphs, OverlappedDecodeEqualsReadingEveryStep) {
  DSA_SKIP_WITHOUT_GPU();
  const auto prompts = prompt_set();
  for (bool graphs : {true, false}) {
    auto m = load_tiny(*cuda_table(), options(0, graphs));
    ASSERT_TRUE(m);
    engine::EngineOptions on, off;
    off.overlap = false;
    const auto a = generate(*m, prompts, kNewTokens, on);
    const auto b = generate(*m, prompts, kNewTokens, off);
    ASSERT_EQ(a.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(a[i], b[i]) << "graphs " << graphs << ", prompt " << i;
    }
  }
}

}  // namespace
}  // namespace dsa::e2e
