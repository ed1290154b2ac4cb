// The device-committed speculative step (SPEC.md §6.7 "State and commit", EngineOptions::
// device_commit; the design is docs/device_committed_step.md). After the verify, nothing waits:
//   1. the acceptance op is launched over the verify's logits (its counts stay on the device);
//   2. the DRAFT_EXTEND is built as if every request accepted nothing (row j takes g_{j+1}, the
//      last row a placeholder, no sampled row) and the step commit op writes y into rows a_b and
//      d and the sampled row b n + a_b on the device before the forward runs;
//   3. the d - 1 draft DECODEs are built at C + s and the op moves each row to C + a_b + s (its
//      position, lengths, slot) and the first one's hidden rows to b n + a_b;
//   4. one read: the counts and emitted tokens (the acceptance's outputs, untouched since), then
//      the host commits and emits as decode_phase does.
// So the host builds and launches the draft extend and the chain while the verify runs, and the
// device runs the step's forwards back to back.
//
// With EngineOptions::overlap (SPEC.md §6.7, F = 1) the step is left in flight: its counts are
// copied back behind a marker and read by the next step after that one has launched its forwards.
// The next step, over the same requests in the same order, is built at committed + 1 as if the
// step in flight accepted nothing, and its forwards (the verify included) and its acceptance's
// positions are moved by that step's counts on the backend (step_commit.h's shift); its verify's
// first token is that step's y. A request that stopped (EOS, a stop string) in the step in flight
// has its next step's tokens discarded, and keeps its pages until that step is read. Count-based
// stops never launch past the end: a request whose step in flight may reach max_new_tokens or the
// context sits out (decode_requests counts d + 1 tokens per step in flight). The pages of every
// position the chain may reach (C + a + s < C + 2n) are held from admission (§6.4); the op refuses
// a position without a page.
#include <fmt/format.h>

#include <chrono>

#include "dsa/engine/engine.h"

namespace dsa::engine {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

bool Engine::commits_on_device() const {
  return options_.device_commit && drafts_on_backend() && !options_.host_handoff &&
         !options_.draft_override;
}

bool Engine::shifts_in_flight(const std::vector<RequestState*>& reqs) const {
  if (!in_flight_ || !in_flight_->accept || !options_.overlap || !commits_on_device() ||
      options_.simulate_accept_length > 0 || !target_on_backend(reqs) ||
      in_flight_->ids.size() != reqs.size() || reqs.empty()) {
    return false;
  }
  for (size_t b = 0; b < reqs.size(); ++b) {
    const RequestState& r = *reqs[b];
    if (r.id != in_flight_->ids[b] || r.drafts_row != int32_t(b) || r.in_flight != 1) return false;
  }
  return true;
}

void Engine::commit_on_host(RequestState& r, const AcceptResult& acc) {
  metrics_.accept.add(acc.accepted);
  ++metrics_.verify_steps;
  r.accept_lengths.push_back(acc.accepted + 1);
  r.committed += acc.accepted + 1;
  r.pending = acc.emitted.back();
  emit(r, acc.emitted);
}

Status Engine::device_committed_step(const std::vector<RequestState*>& reqs,
                                     std::span<const ForwardShape> plan,
                                     const model::ForwardOutput& target,
                                     std::vector<runtime::RequestInput> inputs,
                                     std::span<const int32_t> draft_rows, bool overlap,
                                     bool shifted) {
  const int32_t n = d_ + 1;
  DSA_RETURN_IF_ERROR(launch_acceptance(reqs, draft_rows, shifted));
  // The DRAFT_EXTEND at a = 0 (over the verify's rows): g_1..g_d from where the drafts are, then a
  // placeholder for y.
  std::vector<int32_t> mtp_tokens, mtp_token_rows, committed;
  bool any_kept = false;
  for (size_t b = 0; b < reqs.size(); ++b) {
    const RequestState& r = *reqs[b];
    for (int32_t j = 0; j < n; ++j) {
      const bool draft = j < d_;
      mtp_tokens.push_back(draft ? r.drafts[sz(j)] : 0);
      const bool kept = draft && r.drafts_row >= 0;
      mtp_token_rows.push_back(kept ? j * model_.draft_count() + r.drafts_row : -1);
      any_kept = any_kept || kept;
    }
    inputs[b].sample_first = -1;  // the commit writes b n + a_b
    inputs[b].sample_count = 1;
    committed.push_back(inputs[b].cached_len + 1);  // the chain's a = 0 build
  }
  DraftExtendInputs mtp_in;
  draft_extend_inputs(target, plan[1], mtp_tokens, mtp_token_rows, any_kept, &mtp_in);
  mtp_in.in.accepted_patch = model::AcceptedPatch::kDraftExtend;
  mtp_in.in.shifted = shifted;
  model::ForwardOutput mtp;
  DSA_RETURN_IF_ERROR(
      run_forward(plan[1], std::move(inputs), mtp_in.in, &mtp, outputs(true, drafts_on_backend())));
  // The first draft decode's hidden rows: b n, moved to b n + a_b by the commit.
  std::vector<int32_t> first_rows(reqs.size());
  for (size_t b = 0; b < reqs.size(); ++b) first_rows[b] = int32_t(b) * n;
  DSA_RETURN_IF_ERROR(
      draft_chain(reqs, mtp, first_rows, std::move(committed), plan.subspan(2), true, shifted));
  if (!reqs.empty()) {  // an idle DP rank's padded step commits nothing
    ++metrics_.device_commits;
    metrics_.shifted_steps += shifted ? 1 : 0;
  }

  // The step's one read: its counts come back behind a marker. Overlapped, it is left in flight
  // and read by the next step (after that one has launched its own forwards) or whenever the
  // engine needs it on the host; otherwise at once.
  DSA_ASSIGN_OR_RETURN(const model::AcceptTicket ticket, model_.readback_acceptance());
  InFlightDecode next;
  next.accept = ticket;
  next.launch = -1;
  for (RequestState* r : reqs) {
    r->in_flight += 1;
    next.ids.push_back(r->id);
  }
  if (!overlap) return finish_speculative(next);
  DSA_RETURN_IF_ERROR(finish_in_flight());  // the step before, if any
  in_flight_ = std::move(next);
  return ok_status();
}

Status Engine::finish_speculative(const InFlightDecode& done) {
  model::VerifyAcceptance v;
  DSA_RETURN_IF_ERROR(model_.collect_acceptance(*done.accept, &v));
  if (v.accepted.size() != done.ids.size()) {
    return internal_error(fmt::format("engine: a speculative step decided {} requests of {}",
                                      v.accepted.size(), done.ids.size()));
  }
  const std::vector<AcceptResult> decided = accept_results(v);
  const auto t_accept = std::chrono::steady_clock::now();
  const double emit_before = metrics_.times.emit_s;
  for (size_t b = 0; b < done.ids.size(); ++b) {
    RequestState* r = scheduler_.find(done.ids[b]);
    if (r == nullptr) continue;  // aborted and released meanwhile
    r->in_flight -= 1;
    // Stopped by an earlier step's token (or aborted): this step's tokens are discarded.
    if (r->finish != FinishReason::kNone) continue;
    commit_on_host(*r, decided[b]);
  }
  metrics_.times.accept_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_accept).count() -
      (metrics_.times.emit_s - emit_before);
  return ok_status();
}

}  // namespace dsa::engine
