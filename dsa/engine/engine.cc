#include "dsa/engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace dsa::engine {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

SchedulerLimits limits_of(const model::DsaModel& m) {
  SchedulerLimits l;
  l.max_running = m.metadata_config().max_requests;
  l.max_context = m.options().max_context;
  l.rows_per_request = m.options().num_draft_tokens + 1;
  l.num_draft_tokens = m.options().num_draft_tokens;
  return l;
}

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
      eos_(int32_t(model.config().eos_token_id)),
      scheduler_(model.pages(), limits_of(model)),
      metrics_(d_) {}

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
  return scheduler_.add(std::move(req)).id;
}

Status Engine::run_forward(runtime::ForwardMode mode, runtime::ModelKind kind,
                           std::vector<runtime::RequestInput> reqs, std::span<const int32_t> tokens,
                           std::span<const bf16> hidden, model::ForwardOutput* out) {
  runtime::ForwardBatch b;
  b.mode = mode;
  b.model = kind;
  b.requests = std::move(reqs);
  return model_.forward(b, tokens, hidden, out);
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

Status Engine::step() {
  DSA_RETURN_IF_ERROR(scheduler_.admit());
  // The running set is copied: the phases do not change it, and retiring below does.
  const std::vector<RequestState*> running = scheduler_.running();
  DSA_RETURN_IF_ERROR(prefill_phase(running));
  DSA_RETURN_IF_ERROR(decode_phase(running));
  DSA_ASSIGN_OR_RETURN(std::vector<RequestState*> finished, scheduler_.retire_finished());
  for (const RequestState* r : finished) {
    const RequestFigures f = request_figures(*r);
    metrics_.ttft_s.push_back(f.ttft_s);
    metrics_.tpot_s.push_back(f.tpot_s);
  }
  ++metrics_.steps;
  return ok_status();
}

Status Engine::run_to_completion() {
  while (has_work()) DSA_RETURN_IF_ERROR(step());
  return ok_status();
}

}  // namespace dsa::engine
