#include "tests/e2e/narrow_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "dsa/runtime/graph_runner.h"
#include "tests/e2e/golden.h"
#include "tests/e2e/model_compare.h"

namespace dsa::e2e {

namespace {

// The shell quoting of one argument (single quotes; a quote inside closes, escapes and reopens).
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

std::string make_narrow_checkpoint(const std::string& dsa, const std::filesystem::path& dir,
                                   const std::string& extra) {
  const std::string log = (dir / "make.log").string();
  const std::string cmd =
      "bash -c '. \"$1/tests/cli/v32_narrow_lib.sh\" && \"$2\" make-checkpoint --config "
      "\"$1/testdata/deepseek-v3.2/config.json\" --out \"$3\" \"${narrow[@]}\" --shards 3 --seed "
      "7 " +
      extra +
      "' "
      "make-checkpoint " +
      quoted(source_dir()) + " " + quoted(dsa) + " " + quoted((dir / "v32").string()) + " > " +
      quoted(log) + " 2>&1";
  if (std::system(cmd.c_str()) == 0) return "";
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return "make-checkpoint failed: " + ss.str();
}

std::unique_ptr<model::DsaModel> load_narrow(const std::filesystem::path& dir,
                                             const kernels::OpTable& ops, int32_t d,
                                             int32_t requests) {
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

TeacherForced compare_teacher_forced(const std::string& label, model::DsaModel& reference,
                                     model::DsaModel& other,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const std::vector<std::vector<int32_t>>& continuation) {
  TeacherForced t;
  const int32_t n = int32_t(prompts.size());
  EXPECT_EQ(continuation.size(), prompts.size());
  if (continuation.size() != prompts.size()) return t;
  const size_t V = size_t(reference.config().vocab_size);
  for (int32_t i = 0; i < n; ++i) {
    std::vector<int32_t> ids = prompts[size_t(i)];
    ids.insert(ids.end(), continuation[size_t(i)].begin(), continuation[size_t(i)].end());
    const int32_t rows = int32_t(continuation[size_t(i)].size());
    const auto want = last_rows(reference, ids, rows), got = last_rows(other, ids, rows);
    EXPECT_EQ(want.size(), size_t(rows) * V);
    EXPECT_EQ(got.size(), want.size());
    if (got.size() != want.size() || want.size() != size_t(rows) * V) return t;
    double max_abs = 0, relative = 0;
    int32_t clear = 0, agree = 0, non_finite = 0;
    for (int32_t r = 0; r < rows; ++r) {
      const float* w = &want[size_t(r) * V];
      const float* g = &got[size_t(r) * V];
      double mean = 0, err = 0;
      for (size_t k = 0; k < V; ++k) {
        non_finite += !std::isfinite(g[k]);
        mean += double(w[k]) / double(V);
        const double e = std::fabs(double(g[k]) - double(w[k]));
        max_abs = std::max(max_abs, e);
        err += e / double(V);
      }
      double var = 0;
      for (size_t k = 0; k < V; ++k) var += (double(w[k]) - mean) * (double(w[k]) - mean);
      const double spread = std::sqrt(var / double(V));
      EXPECT_GT(spread, 0) << label << ", prompt " << i << " row " << r
                           << ": the reference's logits are constant";
      relative += spread > 0 ? err / spread : 0;
      auto [token, gap] = argmax_gap(w, int32_t(V));
      if (gap < kNearTieTau) continue;
      ++clear;
      agree += argmax_gap(g, int32_t(V)).first == token;
    }
    EXPECT_EQ(non_finite, 0) << label << ", prompt " << i << ": non-finite logits";
    std::printf(
        "%s, teacher-forced, prompt %d: %d rows, max |dlogit| %.4f, mean |dlogit| / "
        "row spread %.5f, argmax agrees on %d of %d rows with gap >= tau\n",
        label.c_str(), i, rows, max_abs, relative / double(rows), agree, clear);
    t.rows += rows;
    t.clear += clear;
    t.agree += agree;
    t.relative_sum += relative;
  }
  std::printf("%s, teacher-forced: %d rows, mean |dlogit| / row spread %.5f, argmax %d of %d\n",
              label.c_str(), t.rows, t.relative_mean(), t.agree, t.clear);
  return t;
}

}  // namespace dsa::e2e
