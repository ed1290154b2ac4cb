// evaluate_perplexity's per-window report (PerplexityOptions::on_window) on the shipped tiny model:
// the windows' figures add up to the run's result, each window's rates are its own, a window does
// not depend on how many follow it, and bad options are refused. Short windows keep it fast (CPU).
#include "dsa/model/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "dsa/model/dsa_model.h"
#include "dsa/model/tokenizer.h"
#include "tests/e2e/golden.h"

namespace dsa::e2e {
namespace {

constexpr int32_t kWindow = 16;

struct Loaded {
  std::unique_ptr<model::DsaModel> model;
  std::optional<model::Tokenizer> tokenizer;
  std::string text;
};

Loaded load() {
  Loaded l;
  const std::string dir = source_dir() + "/models/tiny-dsa";
  model::ModelOptions o;
  o.max_context = kWindow;
  o.max_requests = 1;
  o.max_extend_rows = kWindow;
  auto m = model::DsaModel::load(dir, o, kernels::cpu_ops());
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return l;
  l.model = std::move(*m);
  auto tok = model::Tokenizer::load(dir + "/tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  if (!tok.ok()) return l;
  EXPECT_TRUE(tok->set_special_ids(int32_t(l.model->config().bos_token_id),
                                   int32_t(l.model->config().eos_token_id))
                  .ok());
  l.tokenizer = std::move(*tok);
  std::ifstream f(source_dir() + "/testdata/heldout.txt", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  l.text = ss.str();
  return l;
}

struct Scored {
  model::PerplexityResult result;
  std::vector<model::PerplexityWindow> windows;
};

Scored score(Loaded& l, int32_t max_windows, bool with_mtp = true) {
  Scored r;
  model::PerplexityOptions o;
  o.window = kWindow;
  o.max_windows = max_windows;
  o.with_mtp = with_mtp;
  o.on_window = [&r](const model::PerplexityWindow& w) { r.windows.push_back(w); };
  auto res = model::evaluate_perplexity(*l.model, *l.tokenizer, l.text, o);
  EXPECT_TRUE(res.ok()) << res.status().to_string();
  if (res.ok()) r.result = *res;
  return r;
}

TEST(PerplexityWindows, AddUpToTheResult) {
  Loaded l = load();
  ASSERT_NE(l.model, nullptr);
  ASSERT_TRUE(l.tokenizer);
  const Scored r = score(l, 3);
  ASSERT_EQ(r.windows.size(), 3u);
  EXPECT_EQ(r.result.windows, 3);
  double nll = 0;
  int64_t scored = 0, hits = 0, mtp_rows = 0, mtp_hits = 0, agree_hits = 0;
  for (size_t i = 0; i < r.windows.size(); ++i) {
    const model::PerplexityWindow& w = r.windows[i];
    EXPECT_EQ(w.index, int32_t(i));
    EXPECT_EQ(w.total, 3);
    EXPECT_EQ(w.scored, kWindow) << "window " << i << " lies inside the stream";
    EXPECT_EQ(w.mtp_rows, kWindow - 1);
    EXPECT_GT(w.nll, 0);
    // The window's own rates, not running figures.
    EXPECT_NEAR(w.perplexity, std::exp(w.nll / double(w.scored)), 1e-9 * w.perplexity);
    EXPECT_DOUBLE_EQ(w.top1, double(w.top1_hits) / double(w.scored));
    EXPECT_DOUBLE_EQ(w.mtp_top1, double(w.mtp_hits) / double(w.mtp_rows));
    EXPECT_DOUBLE_EQ(w.mtp_agree, double(w.mtp_agree_hits) / double(w.mtp_rows));
    // Where the target's argmax at row i + 1 is the text's token i + 2, agreeing with the target
    // and hitting the text are one event; they can differ only at the target's misses.
    EXPECT_LE(std::abs(w.mtp_agree_hits - w.mtp_hits), w.scored - w.top1_hits) << "window " << i;
    nll += w.nll;
    scored += w.scored;
    hits += w.top1_hits;
    mtp_rows += w.mtp_rows;
    mtp_hits += w.mtp_hits;
    agree_hits += w.mtp_agree_hits;
  }
  EXPECT_NEAR(r.result.nll, nll, 1e-12 * nll);
  EXPECT_EQ(r.result.predicted, scored);
  EXPECT_EQ(r.result.top1_hits, hits);
  EXPECT_EQ(r.result.mtp_rows, mtp_rows);
  EXPECT_EQ(r.result.mtp_hits, mtp_hits);
  EXPECT_EQ(r.result.mtp_agree_hits, agree_hits);
  EXPECT_DOUBLE_EQ(r.result.mtp_agree, double(agree_hits) / double(mtp_rows));
  // A drafter meets the target more often than the text (the shipped layer, distilled from its
  // target: 0.73 against 0.31 on held-out text): the two counts are different measurements.
  EXPECT_GT(agree_hits, mtp_hits);
  EXPECT_NEAR(r.result.perplexity, std::exp(nll / double(scored)), 1e-9 * r.result.perplexity);
  EXPECT_DOUBLE_EQ(r.result.top1, double(hits) / double(scored));
  EXPECT_DOUBLE_EQ(r.result.mtp_top1, double(mtp_hits) / double(mtp_rows));
  // Distinct text in each window: identical figures would mean one window reported three times.
  EXPECT_NE(r.windows[0].nll, r.windows[1].nll);
  EXPECT_NE(r.windows[1].nll, r.windows[2].nll);
}

// Window 0 scores the same whether it is the only window or the first of three, and with the MTP
// measurement off only the MTP figures change.
TEST(PerplexityWindows, AWindowDoesNotDependOnTheOthers) {
  Loaded l = load();
  ASSERT_NE(l.model, nullptr);
  ASSERT_TRUE(l.tokenizer);
  const Scored three = score(l, 3), one = score(l, 1), no_mtp = score(l, 1, /*with_mtp=*/false);
  ASSERT_EQ(three.windows.size(), 3u);
  ASSERT_EQ(one.windows.size(), 1u);
  ASSERT_EQ(no_mtp.windows.size(), 1u);
  EXPECT_EQ(one.windows[0].total, 1);
  EXPECT_NEAR(one.windows[0].nll, three.windows[0].nll, 1e-9 * three.windows[0].nll);
  EXPECT_EQ(one.windows[0].top1_hits, three.windows[0].top1_hits);
  EXPECT_EQ(one.windows[0].mtp_hits, three.windows[0].mtp_hits);
  EXPECT_EQ(one.windows[0].mtp_agree_hits, three.windows[0].mtp_agree_hits);
  EXPECT_NEAR(no_mtp.windows[0].nll, one.windows[0].nll, 1e-9 * one.windows[0].nll);
  EXPECT_EQ(no_mtp.windows[0].mtp_rows, 0);
  EXPECT_EQ(no_mtp.windows[0].mtp_top1, 0);
  EXPECT_EQ(no_mtp.windows[0].mtp_agree_hits, 0);
  EXPECT_EQ(no_mtp.result.mtp_rows, 0);
}

TEST(PerplexityWindows, RefusesBadOptions) {
  Loaded l = load();
  ASSERT_NE(l.model, nullptr);
  ASSERT_TRUE(l.tokenizer);
  int calls = 0;
  model::PerplexityOptions o;
  o.on_window = [&calls](const model::PerplexityWindow&) { ++calls; };
  o.window = 1;
  auto r = model::evaluate_perplexity(*l.model, *l.tokenizer, l.text, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("window = 1"), std::string::npos) << r.status().to_string();
  o.window = kWindow + 1;  // beyond the model's max_context
  r = model::evaluate_perplexity(*l.model, *l.tokenizer, l.text, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("window = 17"), std::string::npos) << r.status().to_string();
  o.window = kWindow;
  o.max_windows = -1;
  r = model::evaluate_perplexity(*l.model, *l.tokenizer, l.text, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("max_windows = -1"), std::string::npos)
      << r.status().to_string();
  EXPECT_EQ(calls, 0) << "no window may be scored with bad options";
}

}  // namespace
}  // namespace dsa::e2e
