// The decode phase of an engine step: plain DECODE when d = 0, else the speculative step of
// SPEC.md §6.1 — TARGET_VERIFY over [x_C, g_1..g_d], acceptance (§6.2/§6.3), DRAFT_EXTEND of the
// MTP layer over the same positions (row a's output is the first new draft), and the draft chain.
// With EngineOptions::simulate_accept_length the count a is drawn (simulated_acceptance.h). Where
// EngineOptions::accept_on puts the step on the backend, the logits stay in its memory and the
// acceptance op decides there (at d = 0 for plain sampling, the simulated step's rows and the
// drafts); otherwise the host rules run on the host logits. The MTP forwards take their hidden
// rows from the verify's (and each other's) outputs in backend memory (model::ForwardInputs), so
// after the acceptance's read the step reads back only the d drafts (draft_chain.cc).
// The forwards are the agreed plan's (engine.h), at the B_pad of the largest B over the ranks.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "dsa/engine/acceptance.h"
#include "dsa/engine/engine.h"
#include "dsa/engine/simulated_acceptance.h"

namespace dsa::engine {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

std::vector<RequestState*> Engine::decode_requests(
    const std::vector<RequestState*>& running) const {
  const int64_t ctx = model_.options().max_context;
  std::vector<RequestState*> reqs;
  for (RequestState* r : running) {
    // Tokens in flight count as emitted: a request whose last token is being sampled is not
    // decoded again (the overlapped decode's count-based stops; emit() ends it when read).
    // A speculative step in flight may emit up to d + 1 tokens.
    const int64_t out = int64_t(r->output.size()) + int64_t(r->in_flight) * (d_ + 1);
    if (r->phase == RequestPhase::kDecode && r->finish == FinishReason::kNone && out > 0 &&
        out < r->req.max_new_tokens && r->prompt_len() + out < ctx &&
        !r->drafts.empty() == (d_ > 0)) {
      reqs.push_back(r);
    }
  }
  return reqs;
}

Status Engine::decode_phase(const std::vector<RequestState*>& running) {
  std::vector<RequestState*> reqs = decode_requests(running);
  // A step that cannot overlap reads the launched one first: it needs every pending token on the
  // host, and the requests that finish with them drop out.
  const bool overlap = d_ == 0 && options_.overlap && target_on_backend(reqs);
  const bool shifted = d_ > 0 && shifts_in_flight(reqs);
  if (!overlap && !shifted && in_flight_) {
    DSA_RETURN_IF_ERROR(finish_in_flight());
    reqs = decode_requests(running);
  }
  const int32_t n = d_ + 1;
  StepProposal p;
  p.step = 2 * metrics_.steps + 1;
  p.decode_requests = int32_t(reqs.size());
  p.extend_rows = p.decode_requests * n;
  p.chain_requests = p.decode_requests;
  p.load = load();
  DSA_ASSIGN_OR_RETURN(const std::vector<ForwardShape> plan, agree(p));
  if (plan.empty()) return finish_in_flight();  // no rank decodes
  if (overlap) return overlapped_decode(reqs, plan[0]);
  const bool on_backend = target_on_backend(reqs);
  const double sim = options_.simulate_accept_length;
  // The host rules and a simulated step read the drafts; the backend acceptance gathers them.
  if (d_ > 0 && (!on_backend || sim > 0)) DSA_RETURN_IF_ERROR(read_kept_drafts(running));
  const bool device_commit = d_ > 0 && on_backend && !(sim > 0) && commits_on_device();
  std::vector<runtime::RequestInput> inputs;
  std::vector<int32_t> tokens, token_rows, draft_rows;
  // Where draft j + 1 of request b is kept (slot j, row drafts_row), or -1: on the host.
  const auto kept = [&](const RequestState* r, int32_t j) {
    return r->drafts_row < 0 ? -1 : j * model_.draft_count() + r->drafts_row;
  };
  for (RequestState* r : reqs) {
    // Shifted: built at committed + 1; the commit moves the rows by the step in flight's counts
    // and writes its y as the first token.
    inputs.push_back({r->req_slot, r->committed + (shifted ? 1 : 0), n, 0, n});
    tokens.push_back(shifted ? 0 : r->pending);
    token_rows.push_back(-1);
    for (int32_t j = 0; j < d_; ++j) {
      tokens.push_back(r->drafts[sz(j)]);
      token_rows.push_back(kept(r, j));
    }
    draft_rows.push_back(r->drafts_row);
  }
  const bool any_kept = std::any_of(reqs.begin(), reqs.end(),
                                    [](const RequestState* r) { return r->drafts_row >= 0; });
  model::ForwardOutput target;
  model::ForwardInputs target_in;
  target_in.tokens = tokens;
  if (any_kept) {
    target_in.token_rows = token_rows;
    target_in.token_source = model::TokenSource::kDraftSlots;
  }
  if (shifted) {
    target_in.accepted_patch = model::AcceptedPatch::kVerify;
    target_in.shifted = true;
  }
  DSA_RETURN_IF_ERROR(
      run_forward(plan[0], inputs, target_in, &target, outputs(d_ > 0, on_backend)));
  if (device_commit) {
    return device_committed_step(
        reqs, plan, target, std::move(inputs),
        any_kept ? std::span<const int32_t>(draft_rows) : std::span<const int32_t>(),
        options_.overlap, shifted);
  }
  // The target's token at every row (d = 0), or, on the backend, at every verify row of a
  // simulated step (whose forced count picks one; the host path samples only that row).
  std::vector<int32_t> row_tokens;
  if (d_ == 0 || (on_backend && sim > 0)) {
    std::vector<SamplingParams> params;
    std::vector<int32_t> positions;
    for (const RequestState* r : reqs) {
      for (int32_t j = 0; j < n; ++j) {
        params.push_back(r->req.sampling);
        positions.push_back(r->committed + 1 + j);
      }
    }
    DSA_ASSIGN_OR_RETURN(row_tokens, sampled_tokens(target, on_backend, params, positions));
  }
  if (d_ == 0) {
    for (size_t b = 0; b < reqs.size(); ++b) {
      RequestState& r = *reqs[b];
      const int32_t y = row_tokens[b];
      r.committed += 1;
      r.pending = y;
      emit(r, std::span<const int32_t>(&y, 1));
    }
    return ok_status();
  }

  // Acceptance, then the DRAFT_EXTEND token rows: row j takes g_{j+1} for j < a, y for j = a,
  // and g_{j+1} (or y when j = d) after it (computed and discarded).
  std::vector<int32_t> mtp_tokens, mtp_token_rows;
  std::vector<int32_t> committed;
  std::vector<runtime::RequestInput> mtp_reqs = inputs;
  std::vector<AcceptResult> decided;
  if (on_backend && !(sim > 0)) {
    DSA_ASSIGN_OR_RETURN(decided,
                         accept_on_backend(reqs, any_kept ? draft_rows : std::vector<int32_t>{}));
  }
  const auto t_accept = std::chrono::steady_clock::now();
  const double emit_before = metrics_.times.emit_s;
  for (size_t b = 0; b < reqs.size(); ++b) {
    RequestState& r = *reqs[b];
    const int64_t first = int64_t(r.committed) + 1;
    const auto rows = [&] {
      return std::span<const float>(&target.logits[b * n * sz(vocab_)], sz(n) * sz(vocab_));
    };
    AcceptResult acc;
    if (sim > 0) {
      const int32_t forced = simulated_accepted(sim, d_, r.req.sampling.seed, first);
      if (on_backend) {  // force_acceptance's result, from the rows sampled on the backend
        acc.accepted = forced;
        acc.emitted.assign(r.drafts.begin(), r.drafts.begin() + forced);
        acc.emitted.push_back(row_tokens[b * sz(n) + sz(forced)]);
      } else {
        acc = force_acceptance(rows(), vocab_, r.drafts, r.req.sampling, first, forced);
      }
    } else {
      acc = on_backend ? std::move(decided[b])
                       : accept_drafts(rows(), vocab_, r.drafts, r.req.sampling, first);
    }
    const int32_t a = acc.accepted;
    const int32_t y = acc.emitted.back();
    for (int32_t j = 0; j < n; ++j) {
      const bool draft = j != a && j < d_;  // g_{j+1}; else y
      mtp_tokens.push_back(draft ? r.drafts[sz(j)] : y);
      mtp_token_rows.push_back(draft ? kept(&r, j) : -1);
    }
    mtp_reqs[b].sample_first = a;
    mtp_reqs[b].sample_count = 1;
    commit_on_host(r, acc);
    committed.push_back(r.committed);
  }
  metrics_.times.accept_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_accept).count() -
      (metrics_.times.emit_s - emit_before);
  // DRAFT_EXTEND row r pairs with verify row r (§6.7): every row of the verify, in place.
  DraftExtendInputs mtp_in;
  draft_extend_inputs(target, plan[1], mtp_tokens, mtp_token_rows, any_kept, &mtp_in);
  model::ForwardOutput mtp;
  DSA_RETURN_IF_ERROR(run_forward(plan[1], std::move(mtp_reqs), mtp_in.in, &mtp,
                                  outputs(true, drafts_on_backend())));
  std::vector<int32_t> sampled(reqs.size());
  for (size_t b = 0; b < reqs.size(); ++b) sampled[b] = mtp.sample_row[b];
  return draft_chain(reqs, mtp, sampled, std::move(committed),
                     std::span<const ForwardShape>(plan).subspan(2));
}

