#include "dsa/engine/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

#include "dsa/engine/dp_placement.h"
#include "dsa/engine/simulated_acceptance.h"
#include "dsa/model/tokenizer_check.h"

namespace dsa::engine {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

SchedulerLimits limits_of(const model::DsaModel& m) {
  SchedulerLimits l;
  l.max_running = m.metadata_config().max_requests;
  l.max_context = m.options().max_context;
  l.rows_per_request = m.options().num_draft_tokens + 1;
  return l;
}

// Phased steps (docs/multi_gpu.md): the prefill part and the decode part are agreed separately,
// so an EXTEND never carries decode rows.
DpStepConfig dp_config_of(const model::DsaModel& m) {
  DpStepConfig c;
  c.num_draft_tokens = m.options().num_draft_tokens;
  c.buckets = m.options().buckets;  // ascending (the model checks); repeats change no bucket
  c.buckets.erase(std::unique(c.buckets.begin(), c.buckets.end()), c.buckets.end());
  c.max_requests = m.metadata_config().max_requests;
  c.max_extend_rows = m.metadata_config().max_extend_rows;
  c.extend_carries_decodes = false;
  return c;
}

}  // namespace

Engine::Engine(model::DsaModel& model, EngineOptions options, dist::Collective* group)
    : model_(model),
      options_(std::move(options)),
      d_(model.options().num_draft_tokens),
      vocab_(int32_t(model.config().vocab_size)),
      sampleable_(int32_t(model::sampleable_vocab(options_.tokenizer, model.config()))),
      eos_(model.config().eos_token_ids.begin(), model.config().eos_token_ids.end()),
      options_status_(validate(options_)),
      scheduler_(model.pages(), limits_of(model)),
      metrics_(d_),
      group_(group != nullptr ? group : &solo_),
      dp_config_(dp_config_of(model)) {
  if (options_status_.ok() && options_.simulate_accept_length != 0) {
    options_status_ = validate_simulated_accept_length(options_.simulate_accept_length, d_);
  }
  // The step configuration is checked once here (an empty proposal is valid for any good one).
  if (options_status_.ok()) options_status_ = validate(StepProposal{}, dp_config_);
  // An expert-parallel model's every forward waits for its ep_size - 1 peers: alone, or in a DP
  // group of another size, its first MoE would wait for ranks that never come.
  const int32_t ep = model.options().ep_size;
  if (options_status_.ok() && ep > 1 && group_->world_size() != ep) {
    options_status_ = invalid_argument(fmt::format(
        "engine: the model has ep_size = {} but the engine's DP group has {} rank(s): expert "
        "parallelism runs over exactly the DP ranks",
        ep, group_->world_size()));
  }
}

Status validate(const EngineOptions& o) {
  if (o.prefill_chunk < 1) {
    return invalid_argument(fmt::format("prefill_chunk = {}: must be >= 1", o.prefill_chunk));
  }
  return ok_status();
}

StatusOr<int64_t> Engine::add_request(GenerationRequest req) {
  DSA_RETURN_IF_ERROR(options_status_);
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
  for (size_t i = 0; i < req.stop_token_ids.size(); ++i) {
    if (req.stop_token_ids[i] < 0 || req.stop_token_ids[i] >= vocab_) {
      return invalid_argument(
          fmt::format("request: stop_token_ids[{}] = {}: not a token id of a {}-token vocabulary",
                      i, req.stop_token_ids[i], vocab_));
    }
  }
  for (size_t i = 0; i < req.stop.size(); ++i) {
    if (req.stop[i].empty()) return invalid_argument(fmt::format("request: stop[{}] is empty", i));
  }
  if (!req.stop.empty() && options_.tokenizer == nullptr) {
    return invalid_argument("request: stop strings need the engine's tokenizer");
  }
  const int64_t ctx = model_.options().max_context;
  if (int64_t(req.prompt.size()) >= ctx) {
    return invalid_argument(
        fmt::format("request: the prompt has {} tokens: longer than the context ({} tokens, "
                    "leaving room for at least one new token)",
                    req.prompt.size(), ctx));
  }
  RequestState& r = scheduler_.add(std::move(req));
  r.text = model::TextStream(options_.tokenizer);
  return r.id;
}

