// FP8 routed experts under CUDA graphs (SPEC.md §5, §8.6, §8.8): the tiny model's config made FP8
// as V3.2 ships (quantization_config; random weights, so nothing is downloaded) loads with
// cuda_graphs on — its capture used to be refused, since FP8 experts copied their ids to the host
// — and the engine's greedy outputs with graphs equal those without, token for token, with graph
// replays actually taken. Concurrent prompts (more than B_max), so buckets change.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsa/model/dsa_model.h"
#include "dsa/model/model_test_util.h"
#include "dsa/runtime/graph_runner.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"
#include "tests/e2e/model_compare.h"

namespace dsa::e2e {
namespace {

constexpr int32_t kMaxRequests = 4, kNewTokens = 24;

std::unique_ptr<model::DsaModel> load(const std::filesystem::path& dir, bool graphs) {
  model::ModelOptions o;
  o.max_requests = kMaxRequests;
  o.max_context = 512;
  o.max_extend_rows = 512;
  o.buckets = runtime::default_buckets(kMaxRequests);
  o.cuda_graphs = graphs;
  o.poison_workspace = poison_workspace_from_env();
  o.random_weights = true;
  o.random_seed = 11;
  auto m = model::DsaModel::load(dir, o, *cuda_table());
  EXPECT_TRUE(m.ok()) << (graphs ? "graphs: " : "eager: ") << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

TEST(Fp8MoeGraphsCuda, GraphsEqualEagerTokenForToken) {
  DSA_SKIP_WITHOUT_GPU();
  ASSERT_NE(cuda_table(), nullptr);
  model::testing::TempDir dir;
  model::testing::write_tiny_fp8_config(dir / "");
  auto eager = load(dir / "", false);
  auto graph = load(dir / "", true);
  ASSERT_NE(eager, nullptr);
  ASSERT_NE(graph, nullptr);
  testing::Rng rng(testing::test_seed());
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t len : {1, 5, 17, 64, 65, 130}) {
    std::vector<int32_t> p = {0};
    for (int32_t i = 1; i < len; ++i) p.push_back(int32_t(rng.randint(2, 6143)));
    prompts.push_back(p);
  }
  const auto want = generate(*eager, prompts, kNewTokens);
  const auto got = generate(*graph, prompts, kNewTokens);
  ASSERT_EQ(want.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], want[i]) << "prompt " << i;
  EXPECT_GT(graph->timing().replays, 0) << "no forward replayed a graph";
  EXPECT_EQ(eager->timing().replays, 0);
}

}  // namespace
}  // namespace dsa::e2e
