// The d - 1 MTP DECODE steps that complete a request's drafts (SPEC.md §6.1 step 4), after a
// prefill completes or a speculative step commits: step s at position C' - 1 + s consumes
// (g_s, m_s), the previous draft and the MTP layer's own hidden state. The plan names the steps
// (`chain`, at its agreed B_pad); a rank with no request to draft runs them all padding.
//
// Where the drafts are decided on the backend (drafts_on_backend) the chain is launched back to
// back: each forward's metadata is built from lengths the host already knows (the step's commit),
// its hidden rows and its tokens are the previous forward's outputs gathered in backend memory
// (model::ForwardInputs), its greedy draft is written to a draft slot there, and the d drafts are
// read back once at the end (d ints per request). Otherwise (host drafts, or host_handoff) each
// forward's logits (and hidden states) come back and the host drafts from them — the same drafts.
#include <fmt/format.h>

#include <algorithm>

#include "dsa/engine/engine.h"

namespace dsa::engine {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

Status Engine::read_kept_drafts(const std::vector<RequestState*>& running) {
  const bool any = std::any_of(running.begin(), running.end(),
                               [](const RequestState* r) { return r->drafts_row >= 0; });
  if (!any) return ok_status();
  std::vector<int32_t> drafts;
  DSA_RETURN_IF_ERROR(model_.read_drafts(d_, &drafts));
  const size_t count = drafts.size() / sz(d_);
  for (RequestState* r : running) {
    if (r->drafts_row < 0) continue;
    if (sz(r->drafts_row) >= count) {
      return internal_error(fmt::format("engine: request {} keeps its drafts in row {} of {}",
                                        r->id, r->drafts_row, count));
    }
    for (int32_t s = 0; s < d_; ++s) {
      r->drafts[sz(s)] = std::max(0, drafts[sz(s) * count + sz(r->drafts_row)]);  // greedy rule
    }
    r->drafts_row = -1;
  }
  return ok_status();
}

Status Engine::draft_chain(const std::vector<RequestState*>& reqs,
                           const model::ForwardOutput& first, const std::vector<int32_t>& rows,
                           std::vector<int32_t> committed, std::span<const ForwardShape> chain,
                           bool patched, bool shifted) {
  const size_t B = reqs.size();
  const bool there = drafts_on_backend();
  // Chained: the drafts stay in backend slots until the end. Else each forward's come back now.
  const bool chained = there && !options_.host_handoff;
  std::vector<std::vector<int32_t>> chains(B);
  // Forward `out`'s drafts (the model's last forward): into slot s, or onto the chains.
  const auto draft = [&](const model::ForwardOutput& out, int32_t s) -> Status {
    if (chained) return model_.draft_on_backend(sampleable_, int32_t(B), s);
    std::vector<int32_t> next;
    if (there) {
      DSA_RETURN_IF_ERROR(model_.draft_on_backend(sampleable_, int32_t(B), 0));
      DSA_RETURN_IF_ERROR(model_.read_drafts(1, &next));
      for (int32_t& t : next) t = std::max(0, t);  // greedy_draft's rule
    } else {
      next = drafts_of(out, B);
    }
    for (size_t b = 0; b < B; ++b) chains[b].push_back(next[b]);
    return ok_status();
  };
  DSA_RETURN_IF_ERROR(draft(first, 0));
  // Step 1 pairs each request's draft with its row of `first`; step s > 1 with row b of step
  // s - 1 (one row per request, padded rows too, as the host hand-off passed them).
  std::vector<int32_t> hidden_rows = rows;
  model::ForwardOutput prev_host;  // host_handoff: the previous forward's hidden states
  const model::ForwardOutput* prev = &first;
  std::vector<bf16> host_rows;
  for (const ForwardShape& shape : chain) {
    const int32_t s = shape.chain_step;
    std::vector<runtime::RequestInput> inputs;
    std::vector<int32_t> tokens;
    for (size_t b = 0; b < B; ++b) {
      inputs.push_back({reqs[b]->req_slot, committed[b] - 1 + s, 1, 0, 1});
      if (!chained) tokens.push_back(chains[b].back());
    }
    model::ForwardInputs in = mtp_inputs(*prev, hidden_rows, &host_rows);
    if (patched) {
      in.accepted_patch =
          s == 1 ? model::AcceptedPatch::kFirstDraftDecode : model::AcceptedPatch::kDraftDecode;
      in.shifted = shifted;
    }
    if (chained) {
      in.draft_slot = s - 1;
    } else {
      in.tokens = tokens;
    }
    model::ForwardOutput out;
    DSA_RETURN_IF_ERROR(run_forward(shape, std::move(inputs), in, &out, outputs(true, there)));
    DSA_RETURN_IF_ERROR(draft(out, s));
    hidden_rows.resize(size_t(std::min(out.header.rows_pad, shape.rows_pad)));
    for (size_t r = 0; r < hidden_rows.size(); ++r) hidden_rows[r] = int32_t(r);
    prev_host = std::move(out);
    prev = &prev_host;
  }
  // Kept: the drafts stay in the slots, where the next verify, its acceptance and its draft
  // extend gather them (decode_phase.cc); nothing is read and the step ends without waiting.
  if (chained && !options_.draft_override && 1 + int32_t(chain.size()) == d_) {
    for (size_t b = 0; b < B; ++b) {
      reqs[b]->drafts.assign(sz(d_), 0);
      reqs[b]->drafts_row = int32_t(b);
    }
    return ok_status();
  }
  if (chained) {
    // The one read of the chain: slot s holds every request's draft s + 1.
    const int32_t slots = 1 + int32_t(chain.size());
    std::vector<int32_t> drafts;
    DSA_RETURN_IF_ERROR(model_.read_drafts(slots, &drafts));
    for (int32_t s = 0; s < slots; ++s) {
      for (size_t b = 0; b < B; ++b) {
        chains[b].push_back(std::max(0, drafts[size_t(s) * B + b]));  // greedy_draft's rule
      }
    }
  }
  for (size_t b = 0; b < B; ++b) {
    reqs[b]->drafts = std::move(chains[b]);
    if (options_.draft_override) options_.draft_override(*reqs[b], reqs[b]->drafts);
    if (reqs[b]->drafts.size() != size_t(d_)) {  // the verify reads exactly d drafts
      fail(*reqs[b], internal_error("draft_override: changed the number of drafts"));
    }
  }
  return ok_status();
}

}  // namespace dsa::engine