Status Engine::run_forward(const ForwardShape& shape, std::vector<runtime::RequestInput> reqs,
                           const model::ForwardInputs& in, model::ForwardOutput* out,
                           model::ForwardOutputs what) {
  const int32_t real = int32_t(reqs.size());
  DSA_ASSIGN_OR_RETURN(runtime::ForwardBatch b, make_batch(shape, std::move(reqs), forwards_++));
  if (options_.check_forwards) DSA_RETURN_IF_ERROR(cross_check_forward(*group_, shape));
  DSA_RETURN_IF_ERROR(model_.forward(std::move(b), in, out, what));
  mask_padding_logits(out->logits);  // kBackend: none here; the op reads only [0, sampleable_)
  metrics_.host_logit_rows += int64_t(out->logits.size() / sz(vocab_));
  // The model must run the agreed shape, not one it derived from this rank's rows: a mismatch
  // here would pair this rank's MoE collectives with another forward's on the other ranks.
  const ForwardShape ran = shape_of(out->header, shape.role, shape.chain_step);
  if (!(ran == shape)) {
    return internal_error(fmt::format(
        "engine: forward {} ran {} at B_pad {} / rows_pad {}; the plan named {} at {} / {}",
        forwards_ - 1, runtime::mode_name(ran.mode), ran.batch_pad, ran.rows_pad,
        runtime::mode_name(shape.mode), shape.batch_pad, shape.rows_pad));
  }
  if (options_.record_forwards) trace_.push_back({metrics_.steps, ran, real});
  return ok_status();
}

void Engine::draft_extend_inputs(const model::ForwardOutput& target, const ForwardShape& shape,
                                 std::span<const int32_t> tokens,
                                 std::span<const int32_t> token_rows, bool any_kept,
                                 DraftExtendInputs* out) const {
  out->rows.resize(sz(std::min(target.header.rows_pad, shape.rows_pad)));
  for (size_t r = 0; r < out->rows.size(); ++r) out->rows[r] = int32_t(r);
  out->in = mtp_inputs(target, out->rows, &out->host_rows);
  out->in.tokens = tokens;
  if (any_kept) {
    out->in.token_rows = token_rows;
    out->in.token_source = model::TokenSource::kDraftSlots;
  }
}

model::ForwardInputs Engine::mtp_inputs(const model::ForwardOutput& prev,
                                        const std::vector<int32_t>& rows,
                                        std::vector<bf16>* host_rows) const {
  model::ForwardInputs in;
  if (!options_.host_handoff) {
    in.hidden_from_last = true;
    in.hidden_rows = rows;
    return in;
  }
  const size_t D = sz(model_.config().hidden_size);
  host_rows->assign(rows.size() * D, bf16{});
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] < 0) continue;
    std::copy(prev.hidden.begin() + long(sz(rows[r]) * D),
              prev.hidden.begin() + long(sz(rows[r] + 1) * D), host_rows->begin() + long(r * D));
  }
  in.hidden = *host_rows;
  return in;
}

StatusOr<std::vector<ForwardShape>> Engine::agree(const StepProposal& proposal) {
  DSA_ASSIGN_OR_RETURN(const StepPlan plan, agree_step(*group_, proposal, dp_config_));
  return step_forwards(plan, dp_config_);
}

int64_t Engine::load() const {
  int64_t load = 0;
  for (const RequestState* r : scheduler_.waiting()) {
    load += placement_cost(r->prompt_len(), r->req.max_new_tokens);
  }
  for (const RequestState* r : scheduler_.running()) {
    load += (r->prompt_len() - r->prefilled) +
            std::max<int64_t>(0, r->req.max_new_tokens - int64_t(r->output.size()));
  }
  return load;
}

// A padded vocabulary (model/tokenizer_check.h): the LM head's rows past the tokenizer's ids are
// padding, so their logits are -inf before anything samples, drafts or accepts: no such id is
// ever emitted, whatever the weights say.
void Engine::mask_padding_logits(std::vector<float>& logits) const {
  if (sampleable_ >= vocab_) return;
  const size_t V = sz(vocab_), rows = logits.size() / V;
  for (size_t r = 0; r < rows; ++r) {
    std::fill(logits.begin() + long(r * V + sz(sampleable_)), logits.begin() + long((r + 1) * V),
              -std::numeric_limits<float>::infinity());
  }
}

