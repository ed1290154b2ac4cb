// The tiny model on the CUDA backend against the CPU backend (issue 6 item 3): last-row logits of
// each golden prompt within a tolerance, and greedy generation through the engine (what
// `dsa generate --device cuda` runs) with d = 0 and d = 3, token-identical up to the first
// divergence, which must be a near-tie: the CPU's top-two logit gap there below tau (SPEC.md §6.2).
// Every divergence is printed with both runs' gaps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"
#include "dsa/runtime/metadata_builder.h"
#include "dsa/testing/gpu_skip.h"
#include "tests/e2e/golden.h"

namespace dsa::e2e {
namespace {

constexpr double kTau = 0.05;  // near-tie threshold of the tiny model (SPEC.md §6.2)
// CUDA vs CPU logits: every element within 0.1 + 1% of |cpu| (the class-T GEMM and norm roundings
// of the two backends flip single bf16 roundings that cascade through 5 layers, as against the
// PyTorch reference in tiny_model_test).
constexpr double kLogitAtol = 0.1, kLogitRtol = 0.01;
constexpr int32_t kNewTokens = 32;

const Golden& golden() {
  static const Golden g = load_golden(source_dir() + "/testdata/tiny-dsa/golden.json");
  return g;
}

std::unique_ptr<model::DsaModel> load(const kernels::OpTable& ops, int32_t d) {
  model::ModelOptions o;
  o.max_context = 1024;
  o.max_requests = int32_t(golden().prompts.size());
  o.max_extend_rows = 1024;
  o.num_draft_tokens = d;
  auto m = model::DsaModel::load(source_dir() + "/models/tiny-dsa", o, ops);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

const kernels::OpTable* cuda_table() {
  auto t = kernels::cuda_ops();
  return t.ok() ? *t : nullptr;
}

// Logits of the last `count` rows of `ids` from one EXTEND forward of a fresh request.
std::vector<float> last_rows(model::DsaModel& m, const std::vector<int32_t>& ids, int32_t count) {
  auto slot = m.pages().open_request();
  EXPECT_TRUE(slot.ok());
  const int32_t n = int32_t(ids.size());
  runtime::ForwardBatch b;
  b.mode = runtime::ForwardMode::kExtend;
  b.requests.push_back({*slot, 0, n, n - count, count});
  runtime::ForwardMetadata meta(m.metadata_config());
  model::ForwardOutput out;
  EXPECT_TRUE(m.pages().reserve(*slot, n).ok());
  Status s = runtime::build_forward_metadata(b, m.metadata_config(), m.pages().page_table(), meta);
  if (s.ok()) s = m.forward_target(meta, ids, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(m.pages().close_request(*slot).ok());
  return out.logits;
}

std::pair<int32_t, double> argmax_gap(const float* row, int32_t V) {
  int32_t best = 0;
  for (int32_t v = 1; v < V; ++v)
    if (row[v] > row[best]) best = v;
  float second = -INFINITY;
  for (int32_t v = 0; v < V; ++v)
    if (v != best) second = std::max(second, row[v]);
  return {best, double(row[best]) - double(second)};
}

// Greedy outputs of every golden prompt, run concurrently through the engine.
std::vector<std::vector<int32_t>> generate(model::DsaModel& m) {
  engine::Engine eng(m);
  std::vector<int64_t> ids;
  for (const GoldenPrompt& p : golden().prompts) {
    auto id = eng.add_request({p.ids, kNewTokens, {}});
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    ids.push_back(*id);
  }
  Status s = eng.run_to_completion();
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<std::vector<int32_t>> out;
  for (int64_t id : ids) out.push_back(eng.request(id).output);
  return out;
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
      if (cgap >= kTau && argmax_gap(&got[size_t(r) * V], V).first != ct) ++argmax_differs;
    }
    std::printf("prompt of %zu tokens, %d rows: cuda vs cpu max |dlogit| %.5f, mean %.6f\n",
                p.ids.size(), count, max_abs, mean_abs);
    EXPECT_EQ(over, 0) << "max |dlogit| " << max_abs;
    EXPECT_EQ(argmax_differs, 0);
  }
}

void greedy_matches_cpu(int32_t d) {
  auto cpu = load(kernels::cpu_ops(), d);
  auto gpu = load(*cuda_table(), d);
  ASSERT_TRUE(cpu && gpu);
  const int32_t V = int32_t(cpu->config().vocab_size);
  auto want = generate(*cpu), got = generate(*gpu);
  int32_t divergences = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const GoldenPrompt& p = golden().prompts[i];
    const size_t common = std::min(want[i].size(), got[i].size());
    size_t j = 0;
    while (j < common && want[i][j] == got[i][j]) ++j;
    if (j == common) {
      std::printf("d = %d, prompt %zu: %zu tokens identical\n", d, i, common);
      EXPECT_EQ(want[i].size(), got[i].size());
      continue;
    }
    ++divergences;
    // Both backends' logits at the divergent position, from the shared prefix.
    std::vector<int32_t> prefix = p.ids;
    prefix.insert(prefix.end(), want[i].begin(), want[i].begin() + long(j));
    auto [ct, cgap] = argmax_gap(last_rows(*cpu, prefix, 1).data(), V);
    auto [gt, ggap] = argmax_gap(last_rows(*gpu, prefix, 1).data(), V);
    std::printf(
        "d = %d, prompt %zu: divergence at token %zu: cpu %d (gap %.4f), cuda %d (gap %.4f); "
        "tau %.2f\n",
        d, i, j, want[i][j], cgap, got[i][j], ggap, kTau);
    EXPECT_LT(cgap, kTau) << "d = " << d << ", prompt " << i << ": divergence at token " << j
                          << " without a near-tie";
  }
  std::printf("d = %d: %d divergences over %zu prompts\n", d, divergences, want.size());
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
