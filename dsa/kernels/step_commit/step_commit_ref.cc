#include <fmt/format.h>

#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/step_commit/step_commit.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "step_commit";
}  // namespace

Status validate(const StepCommitParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "requests", p.requests, 0, INT32_MAX / 8));
  DSA_RETURN_IF_ERROR(
      require_in(kOp, "drafts_per_request", p.drafts_per_request, 1, kStepCommitMaxDrafts));
  const bool chain = p.target == StepCommitTarget::kChainDecode;
  const bool token_rows_target =
      p.target == StepCommitTarget::kVerify || p.target == StepCommitTarget::kDraftExtend;
  if (p.kept_tokens != nullptr) {
    if (!token_rows_target) {
      return invalid_argument(
          fmt::format("{}: kept_tokens: only for the verify and the draft extend", kOp));
    }
    DSA_RETURN_IF_ERROR(require_in(kOp, "kept_count", p.kept_count, 1, INT32_MAX));
  }
  if (p.draft_tokens != nullptr) {
    if (!chain) {
      return invalid_argument(fmt::format("{}: draft_tokens: only for a draft decode", kOp));
    }
    DSA_RETURN_IF_ERROR(require_in(kOp, "vocab", p.vocab, 1, INT32_MAX));
  }
  if (p.requests == 0) return ok_status();
  if (p.kept_tokens != nullptr)
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "token_rows", p.token_rows));
  if (p.draft_tokens != nullptr) DSA_RETURN_IF_ERROR(require_pointer(kOp, "tokens", p.tokens));
  if (p.target == StepCommitTarget::kVerify) {
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "shift_accepted", p.shift_accepted));
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "shift_emitted", p.shift_emitted));
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "tokens", p.tokens));
  } else {
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "accepted", p.accepted));
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "emitted", p.emitted));
  }
  if (p.target == StepCommitTarget::kDraftExtend) {
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "tokens", p.tokens));
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "sample_row", p.sample_row));
  }
  const RowArrays& r = p.rows;
  for (const auto& [name, ptr] : {std::pair{"rows.row_len", r.row_len},
                                  {"rows.row_topk_len", r.row_topk_len},
                                  {"rows.row_req", r.row_req},
                                  {"rows.row_page", r.row_page},
                                  {"rows.positions", r.positions},
                                  {"rows.write_slot", r.write_slot},
                                  {"rows.ks", r.ks},
                                  {"rows.ke", r.ke},
                                  {"req_kv_len", p.req_kv_len}}) {
    DSA_RETURN_IF_ERROR(require_pointer(kOp, name, ptr));
  }
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "req_slot", p.req_slot));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "page_table.data", p.page_table.data));
  DSA_RETURN_IF_ERROR(require_in(kOp, "page_table.width", p.page_table.width, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(kOp, "page_table.num_rows", p.page_table.num_rows, 1, INT32_MAX));
  return require_in(kOp, "topk", p.topk, 1, INT32_MAX);
}

Status step_commit_ref(const StepCommitParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  Status first = ok_status();
  for (int32_t b = 0; b < p.requests; ++b) {
    int32_t value = 0;
    const StepCommitError e = commit_request(p, b, &value);
    gather_request_tokens(p, b);
    if (e == StepCommitError::kNone || !first.ok()) continue;
    if (e == StepCommitError::kAccepted || e == StepCommitError::kShift) {
      first = element_error(StatusCode::kInvalidArgument, kOp,
                            e == StepCommitError::kShift ? "shift_accepted" : "accepted", b, value,
                            fmt::format("must be in [0, d = {}]", p.drafts_per_request));
    } else if (e == StepCommitError::kSlot) {
      first = element_error(StatusCode::kFailedPrecondition, kOp, "req_slot", b, value,
                            fmt::format("must be in [1, {})", p.page_table.num_rows));
    } else {
      first = failed_precondition(fmt::format(
          "{}: request {}: position {} has no page (reserve pages for the speculative lookahead "
          "before launching the step)",
          kOp, b, value));
    }
  }
  return first;
}

}  // namespace dsa::kernels
