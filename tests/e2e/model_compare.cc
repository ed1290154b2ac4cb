#include "tests/e2e/model_compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dsa/engine/engine.h"
#include "tests/e2e/router_margin.h"

namespace dsa::e2e {

const Golden& golden() {
  static const Golden g = load_golden(source_dir() + "/testdata/tiny-dsa/golden.json");
  return g;
}

const kernels::OpTable* cuda_table() {
  auto t = kernels::cuda_ops();
  return t.ok() ? *t : nullptr;
}

bool poison_workspace_from_env() {
  const char* e = std::getenv("DSA_POISON_WORKSPACE");
  return e != nullptr && std::string(e) == "1";
}

std::unique_ptr<model::DsaModel> load_tiny(const kernels::OpTable& ops, const LoadOptions& lo) {
  model::ModelOptions o;
  o.max_context = lo.max_context;
  o.max_requests = lo.max_requests;
  o.max_extend_rows = 1024;
  o.num_draft_tokens = lo.d;
  if (lo.buckets) o.buckets = runtime::default_buckets(lo.max_requests);
  o.cuda_graphs = lo.graphs;
  o.fuse.row_ops = lo.row_ops;
  o.poison_workspace =
      lo.poison || (ops.backend != kernels::Backend::kCpu && poison_workspace_from_env());
  auto m = model::DsaModel::load(source_dir() + "/models/tiny-dsa", o, ops);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<float> last_rows(model::DsaModel& m, const std::vector<int32_t>& ids, int32_t count) {
  auto slot = m.pages().open_request();
  EXPECT_TRUE(slot.ok());
  const int32_t n = int32_t(ids.size());
  runtime::ForwardBatch b;
  b.mode = runtime::ForwardMode::kExtend;
  b.requests.push_back({*slot, 0, n, n - count, count});
  model::ForwardOutput out;
  EXPECT_TRUE(m.pages().reserve(*slot, n).ok());
  Status s = m.forward(b, ids, {}, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(m.pages().close_request(*slot).ok());
  return out.logits;
}

std::vector<std::vector<int32_t>> generate(model::DsaModel& m,
                                           const std::vector<std::vector<int32_t>>& prompts,
                                           int32_t new_tokens, engine::EngineOptions options) {
  engine::Engine eng(m, std::move(options));
  std::vector<int64_t> ids;
  for (const auto& p : prompts) {
    auto id = eng.add_request({p, new_tokens, {}});
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    if (!id.ok()) return {};
    ids.push_back(*id);
  }
  Status s = eng.run_to_completion();
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<std::vector<int32_t>> out;
  for (int64_t id : ids) out.push_back(eng.request(id).output);
  return out;
}

std::vector<std::vector<int32_t>> golden_prompt_ids() {
  std::vector<std::vector<int32_t>> out;
  for (const GoldenPrompt& p : golden().prompts) out.push_back(p.ids);
  return out;
}

int32_t divergences_without_near_tie(const std::string& label, model::DsaModel& reference,
                                     model::DsaModel& other,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const std::vector<std::vector<int32_t>>& want,
                                     const std::vector<std::vector<int32_t>>& got) {
  const int32_t V = int32_t(reference.config().vocab_size);
  int32_t bad = 0, divergences = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const size_t common = std::min(want[i].size(), got[i].size());
    size_t j = 0;
    while (j < common && want[i][j] == got[i][j]) ++j;
    if (j == common) {
      std::printf("%s, prompt %zu: %zu tokens identical\n", label.c_str(), i, common);
      EXPECT_EQ(want[i].size(), got[i].size());
      continue;
    }
    ++divergences;
    // Both runs' logits at the divergent position, from the shared prefix.
    std::vector<int32_t> prefix = prompts[i];
    prefix.insert(prefix.end(), want[i].begin(), want[i].begin() + long(j));
    reset_router_margin();
    auto [rt, rgap] = argmax_gap(last_rows(reference, prefix, 1).data(), V);
    const double margin = router_margin();  // finite when `reference` runs probed_cpu_ops()
    auto [ot, ogap] = argmax_gap(last_rows(other, prefix, 1).data(), V);
    const bool logit_tie = rgap < kNearTieTau, router_tie = margin < kRouterTieMargin;
    bad += !logit_tie && !router_tie;
    std::printf(
        "%s, prompt %zu: %zu of %zu tokens agree; divergence at token %zu: %d (gap %.4f) vs %d "
        "(gap %.4f), smallest router margin %.2e: %s\n",
        label.c_str(), i, j, common, j, want[i][j], rgap, got[i][j], ogap, margin,
        logit_tie    ? "near-tie of the logits"
        : router_tie ? "near-tie of the MoE router"
                     : "NOT a near-tie");
  }
  std::printf(
      "%s: %d divergences over %zu prompts, %d without a near-tie (logit gap < %.2f or router "
      "margin < %.0e)\n",
      label.c_str(), divergences, want.size(), bad, kNearTieTau, kRouterTieMargin);
  return bad;
}

}  // namespace dsa::e2e
