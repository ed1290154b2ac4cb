// A narrow checkpoint in DeepSeek-V3.2's real layout (issue 16's GPU test): `dsa make-checkpoint`
// writes it from testdata/deepseek-v3.2/config.json with the widths and layer count cut and the
// layout kept (FP8 e4m3 linears with 128 x 128 weight_scale_inv, MoE with group routing, the MTP
// layer at index num_hidden_layers, several shards and an index: tests/cli/v32_narrow_lib.sh's
// overrides, the ones the CPU CLI test loads), then the loader reads it onto the CPU and onto the
// GPU, and the engine's greedy tokens on the GPU (CUDA graphs on, as `dsa generate --device cuda`
// runs) equal the CPU's up to near-ties (SPEC.md §6.2: a divergence is legal only at a top-two
// logit gap below tau or a router decision within its margin), at d = 0 and d = 3.
// Random FP8 weights give near-flat logits, so the greedy runs part at a near-tie within the first
// few tokens (H200, 2026-12-06: after 1-6 of 24). The teacher-forced case covers every position:
// one EXTEND forward over each prompt and the CPU's continuation, its logits compared row by row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dsa/model/dsa_model.h"
#include "dsa/model/model_test_util.h"
#include "dsa/runtime/graph_runner.h"
#include "dsa/testing/gpu_skip.h"
#include "tests/e2e/model_compare.h"
#include "tests/e2e/narrow_checkpoint.h"
#include "tests/e2e/router_margin.h"

