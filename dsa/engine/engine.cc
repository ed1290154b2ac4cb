#include "dsa/engine/engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsa/runtime/metadata_builder.h"

namespace dsa::engine {

namespace {

using runtime::ForwardMode;
using runtime::ModelKind;

size_t sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kMaxNewTokens:
      return "max_new_tokens";
    case FinishReason::kMaxContext:
      return "max_context";
  }
  return "?";
}

Engine::Engine(model::DsaModel& model, EngineOptions options)
    : model_(model),
      options_(std::move(options)),
      d_(model.options().num_draft_tokens),
      vocab_(int32_t(model.config().vocab_size)),
      eos_(int32_t(model.config().eos_token_id)) {
  metrics_.accept_histogram.assign(sz(d_ + 1), 0);
}

StatusOr<int64_t> Engine::add_request(GenerationRequest req) {
  if (req.prompt.empty()) return invalid_argument("request: the prompt is empty");
  if (req.max_new_tokens <= 0) {
    return invalid_argument(
        fmt::format("request: max_new_tokens = {}: must be >= 1", req.max_new_tokens));
  }
  for (size_t i = 0; i < req.prompt.size(); ++i) {
    if (req.prompt[i] < 0 || req.prompt[i] >= vocab_) {
      return invalid_argument(
          fmt::format("request: prompt[{}] = {}: not a token id of a {}-token vocabulary", i,
                      req.prompt[i], vocab_));
    }
  }
  DSA_RETURN_IF_ERROR(validate(req.sampling));
  const int64_t ctx = model_.options().max_context;
  if (int64_t(req.prompt.size()) >= ctx) {
    return invalid_argument(
        fmt::format("request: the prompt has {} tokens: longer than the context ({} tokens, "
                    "leaving room for at least one new token)",
                    req.prompt.size(), ctx));
  }
  auto r = std::make_unique<RequestState>();
  r->id = next_id_++;
  r->req = std::move(req);
  r->arrived = std::chrono::steady_clock::now();
  waiting_.push_back(r.get());
  const int64_t id = r->id;
  requests_[id] = std::move(r);
  return id;
}

bool Engine::has_work() const { return !waiting_.empty() || !running_.empty(); }

// Admission: a request runs when a request slot and pages for its whole life (prompt, every new
// token it may emit, and the speculative lookahead of 2n positions, §6.4) are free; otherwise it
// waits (FIFO). A request that could never fit is refused.
Status Engine::admit() {
  const int32_t n = d_ + 1;
  const int32_t ctx = model_.options().max_context;
  while (!waiting_.empty() && int32_t(running_.size()) < model_.metadata_config().max_requests) {
    RequestState& r = *waiting_.front();
    const int32_t total = std::min(r.prompt_len() + r.req.max_new_tokens, ctx) + 2 * n;
    const int32_t pages = (total + kernels::kPageSize - 1) / kernels::kPageSize;
    if (pages > model_.pages().num_pages() - 1) {
      return resource_exhausted(fmt::format("request {} needs {} pages; the pool has {}", r.id,
                                            pages, model_.pages().num_pages() - 1));
    }
    if (pages > model_.pages().num_free_pages()) break;  // wait for running requests to finish
    DSA_ASSIGN_OR_RETURN(r.req_slot, model_.pages().open_request());
    DSA_RETURN_IF_ERROR(model_.pages().reserve(r.req_slot, total));
    r.phase = RequestPhase::kPrefill;
    running_.push_back(&r);
    waiting_.pop_front();
  }
  return ok_status();
}

