// Held-out perplexity of a text (`dsa perplexity`): the text's documents (separated by blank
// lines) each start with BOS and are concatenated into one token stream, cut into windows of
// `window` inputs; each window is a fresh request prefilled with one EXTEND forward whose every row
// is sampled. The MTP layer's teacher-forced top-1 (row i consumes token i + 1 and h_i, predicts
// token i + 2) is measured on the same windows.
#pragma once

#include <cstdint>
#include <string>

#include "dsa/core/status.h"
#include "dsa/model/dsa_model.h"
#include "dsa/model/tokenizer.h"

namespace dsa::model {

struct PerplexityOptions {
  int32_t window = 1024;
  int32_t max_windows = 0;  // 0 = all
  bool with_mtp = true;
};

struct PerplexityResult {
  int64_t stream_tokens = 0;  // tokens of the whole stream (BOS included)
  int64_t predicted = 0;      // tokens scored
  int32_t windows = 0;
  double nll = 0;  // summed negative log-likelihood (nats)
  double perplexity = 0;
  double top1 = 0;      // main head's argmax accuracy
  double mtp_top1 = 0;  // MTP layer's teacher-forced argmax accuracy
  int64_t mtp_rows = 0;
};

StatusOr<PerplexityResult> evaluate_perplexity(DsaModel& model, const Tokenizer& tokenizer,
                                               const std::string& text,
                                               const PerplexityOptions& options);

}  // namespace dsa::model