bool Engine::target_on_backend(const std::vector<RequestState*>& reqs) const {
  switch (options_.accept_on) {
    case AcceptOn::kHost:
      return false;
    case AcceptOn::kBackend:
      return true;
    case AcceptOn::kAuto:
      break;
  }
  if (model_.backend() == kernels::Backend::kCpu) return false;
  return std::none_of(reqs.begin(), reqs.end(), [](const RequestState* r) {
    return r->req.sampling.temperature > 0.f &&
           (r->req.sampling.top_k > 0 || r->req.sampling.top_p < 1.f);
  });
}

bool Engine::drafts_on_backend() const {
  return options_.accept_on == AcceptOn::kBackend ||
         (options_.accept_on == AcceptOn::kAuto && model_.backend() != kernels::Backend::kCpu);
}

StatusOr<std::vector<int32_t>> Engine::sampled_tokens(const model::ForwardOutput& out,
                                                      bool on_backend,
                                                      std::span<const SamplingParams> params,
                                                      std::span<const int32_t> positions) {
  if (params.empty()) return std::vector<int32_t>{};
  if (on_backend) {
    model::VerifyAcceptance v;
    DSA_RETURN_IF_ERROR(model_.accept_last_verify(sampleable_, 0, {}, params, positions, &v));
    return std::move(v.emitted);
  }
  std::vector<int32_t> tokens(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    tokens[i] = kernels::sample_token(
        std::span<const float>(&out.logits[i * sz(vocab_)], sz(vocab_)), params[i], positions[i]);
  }
  return tokens;
}

std::vector<int32_t> Engine::drafts_of(const model::ForwardOutput& out, size_t count) const {
  std::vector<int32_t> drafts;
  for (size_t i = 0; i < count; ++i) drafts.push_back(greedy_draft(&out.logits[i * sz(vocab_)]));
  return drafts;
}

int32_t Engine::greedy_draft(const float* logits) const {
  return std::max(0, kernels::argmax_token(std::span<const float>(logits, sz(vocab_))));
}

// Appends tokens until one finishes the request (EOS, a stop id or string, the token or context
// limit); tokens after it are dropped. With a tokenizer the text is decoded token by token, so a
// stop string is found at the token that completes it, across token boundaries.
void Engine::emit(RequestState& r, std::span<const int32_t> tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  if (r.output.empty() && !tokens.empty()) r.first_token = std::chrono::steady_clock::now();
  const int32_t ctx = model_.options().max_context;
  size_t count = 0;
  for (int32_t t : tokens) {
    r.output.push_back(t);
    ++count;
    if (options_.tokenizer != nullptr) {
      const size_t before = r.text.text().size();
      if (Status s = r.text.push(std::span<const int32_t>(&t, 1)); !s.ok()) {
        fail(r, s.with_context("decoding the output"));
        break;
      }
      if (std::optional<size_t> at = find_stop(r, before)) {
        r.text.truncate(*at);
        r.finish = FinishReason::kStopString;
        break;
      }
    }
    if (!r.req.ignore_eos && std::find(eos_.begin(), eos_.end(), t) != eos_.end()) {
      r.finish = FinishReason::kEos;
    } else if (std::find(r.req.stop_token_ids.begin(), r.req.stop_token_ids.end(), t) !=
               r.req.stop_token_ids.end()) {
      r.finish = FinishReason::kStopToken;
    } else if (int32_t(r.output.size()) >= r.req.max_new_tokens) {
      r.finish = FinishReason::kMaxNewTokens;
    } else if (r.prompt_len() + int32_t(r.output.size()) >= ctx) {
      r.finish = FinishReason::kMaxContext;
    }
    if (r.finish != FinishReason::kNone) break;  // tokens after a stop are dropped
  }
  if (r.finish != FinishReason::kNone && r.finish != FinishReason::kStopString) r.text.finish();
  metrics_.emitted += int64_t(count);
  if (options_.on_tokens) options_.on_tokens(r, std::span<const int32_t>(tokens.data(), count));
  metrics_.times.emit_s += seconds_since(t0);
}

