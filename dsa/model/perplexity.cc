#include "dsa/model/perplexity.h"

#include <fmt/format.h>

#include <cmath>

namespace dsa::model {

namespace {

std::vector<int32_t> token_stream(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> stream;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find("\n\n", begin);
    if (end == std::string::npos) end = text.size();
    std::string doc = text.substr(begin, end - begin);
    if (doc.find_first_not_of(" \t\r\n\f\v") != std::string::npos) {
      std::vector<int32_t> ids = tok.encode(doc, /*add_bos=*/true);
      stream.insert(stream.end(), ids.begin(), ids.end());
    }
    begin = end + 2;
  }
  return stream;
}

// log-softmax of `row` at `target` in double, and whether target is the argmax.
std::pair<double, bool> score_row(const float* row, int32_t V, int32_t target) {
  double mx = -INFINITY;
  int32_t arg = 0;
  for (int32_t v = 0; v < V; ++v) {
    if (row[v] > mx) {
      mx = row[v];
      arg = v;
    }
  }
  double sum = 0;
  for (int32_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
  return {double(row[target]) - mx - std::log(sum), arg == target};
}

}  // namespace

StatusOr<PerplexityResult> evaluate_perplexity(DsaModel& model, const Tokenizer& tok,
                                               const std::string& text,
                                               const PerplexityOptions& o) {
  if (o.window < 2 || o.window > model.options().max_context ||
      o.window > model.metadata_config().max_extend_rows) {
    return invalid_argument(fmt::format(
        "perplexity: window = {}: must be in [2, min(max_context, T_ext) = {}]", o.window,
        std::min(model.options().max_context, model.metadata_config().max_extend_rows)));
  }
  const std::vector<int32_t> stream = token_stream(tok, text);
  if (stream.size() < 3) return invalid_argument("perplexity: the text has fewer than 3 tokens");
  PerplexityResult res;
  res.stream_tokens = int64_t(stream.size());
  const int32_t V = int32_t(model.config().vocab_size);
  int64_t hits = 0, mtp_hits = 0;
  for (size_t s0 = 0; s0 + 1 < stream.size(); s0 += size_t(o.window)) {
    if (o.max_windows > 0 && res.windows >= o.max_windows) break;
    const size_t end = std::min(stream.size(), s0 + size_t(o.window) + 1);
    if (end - s0 < 3) continue;
    std::vector<int32_t> inp(stream.begin() + long(s0), stream.begin() + long(end) - 1);
    const int32_t T = int32_t(inp.size());
    DSA_ASSIGN_OR_RETURN(int32_t slot, model.pages().open_request());
    DSA_RETURN_IF_ERROR(model.pages().reserve(slot, T));
    runtime::ForwardBatch b;
    b.mode = runtime::ForwardMode::kExtend;
    b.requests.push_back({slot, 0, T, 0, T});
    ForwardOutput out;
    DSA_RETURN_IF_ERROR(model.forward(b, inp, {}, &out));
    for (int32_t i = 0; i < T; ++i) {
      auto [lp, hit] = score_row(&out.logits[size_t(i) * V], V, stream[s0 + size_t(i) + 1]);
      res.nll -= lp;
      hits += hit;
    }
    res.predicted += T;
    if (o.with_mtp && model.config().has_mtp() && T >= 2) {
      // MTP row i: (token i + 1, h_i) -> token i + 2, for i < T - 1.
      std::vector<int32_t> next(inp.begin() + 1, inp.end());
      next.push_back(stream[s0 + size_t(T)]);
      runtime::ForwardBatch mb;
      mb.mode = runtime::ForwardMode::kExtend;
      mb.model = runtime::ModelKind::kMtp;
      mb.requests.push_back({slot, 0, T, 0, T - 1});
      ForwardOutput mo;
      DSA_RETURN_IF_ERROR(model.forward(mb, next, out.hidden, &mo));
      for (int32_t i = 0; i + 1 < T; ++i) {
        mtp_hits += score_row(&mo.logits[size_t(i) * V], V, stream[s0 + size_t(i) + 2]).second;
      }
      res.mtp_rows += T - 1;
    }
    DSA_RETURN_IF_ERROR(model.pages().close_request(slot));
    ++res.windows;
  }
  res.perplexity = std::exp(res.nll / double(res.predicted));
  res.top1 = double(hits) / double(res.predicted);
  res.mtp_top1 = res.mtp_rows ? double(mtp_hits) / double(res.mtp_rows) : 0;
  return res;
}

}  // namespace dsa::model
