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
// device runs the step's forwards back to back. The pages of every position the chain may reach
// (C + a + s < C + 2n) are held from admission (§6.4); the op refuses a position without a page.
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

Status Engine::device_committed_step(const std::vector<RequestState*>& reqs,
                                     std::span<const ForwardShape> plan,
                                     const model::ForwardOutput& target,
                                     std::vector<runtime::RequestInput> inputs,
                                     std::span<const int32_t> draft_rows) {
  const int32_t n = d_ + 1;
  DSA_RETURN_IF_ERROR(launch_acceptance(reqs, draft_rows));
  // The DRAFT_EXTEND at a = 0: g_1..g_d from where the drafts are, then a placeholder for y.
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
    committed.push_back(r.committed + 1);  // the chain's a = 0 build
  }
  std::vector<int32_t> rows(sz(std::min(target.header.rows_pad, plan[1].rows_pad)));
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = int32_t(r);
  std::vector<bf16> host_rows;
  model::ForwardInputs mtp_in = mtp_inputs(target, rows, &host_rows);
  mtp_in.tokens = mtp_tokens;
  if (any_kept) {
    mtp_in.token_rows = mtp_token_rows;
    mtp_in.token_source = model::TokenSource::kDraftSlots;
  }
  mtp_in.accepted_patch = model::AcceptedPatch::kDraftExtend;
  model::ForwardOutput mtp;
  DSA_RETURN_IF_ERROR(
      run_forward(plan[1], std::move(inputs), mtp_in, &mtp, outputs(true, drafts_on_backend())));
  // The first draft decode's hidden rows: b n, moved to b n + a_b by the commit.
  std::vector<int32_t> first_rows(reqs.size());
  for (size_t b = 0; b < reqs.size(); ++b) first_rows[b] = int32_t(b) * n;
  DSA_RETURN_IF_ERROR(
      draft_chain(reqs, mtp, first_rows, std::move(committed), plan.subspan(2), true));

  // The step's one read, then the host's commit (as decode_phase's).
  model::VerifyAcceptance v;
  DSA_RETURN_IF_ERROR(model_.read_acceptance(&v));
  ++metrics_.device_commits;
  const std::vector<AcceptResult> decided = accept_results(v);
  const auto t_accept = std::chrono::steady_clock::now();
  const double emit_before = metrics_.times.emit_s;
  for (size_t b = 0; b < reqs.size(); ++b) {
    RequestState& r = *reqs[b];
    const AcceptResult& acc = decided[b];
    metrics_.accept.add(acc.accepted);
    ++metrics_.verify_steps;
    r.accept_lengths.push_back(acc.accepted + 1);
    r.committed += acc.accepted + 1;
    r.pending = acc.emitted.back();
    emit(r, acc.emitted);
  }
  metrics_.times.accept_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_accept).count() -
      (metrics_.times.emit_s - emit_before);
  return ok_status();
}

}  // namespace dsa::engine
