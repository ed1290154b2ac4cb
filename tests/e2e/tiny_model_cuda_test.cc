// The tiny model on the CUDA backend against the CPU backend (issue 6 item 3): last-row logits of
// each golden prompt within a tolerance, and greedy generation through the engine (what
// `dsa generate --device cuda` runs) with d = 0 and d = 3, token-identical up to the first
// divergence, which must be a near-tie: the CPU's top-two logit gap there below tau (SPEC.md §6.2).
// Every divergence is printed with both runs' gaps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"
#include "dsa/testing/gpu_skip.h"
#include "tests/e2e/model_compare.h"
#include "tests/e2e/router_margin.h"

namespace dsa::e2e {
namespace {

// CUDA vs CPU logits: every element within 0.1 + 1% of |cpu| (the class-T GEMM and norm roundings
// of the two backends flip single bf16 roundings that cascade through 5 layers, as against the
// PyTorch reference in tiny_model_test).
constexpr double kLogitAtol = 0.1, kLogitRtol = 0.01;
constexpr int32_t kNewTokens = 32;

std::unique_ptr<model::DsaModel> load(const kernels::OpTable& ops, int32_t d) {
  return load_tiny(ops, {.d = d, .max_requests = int32_t(golden().prompts.size())});
}

TEST(TinyModelCuda, LastRowLogitsMatchCpu) {
  DSA_SKIP_WITHOUT_GPU();
  auto cpu = load(kernels::cpu_ops(), 0);
  auto gpu = load(*cuda_table(), 0);
  ASSERT_TRUE(cpu && gpu);
  const int32_t V = int32_t(cpu->config().vocab_size);
  for (const GoldenPrompt& p : golden().prompts) {
    const int32_t count = int32_t(p.last_positions.size());
    auto want = last_rows(*cpu, p.ids, count), got = last_rows(*gpu, p.ids, count);
    ASSERT_EQ(got.size(), want.size());
    double max_abs = 0, mean_abs = 0;
    int64_t over = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = std::fabs(double(got[i]) - double(want[i]));
      max_abs = std::max(max_abs, e);
      mean_abs += e / double(got.size());
      over += e > kLogitAtol + kLogitRtol * std::fabs(double(want[i]));
    }
    int32_t argmax_differs = 0;
    for (int32_t r = 0; r < count; ++r) {
      auto [ct, cgap] = argmax_gap(&want[size_t(r) * V], V);
      if (cgap >= kNearTieTau && argmax_gap(&got[size_t(r) * V], V).first != ct) ++argmax_differs;
    }
    std::printf("prompt of %zu tokens, %d rows: cuda vs cpu max |dlogit| %.5f, mean %.6f\n",
                p.ids.size(), count, max_abs, mean_abs);
    EXPECT_EQ(over, 0) << "max |dlogit| " << max_abs;
    EXPECT_EQ(argmax_differs, 0);
  }
}

// The fused row-transform launches (attention_prologue, indexer_query) are bit-identical to the
// separate ops they replace, so the whole forward is too: every prompt's EXTEND logits (rows of
// 1..n tokens) and the greedy speculative tokens (verify, draft-extend and draft decodes).
TEST(TinyModelCuda, FusedRowOpsAreTheSeparateOpsBitForBit) {
  DSA_SKIP_WITHOUT_GPU();
  const int32_t n = int32_t(golden().prompts.size());
  auto fused = load_tiny(*cuda_table(), {.d = 3, .max_requests = n});
  auto separate = load_tiny(*cuda_table(), {.d = 3, .max_requests = n, .row_ops = false});
  ASSERT_TRUE(fused && separate);
  for (const GoldenPrompt& p : golden().prompts) {
    const int32_t count = int32_t(p.last_positions.size());
    auto want = last_rows(*separate, p.ids, count), got = last_rows(*fused, p.ids, count);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << "prompt of " << p.ids.size() << " tokens";
  }
  const auto prompts = golden_prompt_ids();
  EXPECT_EQ(generate(*fused, prompts, kNewTokens), generate(*separate, prompts, kNewTokens));
}

void greedy_matches_cpu(int32_t d) {
  auto cpu = load(probed_cpu_ops(), d);
  auto gpu = load(*cuda_table(), d);
  ASSERT_TRUE(cpu && gpu);
  const auto prompts = golden_prompt_ids();
  auto want = generate(*cpu, prompts, kNewTokens), got = generate(*gpu, prompts, kNewTokens);
  EXPECT_EQ(divergences_without_near_tie("cpu vs cuda, d = " + std::to_string(d), *cpu, *gpu,
                                         prompts, want, got),
            0);
}

TEST(TinyModelCuda, GreedyDecodeMatchesCpuUpToNearTies) {
  DSA_SKIP_WITHOUT_GPU();
  greedy_matches_cpu(0);
}

TEST(TinyModelCuda, SpeculativeGreedyMatchesCpuUpToNearTies) {
  DSA_SKIP_WITHOUT_GPU();
  greedy_matches_cpu(3);
}

}  // namespace
}  // namespace dsa::e2e
