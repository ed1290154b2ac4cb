// `dsa check` entry for the step commit (step_commit.h), and the random case the CPU and GPU tests
// share. No gtest dependency.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/step_commit/step_commit.h"

namespace dsa::kernels {

using StepCommitFn = Status (*)(const StepCommitParams&);

// One random speculative step's buffers in host memory, as the host builder leaves them for the
// forward `target` (built at a_b = 0), with one padded request after the B real ones; params()
// points a StepCommitParams at them.
struct StepCommitCase {
  StepCommitTarget target = StepCommitTarget::kDraftExtend;
  int32_t requests = 0, d = 0, chain_step = 1, topk = 0;
  std::vector<int32_t> accepted, emitted, committed;   // committed: the position base C_b built at
  std::vector<int32_t> shift_accepted, shift_emitted;  // empty: no shift
  std::vector<int32_t> tokens, token_rows, sample_row;
  std::vector<int32_t> row_len, row_topk_len, row_req, row_page, positions, write_slot, ks, ke;
  std::vector<int32_t> req_kv_len, req_slot, hidden_rows;
  std::vector<int32_t> page_table;
  int32_t table_rows = 0, width = 0, num_pages = 0;
  // The folded token gather (empty: none): kept_tokens for the verify / draft extend,
  // draft_tokens (one per request, ids past vocab and -1 among them) for a draft decode.
  std::vector<int32_t> kept_tokens, draft_tokens;
  int32_t vocab = 0;

  StepCommitParams params();
};

// B requests, d drafts; kChainDecode at step chain_step (1 also writes hidden_rows); `shifted`:
// with a previous step's counts (always for kVerify); `gather`: with the folded token gather's
// sources. Positions stay below W P with room for the shift, a and s; every page of the slots'
// rows exists.
StepCommitCase random_step_commit_case(StepCommitTarget target, int32_t requests, int32_t d,
                                       int32_t chain_step, uint64_t seed, bool shifted = false,
                                       bool gather = false);

// Compares every buffer of `got` (after the op ran on it) with an independent formulation of the
// commit over `before` (the case as built): the §4.3 rows at C_b + shift_b (+ a_b + s for a draft
// decode), the §6.1 token row and sample row of the draft extend, the verify's first token, the
// shifted positions, the kept tokens gathered after all that; every entry outside the B real
// requests unchanged.
// Internal naming the buffer, the index and both values.
Status compare_step_commit(const StepCommitCase& before, const StepCommitCase& got);

// Runs `op` on random cases of every target, with and without a shift and the folded gather
// (B = requests, every accepted count 0..d met when B is large enough) and compares with
// compare_step_commit. Exact.
Status check_step_commit(StepCommitFn op, int32_t requests, int32_t d, uint64_t seed);

}  // namespace dsa::kernels