// Builds one forward's metadata with the runtime's builder (uniform forwards padded to the model's
// bucket, SPEC.md §5) and runs the target or the MTP layer.
Status Engine::run_forward(ForwardMode mode, ModelKind kind,
                           const std::vector<runtime::RequestInput>& reqs,
                           std::span<const int32_t> tokens, std::span<const bf16> hidden,
                           runtime::ForwardMetadata& meta, model::ForwardOutput* out) {
  runtime::ForwardBatch b;
  b.mode = mode;
  b.model = kind;
  b.requests = reqs;
  if (runtime::is_uniform(mode)) b.batch_pad = model_.batch_pad_for(int32_t(reqs.size()));
  DSA_RETURN_IF_ERROR(runtime::build_forward_metadata(b, model_.metadata_config(),
                                                      model_.pages().page_table(), meta));
  // Padded rows take token 0 (any id in range); the MTP hidden rows of padded requests are zeros.
  std::span<const int32_t> tok = tokens;
  std::span<const bf16> hid = hidden;
  const size_t rows = size_t(meta.header.rows_pad);
  const size_t D = size_t(model_.config().hidden_size);
  if (tokens.size() < rows) {
    padded_tokens_.assign(tokens.begin(), tokens.end());
    padded_tokens_.resize(rows, 0);
    tok = padded_tokens_;
  }
  if (kind == ModelKind::kMtp && hidden.size() < rows * D) {
    padded_hidden_.assign(hidden.begin(), hidden.end());
    padded_hidden_.resize(rows * D, bf16{});
    hid = padded_hidden_;
  }
  if (kind == ModelKind::kTarget) return model_.forward_target(meta, tok, out);
  return model_.forward_mtp(meta, tok, hid, out);
}

int32_t Engine::greedy_draft(const float* logits) const {
  return std::max(0, kernels::argmax_token(std::span<const float>(logits, sz(vocab_))));
}

int32_t Engine::sample(const RequestState& r, const float* logits, int32_t position) const {
  return kernels::sample_token(std::span<const float>(logits, sz(vocab_)), r.req.sampling,
                               position);
}

void Engine::emit(RequestState& r, std::span<const int32_t> tokens) {
  if (r.output.empty() && !tokens.empty()) r.first_token = std::chrono::steady_clock::now();
  const int32_t ctx = model_.options().max_context;
  size_t count = 0;
  for (int32_t t : tokens) {
    r.output.push_back(t);
    ++count;
    if (t == eos_) {
      r.finish = FinishReason::kEos;
    } else if (int32_t(r.output.size()) >= r.req.max_new_tokens) {
      r.finish = FinishReason::kMaxNewTokens;
    } else if (r.prompt_len() + int32_t(r.output.size()) >= ctx) {
      r.finish = FinishReason::kMaxContext;
    }
    if (r.finish != FinishReason::kNone) break;  // tokens after a stop are dropped
  }
  metrics_.emitted += int64_t(count);
  if (options_.on_tokens) options_.on_tokens(r, std::span<const int32_t>(tokens.data(), count));
}

Status Engine::finish(RequestState& r) {
  r.phase = RequestPhase::kFinished;
  r.done = std::chrono::steady_clock::now();
  return model_.pages().close_request(r.req_slot);
}

Status Engine::step() {
  DSA_RETURN_IF_ERROR(admit());
  DSA_RETURN_IF_ERROR(prefill_phase());
  DSA_RETURN_IF_ERROR(decode_phase());
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->finish != FinishReason::kNone) {
      DSA_RETURN_IF_ERROR(finish(**it));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  ++metrics_.steps;
  return ok_status();
}

Status Engine::run_to_completion() {
  while (has_work()) DSA_RETURN_IF_ERROR(step());
  return ok_status();
}

