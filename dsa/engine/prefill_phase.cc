// The prefill phase of an engine step (SPEC.md §6.1, chunked prefill): one target EXTEND over every
// prefilling request's next chunk, then the MTP EXTEND over the same rows (row i pairs token i + 1
// with h_i; a prompt's last row takes the token the target just sampled), then the draft chain for
// prompts that completed. The forwards are the agreed plan's (engine.h): a rank without chunks
// runs them all padding while another rank prefills.
#include <algorithm>

#include "dsa/engine/engine.h"

namespace dsa::engine {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

Status Engine::prefill_phase(const std::vector<RequestState*>& running) {
  std::vector<RequestState*> reqs;
  std::vector<runtime::RequestInput> inputs;
  std::vector<int32_t> tokens;
  int32_t budget = model_.metadata_config().max_extend_rows;
  for (RequestState* r : running) {
    if (r->phase != RequestPhase::kPrefill || budget == 0) continue;
    const int32_t len = std::min({options_.prefill_chunk, r->prompt_len() - r->prefilled, budget});
    const bool last = r->prefilled + len == r->prompt_len();
    inputs.push_back({r->req_slot, r->prefilled, len, len - 1, last ? 1 : 0});
    for (int32_t i = 0; i < len; ++i) tokens.push_back(r->req.prompt[sz(r->prefilled + i)]);
    reqs.push_back(r);
    budget -= len;
  }
  // The prefill part of the step: chunks only (their decodes run in the decode part).
  StepProposal p;
  p.step = 2 * metrics_.steps;
  p.prefill_requests = int32_t(reqs.size());
  for (const runtime::RequestInput& in : inputs) {
    p.extend_rows += in.new_len;
    p.chain_requests += in.sample_count;  // 1 for a prompt's last chunk
  }
  p.load = load();
  DSA_ASSIGN_OR_RETURN(const std::vector<ForwardShape> plan, agree(p));
  if (plan.empty()) return ok_status();  // no rank prefills
  // A speculative step in flight is read first: this part's acceptance launch (its first tokens)
  // takes the slot whose counts the next step would be moved by.
  if (in_flight_ && in_flight_->accept) DSA_RETURN_IF_ERROR(finish_in_flight());
  // This part's chain rewrites the draft slots (on every rank, a rank without chunks too).
  DSA_RETURN_IF_ERROR(read_kept_drafts(running));
  // The first token of each completed prompt, sampled on the backend where accept_on says so.
  std::vector<RequestState*> completing;
  for (size_t b = 0; b < reqs.size(); ++b) {
    if (inputs[b].sample_count > 0) completing.push_back(reqs[b]);
  }
  const bool on_backend = target_on_backend(completing);
  model::ForwardOutput target;
  model::ForwardInputs target_in;
  target_in.tokens = tokens;
  DSA_RETURN_IF_ERROR(
      run_forward(plan[0], inputs, target_in, &target, outputs(d_ > 0, on_backend)));
  std::vector<SamplingParams> params;
  std::vector<int32_t> positions;
  for (const RequestState* r : completing) {
    params.push_back(r->req.sampling);
    positions.push_back(r->prompt_len());
  }
  DSA_ASSIGN_OR_RETURN(const std::vector<int32_t> first_tokens,
                       sampled_tokens(target, on_backend, params, positions));

  // Sample x_{L_p} for prompts that completed; build the MTP rows' next tokens.
  std::vector<int32_t> next(tokens.size());
  std::vector<RequestState*> completed;
  std::vector<int32_t> completed_rows;
  int32_t sample_i = 0;
  for (size_t b = 0; b < reqs.size(); ++b) {
    RequestState& r = *reqs[b];
    const int32_t first = target.row_start[b], len = inputs[b].new_len;
    for (int32_t i = 0; i < len; ++i) {
      const int32_t pos = r.prefilled + i;
      next[sz(first + i)] = pos + 1 < r.prompt_len() ? r.req.prompt[sz(pos + 1)] : -1;
    }
    r.prefilled += len;
    prefilled_ += len;
    if (r.prefilled == r.prompt_len()) {
      const int32_t x = first_tokens[sz(sample_i)];
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
  std::vector<runtime::RequestInput> mtp_reqs = inputs;
  for (size_t b = 0; b < reqs.size(); ++b) {
    const bool done = reqs[b]->phase == RequestPhase::kDecode;
    mtp_reqs[b].sample_first = inputs[b].new_len - 1;
    mtp_reqs[b].sample_count = done ? 1 : 0;
  }
  // The MTP EXTEND's row r pairs with the target's row r: every row, in place.
  std::vector<int32_t> rows(sz(std::min(target.header.rows_pad, plan[1].rows_pad)));
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = int32_t(r);
  std::vector<bf16> host_rows;
  model::ForwardInputs mtp_in = mtp_inputs(target, rows, &host_rows);
  mtp_in.tokens = next;
  model::ForwardOutput mtp;
  DSA_RETURN_IF_ERROR(
      run_forward(plan[1], std::move(mtp_reqs), mtp_in, &mtp, outputs(true, drafts_on_backend())));
  std::vector<int32_t> chain_positions;
  for (RequestState* r : completed) chain_positions.push_back(r->committed);  // C' = L_p
  return draft_chain(completed, mtp, completed_rows, std::move(chain_positions),
                     std::span<const ForwardShape>(plan).subspan(2));
}

}  // namespace dsa::engine
