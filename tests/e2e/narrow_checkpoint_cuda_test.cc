// A narrow checkpoint in DeepSeek-V3.2's real layout (issue 16's GPU test): `dsa make-checkpoint`
// writes it from testdata/deepseek-v3.2/config.json with the widths and layer count cut and the
// layout kept (FP8 e4m3 linears with 128 x 128 weight_scale_inv, MoE with group routing, the MTP
// layer at index num_hidden_layers, several shards and an index: tests/cli/v32_narrow_lib.sh's
// overrides, the ones the CPU CLI test loads), then the loader reads it onto the CPU and onto the
// GPU, and the engine's greedy tokens on the GPU (CUDA graphs on, as `dsa generate --device cuda`
// runs) equal the CPU's up to near-ties (SPEC.md §6.2: a divergence is legal only at a top-two
// logit gap below tau or a router decision within its margin), at d = 0 and d = 3.
#include <gtest/gtest.h>

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
#include "tests/e2e/router_margin.h"

namespace dsa::e2e {
namespace {

constexpr int32_t kNewTokens = 24;

// The shell quoting of one argument (single quotes; a quote inside closes, escapes and reopens).
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Writes the narrow checkpoint into `dir` with the dsa binary built beside this test; the
// command's output on failure.
std::string make_checkpoint(const std::filesystem::path& dir) {
  const std::string log = (dir / "make.log").string();
  const std::string cmd =
      "bash -c '. \"$1/tests/cli/v32_narrow_lib.sh\" && \"$2\" make-checkpoint --config "
      "\"$1/testdata/deepseek-v3.2/config.json\" --out \"$3\" \"${narrow[@]}\" --shards 3 --seed "
      "7' "
      "make-checkpoint " +
      quoted(source_dir()) + " " + quoted(DSA_BINARY) + " " + quoted((dir / "v32").string()) +
      " > " + quoted(log) + " 2>&1";
  if (std::system(cmd.c_str()) == 0) return "";
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return "make-checkpoint failed: " + ss.str();
}

std::unique_ptr<model::DsaModel> load(const std::filesystem::path& dir, const kernels::OpTable& ops,
                                      int32_t d, int32_t requests) {
  model::ModelOptions o;
  o.max_context = 1024;
  o.max_requests = requests;
  o.max_extend_rows = 1024;
  o.num_draft_tokens = d;
  if (ops.backend != kernels::Backend::kCpu) {
    o.buckets = runtime::default_buckets(requests);
    o.cuda_graphs = true;
    o.poison_workspace = poison_workspace_from_env();
  }
  auto m = model::DsaModel::load(dir, o, ops);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

void greedy_matches_cpu(int32_t d) {
  model::testing::TempDir tmp;
  const std::string made = make_checkpoint(tmp / "");
  ASSERT_EQ(made, "");
  const auto prompts = golden_prompt_ids();  // the tiny tokenizer's ids: vocab_size is cut to it
  const int32_t n = int32_t(prompts.size());
  auto cpu = load(tmp / "v32", probed_cpu_ops(), d, n);
  auto gpu = load(tmp / "v32", *cuda_table(), d, n);
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