// Chunked prefill (§6.1): one target EXTEND over every prefilling request's next chunk, then the
// MTP EXTEND over the same rows (row i pairs token i + 1 with h_i; a prompt's last row takes the
// token the target just sampled), then the draft chain for prompts that completed.
Status Engine::prefill_phase() {
  std::vector<RequestState*> reqs;
  std::vector<runtime::RequestInput> inputs;
  std::vector<int32_t> tokens;
  int32_t budget = model_.metadata_config().max_extend_rows;
  for (RequestState* r : running_) {
    if (r->phase != RequestPhase::kPrefill || budget == 0) continue;
    const int32_t len = std::min({options_.prefill_chunk, r->prompt_len() - r->prefilled, budget});
    const bool last = r->prefilled + len == r->prompt_len();
    inputs.push_back({r->req_slot, r->prefilled, len, len - 1, last ? 1 : 0});
    for (int32_t i = 0; i < len; ++i) tokens.push_back(r->req.prompt[sz(r->prefilled + i)]);
    reqs.push_back(r);
    budget -= len;
  }
  if (reqs.empty()) return ok_status();
  runtime::ForwardMetadata meta(model_.metadata_config());
  model::ForwardOutput target;
  DSA_RETURN_IF_ERROR(
      run_forward(ForwardMode::kExtend, ModelKind::kTarget, inputs, tokens, {}, meta, &target));

  // Sample x_{L_p} for prompts that completed; build the MTP rows' next tokens.
  std::vector<int32_t> next(tokens.size());
  std::vector<RequestState*> completed;
  std::vector<int32_t> completed_rows;
  int32_t sample_i = 0;
  for (size_t b = 0; b < reqs.size(); ++b) {
    RequestState& r = *reqs[b];
    const int32_t first = meta.cu_q[b], len = inputs[b].new_len;
    for (int32_t i = 0; i < len; ++i) {
      const int32_t pos = r.prefilled + i;
      next[sz(first + i)] = pos + 1 < r.prompt_len() ? r.req.prompt[sz(pos + 1)] : -1;
    }
    r.prefilled += len;
    if (r.prefilled == r.prompt_len()) {
      const int32_t x = sample(r, &target.logits[sz(sample_i) * sz(vocab_)], r.prompt_len());
      ++sample_i;
      next[sz(first + len - 1)] = x;
      r.committed = r.prompt_len();
      r.pending = x;
      r.phase = RequestPhase::kDecode;
      completed.push_back(&r);
      completed_rows.push_back(first + len - 1);
      emit(r, std::span<const int32_t>(&x, 1));
    }
  }
  if (d_ == 0) return ok_status();

  // MTP EXTEND over the same rows; completed prompts sample their last row (first draft).
  std::vector<runtime::RequestInput> mtp_inputs = inputs;
  for (size_t b = 0; b < reqs.size(); ++b) {
    const bool done = reqs[b]->phase == RequestPhase::kDecode;
    mtp_inputs[b].sample_first = inputs[b].new_len - 1;
    mtp_inputs[b].sample_count = done ? 1 : 0;
  }
  runtime::ForwardMetadata mmeta(model_.metadata_config());
  model::ForwardOutput mtp;
  DSA_RETURN_IF_ERROR(run_forward(ForwardMode::kExtend, ModelKind::kMtp, mtp_inputs, next,
                                  target.hidden, mmeta, &mtp));
  if (completed.empty()) return ok_status();
  std::vector<int32_t> g1;
  std::vector<bf16> hidden;
  std::vector<int32_t> positions;
  const int32_t D = int32_t(model_.config().hidden_size);
  for (size_t i = 0; i < completed.size(); ++i) {
    g1.push_back(greedy_draft(&mtp.logits[i * sz(vocab_)]));
    hidden.insert(hidden.end(), mtp.hidden.begin() + long(completed_rows[i]) * D,
                  mtp.hidden.begin() + long(completed_rows[i] + 1) * D);
    positions.push_back(completed[i]->committed);  // C' = L_p
  }
  return draft_chain(completed, std::move(g1), std::move(hidden), std::move(positions));
}

// The d - 1 MTP DECODE steps (§6.1 step 4): step s at position C' - 1 + s consumes (g_s, m_s).
Status Engine::draft_chain(std::vector<RequestState*>& reqs, std::vector<int32_t> drafts,
                           std::vector<bf16> hidden, std::vector<int32_t> committed) {
  const size_t B = reqs.size();
  std::vector<std::vector<int32_t>> chains(B);
  for (size_t b = 0; b < B; ++b) chains[b].push_back(drafts[b]);
  runtime::ForwardMetadata meta(model_.metadata_config());
  for (int32_t s = 1; s < d_; ++s) {
    std::vector<runtime::RequestInput> inputs;
    std::vector<int32_t> tokens;
    for (size_t b = 0; b < B; ++b) {
      inputs.push_back({reqs[b]->req_slot, committed[b] - 1 + s, 1, 0, 1});
      tokens.push_back(chains[b].back());
    }
    model::ForwardOutput out;
    DSA_RETURN_IF_ERROR(
        run_forward(ForwardMode::kDecode, ModelKind::kMtp, inputs, tokens, hidden, meta, &out));
    for (size_t b = 0; b < B; ++b) chains[b].push_back(greedy_draft(&out.logits[b * sz(vocab_)]));
    hidden = std::move(out.hidden);
  }
  for (size_t b = 0; b < B; ++b) {
    reqs[b]->drafts = std::move(chains[b]);
    if (options_.draft_override) options_.draft_override(*reqs[b], reqs[b]->drafts);
  }
  return ok_status();
}

}  // namespace dsa::engine
