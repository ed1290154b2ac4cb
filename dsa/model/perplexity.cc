#include "dsa/model/perplexity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

// The row's argmax, the lowest id among ties (a NaN is never it); -1 for a row of NaNs or -inf.
int32_t argmax_row(const float* row, int32_t V) {
  float mx = -INFINITY;
  int32_t arg = -1;
  for (int32_t v = 0; v < V; ++v) {
    if (row[v] > mx) {
      mx = row[v];
      arg = v;
    }
  }
  return arg;
}

// log-softmax of `row` at `target` in double, and the row's argmax.
std::pair<double, int32_t> score_row(const float* row, int32_t V, int32_t target) {
  const int32_t arg = argmax_row(row, V);
  const double mx = arg < 0 ? -INFINITY : row[arg];
  double sum = 0;
  for (int32_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
  return {double(row[target]) - mx - std::log(sum), arg};
}

// The windows the run scores: [first, end) of the stream, each window's inputs being
// stream[first, end - 1) and its targets stream[first + 1, end). A tail of fewer than 2 inputs is
// dropped; max_windows (> 0) caps the count.
struct Span {
  size_t first, end;
};
std::vector<Span> window_spans(size_t stream_size, int32_t window, int32_t max_windows) {
  std::vector<Span> spans;
  for (size_t s0 = 0; s0 + 1 < stream_size; s0 += size_t(window)) {
    if (max_windows > 0 && int32_t(spans.size()) >= max_windows) break;
    const size_t end = std::min(stream_size, s0 + size_t(window) + 1);
    if (end - s0 >= 3) spans.push_back({s0, end});
  }
  return spans;
}

// One window as a fresh request: an EXTEND forward scoring every row, then (with MTP) the MTP
// layer teacher-forced on the same rows.
StatusOr<PerplexityWindow> score_window(DsaModel& model, const std::vector<int32_t>& stream,
                                        Span span, bool with_mtp) {
  const int32_t V = int32_t(model.config().vocab_size);
  const size_t s0 = span.first;
  std::vector<int32_t> inp(stream.begin() + long(s0), stream.begin() + long(span.end) - 1);
  const int32_t T = int32_t(inp.size());
  DSA_ASSIGN_OR_RETURN(int32_t slot, model.pages().open_request());
  DSA_RETURN_IF_ERROR(model.pages().reserve(slot, T));
  runtime::ForwardBatch b;
  b.mode = runtime::ForwardMode::kExtend;
  b.requests.push_back({slot, 0, T, 0, T});
  ForwardOutput out;
  DSA_RETURN_IF_ERROR(model.forward(b, inp, {}, &out));
  PerplexityWindow w;
  std::vector<int32_t> target_argmax(size_t(T), 0);
  for (int32_t i = 0; i < T; ++i) {
    const int32_t next = stream[s0 + size_t(i) + 1];
    auto [lp, arg] = score_row(&out.logits[size_t(i) * V], V, next);
    w.nll -= lp;
    w.top1_hits += arg == next;
    target_argmax[size_t(i)] = arg;
  }
  w.scored = T;
  if (with_mtp && model.config().has_mtp() && T >= 2) {
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
      const int32_t arg = argmax_row(&mo.logits[size_t(i) * V], V);
      w.mtp_hits += arg == stream[s0 + size_t(i) + 2];
      w.mtp_agree_hits += arg == target_argmax[size_t(i) + 1];
    }
    w.mtp_rows = T - 1;
  }
  DSA_RETURN_IF_ERROR(model.pages().close_request(slot));
  w.perplexity = std::exp(w.nll / double(w.scored));
  w.top1 = double(w.top1_hits) / double(w.scored);
  w.mtp_top1 = w.mtp_rows ? double(w.mtp_hits) / double(w.mtp_rows) : 0;
  w.mtp_agree = w.mtp_rows ? double(w.mtp_agree_hits) / double(w.mtp_rows) : 0;
  return w;
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
  if (o.max_windows < 0) {
    return invalid_argument(
        fmt::format("perplexity: max_windows = {}: must be >= 0 (0 = all)", o.max_windows));
  }
  const std::vector<int32_t> stream = token_stream(tok, text);
  if (stream.size() < 3) return invalid_argument("perplexity: the text has fewer than 3 tokens");
  const std::vector<Span> spans = window_spans(stream.size(), o.window, o.max_windows);
  PerplexityResult res;
  res.stream_tokens = int64_t(stream.size());
  for (const Span& span : spans) {
    DSA_ASSIGN_OR_RETURN(PerplexityWindow w, score_window(model, stream, span, o.with_mtp));
    w.index = res.windows;
    w.total = int32_t(spans.size());
    res.nll += w.nll;
    res.predicted += w.scored;
    res.top1_hits += w.top1_hits;
    res.mtp_hits += w.mtp_hits;
    res.mtp_agree_hits += w.mtp_agree_hits;
    res.mtp_rows += w.mtp_rows;
    ++res.windows;
    if (o.on_window) o.on_window(w);
  }
  res.perplexity = std::exp(res.nll / double(res.predicted));
  res.top1 = double(res.top1_hits) / double(res.predicted);
  res.mtp_top1 = res.mtp_rows ? double(res.mtp_hits) / double(res.mtp_rows) : 0;
  res.mtp_agree = res.mtp_rows ? double(res.mtp_agree_hits) / double(res.mtp_rows) : 0;
  return res;
}

}  // namespace dsa::model
