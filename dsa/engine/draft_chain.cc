// The d - 1 MTP DECODE steps that complete a request's drafts (SPEC.md §6.1 step 4), after a
// prefill completes or a speculative step commits: step s at position C' - 1 + s consumes
// (g_s, m_s), the previous draft and the MTP layer's own hidden state. The plan names the steps
// (`chain`, at its agreed B_pad); a rank with no request to draft runs them all padding.
#include "dsa/engine/engine.h"

namespace dsa::engine {

Status Engine::draft_chain(const std::vector<RequestState*>& reqs, std::vector<int32_t> drafts,
                           std::vector<bf16> hidden, std::vector<int32_t> committed,
                           std::span<const ForwardShape> chain) {
  const size_t B = reqs.size();
  std::vector<std::vector<int32_t>> chains(B);
  for (size_t b = 0; b < B; ++b) chains[b].push_back(drafts[b]);
  for (const ForwardShape& shape : chain) {
    const int32_t s = shape.chain_step;
    std::vector<runtime::RequestInput> inputs;
    std::vector<int32_t> tokens;
    for (size_t b = 0; b < B; ++b) {
      inputs.push_back({reqs[b]->req_slot, committed[b] - 1 + s, 1, 0, 1});
      tokens.push_back(chains[b].back());
    }
    model::ForwardOutput out;
    const bool there = drafts_on_backend();
    DSA_RETURN_IF_ERROR(
        run_forward(shape, std::move(inputs), tokens, hidden, &out, logits_to(there)));
    DSA_ASSIGN_OR_RETURN(const std::vector<int32_t> next, drafts_of(out, there, B));
    for (size_t b = 0; b < B; ++b) chains[b].push_back(next[b]);
    hidden = std::move(out.hidden);
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