// The earliest stop string that now occurs in the text; only matches that end in the bytes this
// token added are new (`before` = the text's size before it).
std::optional<size_t> Engine::find_stop(const RequestState& r, size_t before) const {
  const std::string& text = r.text.text();
  std::optional<size_t> best;
  for (const std::string& s : r.req.stop) {
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const size_t at = text.find(s, from);
    if (at != std::string::npos && (!best || at < *best)) best = at;
  }
  return best;
}

void Engine::fail(RequestState& r, Status why) {
  r.finish = FinishReason::kError;
  r.error = std::move(why);
}

Status Engine::step() {
  DSA_RETURN_IF_ERROR(options_status_);
  const auto t0 = std::chrono::steady_clock::now();
  const model::ForwardTiming& ft = model_.timing();
  const int64_t readbacks = ft.readbacks, readback_bytes = ft.readback_bytes,
                staged_bytes = ft.staged_bytes;
  const int64_t emitted = metrics_.emitted, prefilled = prefilled_,
                launches = metrics_.overlapped_launches, commits = metrics_.device_commits;
  DSA_RETURN_IF_ERROR(scheduler_.admit());
  metrics_.times.schedule_s += seconds_since(t0);
  // The running set is copied: the phases do not change it, and retiring below does.
  const std::vector<RequestState*> running = scheduler_.running();
  DSA_RETURN_IF_ERROR(prefill_phase(running));
  // --profile-device-time: the decode phase's span on the device timeline (a no-op otherwise).
  DSA_RETURN_IF_ERROR(model_.open_step_span());
  const Status decoded = decode_phase(running);
  const Status closed = model_.close_step_span();
  DSA_RETURN_IF_ERROR(decoded);  // the step's own error first
  DSA_RETURN_IF_ERROR(closed);
  metrics_.readbacks += ft.readbacks - readbacks;
  metrics_.readback_bytes += ft.readback_bytes - readback_bytes;
  metrics_.staged_bytes += ft.staged_bytes - staged_bytes;
  const auto t_retire = std::chrono::steady_clock::now();
  DSA_ASSIGN_OR_RETURN(std::vector<RequestState*> finished, scheduler_.retire_finished());
  std::vector<int64_t> finished_ids;
  for (const RequestState* r : finished) {
    finished_ids.push_back(r->id);
    if (r->finish != FinishReason::kError) {
      const RequestFigures f = request_figures(*r, d_);
      metrics_.ttft_s.push_back(f.ttft_s);
      metrics_.tpot_s.push_back(f.tpot_s);
    }
  }
  // By id: a callback may release any finished request, this one or a later one.
  for (int64_t id : finished_ids) {
    const RequestState* r = scheduler_.find(id);
    if (r != nullptr && options_.on_finish) options_.on_finish(*r);
  }
  metrics_.times.retire_s += seconds_since(t_retire);
  metrics_.times.total_s += seconds_since(t0);
  ++metrics_.steps;
  // Progress: every step emits a token, prefills a chunk, finishes a request or launches an
  // overlapped decode or speculative step (whose tokens the next step emits); a step that did none
  // of these would repeat forever (the scheduler refuses what can never run; this guards the rest).
  if (metrics_.emitted == emitted && prefilled_ == prefilled && finished_ids.empty() &&
      metrics_.overlapped_launches == launches && metrics_.device_commits == commits &&
      has_work()) {
    return internal_error("engine: a step made no progress (no token, prefill or finish)");
  }
  return ok_status();
}

Status Engine::abort(int64_t id) {
  // A request in a launched, unread decode: that launch may still write its KV, so it is read
  // first (SPEC.md §6.7: pages are freed once every step launched for the request was read). The
  // other requests' tokens of that launch are emitted as usual.
  if (const RequestState* a = scheduler_.find(id); a != nullptr && a->in_flight > 0) {
    DSA_RETURN_IF_ERROR(finish_in_flight());
  }
  DSA_ASSIGN_OR_RETURN(RequestState * r, scheduler_.abort(id));
  // The text ends here: a held-back partial UTF-8 sequence is not completed by a later token.
  r->text.finish();
  if (options_.on_finish) options_.on_finish(*r);
  return ok_status();
}

Status Engine::run_to_completion() {
  while (has_work()) DSA_RETURN_IF_ERROR(step());
  return ok_status();
}

}  // namespace dsa::engine