namespace dsa::e2e {
namespace {

constexpr int32_t kNewTokens = 24;

std::string make_checkpoint(const std::filesystem::path& dir, const std::string& extra = "") {
  return make_narrow_checkpoint(DSA_BINARY, dir, extra);
}

void greedy_matches_cpu(int32_t d) {
  model::testing::TempDir tmp;
  const std::string made = make_checkpoint(tmp / "");
  ASSERT_EQ(made, "");
  const auto prompts = golden_prompt_ids();  // the tiny tokenizer's ids: vocab_size is cut to it
  const int32_t n = int32_t(prompts.size());
  auto cpu = load_narrow(tmp / "v32", probed_cpu_ops(), d, n);
  auto gpu = load_narrow(tmp / "v32", *cuda_table(), d, n);
  ASSERT_TRUE(cpu && gpu);
  const auto want = generate(*cpu, prompts, kNewTokens);
  const auto got = generate(*gpu, prompts, kNewTokens);
  ASSERT_EQ(got.size(), prompts.size());
  for (const auto& g : got) EXPECT_FALSE(g.empty());
  EXPECT_EQ(
      divergences_without_near_tie("narrow V3.2 checkpoint, cpu vs cuda, d = " + std::to_string(d),
                                   *cpu, *gpu, prompts, want, got),
      0);
  EXPECT_GT(gpu->timing().replays, 0) << "no forward replayed a graph";
}

// Teacher-forced: each prompt followed by the CPU's greedy continuation, one EXTEND forward on each
// backend, the logits of the continuation's rows compared. The narrow checkpoint's random router
// decides by margins of 1e-5 to 1e-3 within a prompt's first tokens (H100, 2026-12-07: the greedy
// runs parted at such router near-ties), and a flipped expert changes that row by O(1) and, through
// attention, every later row: the first run of this test (with group routing) measured a mean
// error of 10-32% of the row spread and 61 of 72 clear argmaxes agreeing, prompts with the
// smallest margins the worst. So this case writes the same checkpoint with every expert active
// (num_experts_per_tok = n_routed_experts, topk_group = n_group: the decode-equivalent model's
// rule), which leaves the router no discrete choice (the probe's margin stays above the near-tie
// bound, checked) and makes the comparison one of the kernels alone; the greedy cases above keep
// the group routing, judged by the near-tie rule.
//
// The bound is statistical: each row's mean |error| over its spread (the standard deviation of the
// CPU's row, which a shared offset does not move), averaged over the rows; a wrong kernel is off by
// about the spread itself (a relative error near 1), and its argmax agrees with the CPU's on about
// 1 / V of the rows. Random weights give near-flat logits (a small spread), so the roundings in
// which the GPU and the CPU differ (bf16 results in another order, through every layer) weigh
// more than on a trained model: the bf16 checkpoint (quantization_config removed) measured 0.053,
// argmax on 72 of 74 clear rows (H100, stop 46, call 2). FP8 linears add the activation quantiser
// (SPEC.md §8.8), which rounds each value to e4m3 (3 mantissa bits, half an ulp = 6% of the value),
// so a class-T difference in its input flips a rounding by 6% with a probability that grows with
// the difference, and each layer's quantisers amplify what the layers before left: 0.025 at depth 1
// (the dense layer alone), 0.083 at depth 2, 0.118 at the full depth (3 layers), argmax on 78% of
// the clear rows (H100, stop 46, call 1). The yardstick is the CPU's own response to one rounding's
// worth of difference (narrow_checkpoint_cpu_test.cc: routed_scaling_factor moved by one bf16
// ulp): 0.039 with FP8 linears and 0.017 with bf16 ones, so the GPU is about three such roundings
// from the CPU in both (3.05x and 3.06x). The bounds below are about twice the GPU's figures (set
// after the measurements, which is why they are written here) and stay four to ten times below a
// wrong kernel's.
// The narrow checkpoint with `extra` make-checkpoint flags, teacher-forced on both backends over
// the CPU's greedy continuation (the comment above says how it is judged).
TeacherForced teacher_forced(const std::string& label, const std::string& extra) {
  model::testing::TempDir tmp;
  const std::string made = make_checkpoint(tmp / "", extra);
  EXPECT_EQ(made, "");
  if (!made.empty()) return {};
  const auto prompts = golden_prompt_ids();
  const int32_t n = int32_t(prompts.size());
  auto cpu = load_narrow(tmp / "v32", probed_cpu_ops(), 0, n);
  auto gpu = load_narrow(tmp / "v32", *cuda_table(), 0, n);
  EXPECT_TRUE(cpu && gpu);
  if (!cpu || !gpu) return {};
  EXPECT_EQ(cpu->config().num_experts_per_tok, cpu->config().n_routed_experts);
  reset_router_margin();
  const auto continuation = generate(*cpu, prompts, kNewTokens);
  EXPECT_GE(router_margin(), kRouterTieMargin) << label << ": the router decides by a near-tie";
  return compare_teacher_forced(label + ", cuda vs cpu", *cpu, *gpu, prompts, continuation);
}

// Every expert active: the router has no choice to flip (see above).
constexpr const char* kEveryExpert = "--set num_experts_per_tok=4 --set topk_group=2";
// The FP8 bounds (see above): a statistical comparison through e4m3 activation roundings.
constexpr double kFp8RelativeBound = 0.25;

void expect_clear_rows_agree(const TeacherForced& t, double fraction) {
  EXPECT_GE(t.clear, (t.rows + 3) / 4) << "too few rows clear tau for the argmax check";
  EXPECT_GE(double(t.agree), fraction * double(t.clear));
}

TEST(NarrowCheckpointCuda, TeacherForcedLogitsMatchCpu) {
  DSA_SKIP_WITHOUT_GPU();
  const TeacherForced t = teacher_forced("narrow V3.2 checkpoint", kEveryExpert);
  EXPECT_LE(t.relative_mean(), kFp8RelativeBound);
  expect_clear_rows_agree(t, 2.0 / 3.0);
}

// The control: the same checkpoint with bf16 linears (quantization_config removed), every kernel
// of the forward but the FP8 ones, so no e4m3 rounding amplifies a difference; what it measures is
// the bf16 part of the FP8 case's error. A layout, loader or kernel error shows here as a relative
// error near 1.
TEST(NarrowCheckpointCuda, TeacherForcedBf16Control) {
  DSA_SKIP_WITHOUT_GPU();
  const TeacherForced t =
      teacher_forced("narrow V3.2 checkpoint, bf16",
                     std::string(kEveryExpert) + " --set quantization_config=null");
  EXPECT_LE(t.relative_mean(), 0.1);
  expect_clear_rows_agree(t, 0.9);
}

// Where a difference comes from: the same comparison at depth 1 (the dense layer alone: attention,
// indexer, dense MLP, head) and 2 (plus one MoE layer), printed beside the full model's. Depth 1
// has one layer of FP8 roundings to amplify a difference, and stays within 0.05; depth 2 within
// the full model's bound.
TEST(NarrowCheckpointCuda, TeacherForcedByDepth) {
  DSA_SKIP_WITHOUT_GPU();
  for (int32_t layers : {1, 2}) {
    const std::string label = "narrow V3.2 checkpoint, " + std::to_string(layers) + " layer(s)";
    const TeacherForced t = teacher_forced(
        label, std::string(kEveryExpert) + " --set num_hidden_layers=" + std::to_string(layers));
    EXPECT_LE(t.relative_mean(), layers == 1 ? 0.05 : kFp8RelativeBound) << label;
  }
}

TEST(NarrowCheckpointCuda, GreedyDecodeMatchesCpuUpToNearTies) {
  DSA_SKIP_WITHOUT_GPU();
  greedy_matches_cpu(0);
}

TEST(NarrowCheckpointCuda, SpeculativeGreedyMatchesCpuUpToNearTies) {
  DSA_SKIP_WITHOUT_GPU();
  greedy_matches_cpu(3);
}

}  // namespace
}  // namespace dsa::e2e