Status Engine::launch_acceptance(const std::vector<RequestState*>& reqs,
                                 std::span<const int32_t> draft_rows, bool shifted) {
  std::vector<int32_t> drafts, first;
  std::vector<kernels::SamplingParams> params;
  for (const RequestState* r : reqs) {
    if (int32_t(r->drafts.size()) != d_) {
      return internal_error(fmt::format("engine: request {} has {} drafts, the step d = {}", r->id,
                                        r->drafts.size(), d_));
    }
    drafts.insert(drafts.end(), r->drafts.begin(), r->drafts.end());
    params.push_back(r->req.sampling);
    first.push_back(r->committed + 1 + (shifted ? 1 : 0));  // shifted: + the in-flight count
  }
  // The op reads ids [0, sampleable_) of rows vocab_ wide: the host rule's masked padding ids.
  return model_.launch_acceptance(sampleable_, d_, drafts, params, first, draft_rows, shifted);
}

std::vector<AcceptResult> Engine::accept_results(const model::VerifyAcceptance& v) const {
  const size_t n = sz(d_) + 1;
  std::vector<AcceptResult> out(v.accepted.size());
  for (size_t b = 0; b < out.size(); ++b) {
    out[b].accepted = v.accepted[b];
    const auto row = v.emitted.begin() + long(b * n);
    out[b].emitted.assign(row, row + v.accepted[b] + 1);
  }
  return out;
}

StatusOr<std::vector<AcceptResult>> Engine::accept_on_backend(
    const std::vector<RequestState*>& reqs, std::span<const int32_t> draft_rows) {
  DSA_RETURN_IF_ERROR(launch_acceptance(reqs, draft_rows));
  model::VerifyAcceptance v;
  DSA_RETURN_IF_ERROR(model_.read_acceptance(&v));
  return accept_results(v);
}

}  // namespace dsa::engine
