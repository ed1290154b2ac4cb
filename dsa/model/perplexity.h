// Held-out perplexity of a text (`dsa perplexity`): the text's documents (separated by blank
// lines) each start with BOS and are concatenated into one token stream, cut into windows of
// `window` inputs; each window is a fresh request prefilled with one EXTEND forward whose every row
// is sampled. The MTP layer's teacher-forced top-1 (row i consumes token i + 1 and h_i, predicts
// token i + 2) is measured on the same windows, and so is its agreement with the target: how often
// MTP row i's argmax is the target's argmax at row i + 1, the first draft's greedy acceptance rate
// with the text as the accepted prefix (what a draft is judged by, where top-1 judges the text).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "dsa/core/status.h"
#include "dsa/model/dsa_model.h"
#include "dsa/model/tokenizer.h"

namespace dsa::model {

// One window's figures, as soon as it is scored. The run's result is their sum (nll, counts), so a
// caller reporting per window (`dsa perplexity --json`) needs no arithmetic of its own.
struct PerplexityWindow {
  int32_t index = 0;      // 0-based, in stream order
  int32_t total = 0;      // windows this run scores (max_windows applied), for progress reports
  int64_t scored = 0;     // tokens scored in the window
  double nll = 0;         // summed over the window (nats)
  double perplexity = 0;  // exp(nll / scored)
  int64_t top1_hits = 0;
  double top1 = 0;       // top1_hits / scored
  int64_t mtp_rows = 0;  // 0 without an MTP layer or with_mtp off
  int64_t mtp_hits = 0;
  double mtp_top1 = 0;  // mtp_hits / mtp_rows, 0 without MTP rows
  int64_t mtp_agree_hits = 0;
  double mtp_agree = 0;  // mtp_agree_hits / mtp_rows, 0 without MTP rows
};

struct PerplexityOptions {
  int32_t window = 1024;    // inputs per window, >= 2
  int32_t max_windows = 0;  // 0 = all; >= 0
  bool with_mtp = true;
  // Called after each window, in order, before the next one starts; may be empty.
  std::function<void(const PerplexityWindow&)> on_window;
};

struct PerplexityResult {
  int64_t stream_tokens = 0;  // tokens of the whole stream (BOS included)
  int64_t predicted = 0;      // tokens scored
  int32_t windows = 0;
  double nll = 0;  // summed negative log-likelihood (nats): the windows' nll summed in order
  double perplexity = 0;
  int64_t top1_hits = 0;
  double top1 = 0;  // main head's argmax accuracy
  int64_t mtp_hits = 0;
  double mtp_top1 = 0;  // MTP layer's teacher-forced argmax accuracy
  int64_t mtp_agree_hits = 0;
  double mtp_agree = 0;  // how often its argmax is the target's at the next row
  int64_t mtp_rows = 0;
};

StatusOr<PerplexityResult> evaluate_perplexity(DsaModel& model, const Tokenizer& tokenizer,
                                               const std::string& text,
                                               const PerplexityOptions& options);

}  // namespace dsa::model
