// The step commit (SPEC.md §6.7 "State and commit", §4.2's device builder, inv. 16): after the
// acceptance op has decided a speculative step on the device, the forwards that follow the verify
// are patched there from its accepted counts, so the host builds them before it knows a and never
// waits inside the step. The host builds each forward as if every request accepted nothing
// (a_b = 0); this op turns that build into the one the host builder would make with the real a_b:
//
//  kDraftExtend (the MTP forward over the verify's rows, n = d + 1 rows per request): its token
//    row b is [g_1..g_d, y] with y at j = a_b too (SPEC.md §6.1: row j takes g_{j+1} for j != a,
//    y for j = a and j = d), and sample_row[b] = b n + a_b. tokens[b n + a_b] and tokens[b n + d]
//    := y_b = emitted[b, a_b]; token_rows[b n + a_b] := -1, so the kept-draft gather that follows
//    leaves y there; sample_row[b] := b n + a_b.
//  kChainDecode (draft decode step s, one row per request, built at position C_b + s): the row
//    moves to position C_b + a_b + s through the builder's own row formula
//    (kernels/common/metadata_rows.h), req_kv_len[b] with it, and at s = 1 the row's hidden state
//    is the draft extend's row b n + a_b (hidden_rows[b]). The paged-logits schedule follows from
//    row_len on the device (the forward rebuilds it as its first node).
//
// With the previous step still unread (the overlapped speculative step, F = 1), the host does not
// know C_b either: it builds every forward of the step at C_b = (its committed length) + 1, as if
// the previous step had accepted nothing too, and `shift` = that step's accepted counts moves
// every position of the forward by shift_b as well:
//  kVerify (the TARGET_VERIFY, n rows per request): rows at C_b + shift_b + j, and its first token
//    is the previous step's y: tokens[b n] := shift_emitted[b, shift_b];
//  kDraftExtend: its rows as the verify's, then the patch above;
//  kChainDecode: C_b + shift_b + a_b + s.
// (The acceptance op's first positions take the shift inside that op: AcceptanceParams::
// shift_accepted.)
//
// Only the B real requests are touched; padded requests keep the builder's constants (§4.5).
#pragma once

#include <cstdint>

#include "dsa/core/host_device.h"
#include "dsa/core/status.h"
#include "dsa/kernels/common/metadata_rows.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

enum class StepCommitTarget { kDraftExtend, kChainDecode, kVerify };

// The most drafts per request (d): validate() refuses more.
inline constexpr int32_t kStepCommitMaxDrafts = 7;

struct StepCommitParams {
  StepCommitTarget target = StepCommitTarget::kDraftExtend;
  // The acceptance op's outputs (kernels/acceptance/acceptance.h), still where it wrote them
  // (kDraftExtend and kChainDecode; the other targets read none).
  const int32_t* accepted = nullptr;  // [B] a_b in [0, d]
  const int32_t* emitted = nullptr;   // [B, d + 1] g_1..g_a, y, then -1
  int32_t requests = 0;               // B: the forward's first B requests, in acceptance order
  int32_t drafts_per_request = 0;     // d, 1..7
  // The previous, unread step's acceptance outputs (the same B requests in the same order), or
  // null: no shift. kVerify needs both.
  const int32_t* shift_accepted = nullptr;  // [B]
  const int32_t* shift_emitted = nullptr;   // [B, d + 1]

  // kDraftExtend / kVerify: the forward's token ids [B n]; kDraftExtend: sample_row [B] and
  // token_rows [B n] or null (no kept drafts to gather).
  int32_t* tokens = nullptr;
  int32_t* token_rows = nullptr;
  int32_t* sample_row = nullptr;

  // kVerify, kDraftExtend, kChainDecode: the forward's row arrays (n rows per request, or one for
  // kChainDecode, built as above), req_kv_len [B], req_slot [B] (read), hidden_rows [B] (the first
  // draft decode only; null otherwise), the page table the row formula reads and K.
  RowArrays rows{};
  int32_t* req_kv_len = nullptr;
  const int32_t* req_slot = nullptr;
  int32_t* hidden_rows = nullptr;
  PageTable page_table{};
  int32_t topk = 0;

  // Optional: the token gather that follows the commit, folded into it (one launch fewer per
  // forward). After the patch, every real request's rows take their kept tokens, whatever the
  // commit decided for the request (as the separate CUDA gather did; the forward fails either
  // way when a request is refused):
  //  kVerify / kDraftExtend: row r of request b (r in [b n, b n + n)) whose token_rows[r], as
  //    patched, is in [0, kept_count) takes kept_tokens[token_rows[r]];
  //  kChainDecode: tokens[b] := draft_tokens[b] where that is in [0, vocab) (a draft slot's entry;
  //    -1, no eligible token, keeps the staged token).
  const int32_t* kept_tokens = nullptr;
  int32_t kept_count = 0;
  const int32_t* draft_tokens = nullptr;
  int32_t vocab = 0;
};

// Host checks (InvalidArgument naming the field): B >= 0, 1 <= d <= 7, the pointers the target
// reads and writes non-null when B > 0, and for the row targets topk >= 1 and a page table with
// width >= 1; kept_tokens only for kVerify / kDraftExtend, with token_rows and kept_count >= 1;
// draft_tokens only for kChainDecode, with tokens and vocab >= 1.
Status validate(const StepCommitParams& p);

// Why a request could not be committed (DSA_HD, shared by the reference and the kernel).
enum class StepCommitError : int32_t {
  kNone = 0,
  kAccepted,  // a_b outside [0, d]: the request is left as built
  kShift,     // shift_b outside [0, d]: the request is left as built
  kNoPage,    // a new position has no page (past W, or an entry outside [1, num_pages)):
              // the rows stay as built except write_slot = -1, so nothing is written to page 0
              // (SPEC.md §9 bug class 12: a device position ahead of the host's pages)
  kSlot,      // req_slot[b] outside [1, num_rows): handled as kNoPage
};

// Request b of `p` (b < B): the patch above. Returns the error and its value (a_b, shift_b, the
// position or the slot) in *value.
DSA_HD StepCommitError commit_request(const StepCommitParams& p, int32_t b, int32_t* value) {
  const int32_t d = p.drafts_per_request, n = d + 1;
  // Every read that depends on no other first, so that on the GPU their latencies overlap (the
  // kernel is a chain of dependent loads between two forwards of the step).
  const bool chain = p.target == StepCommitTarget::kChainDecode;
  const int32_t count = chain ? 1 : n, first_row = b * count;
  const int32_t shift = p.shift_accepted != nullptr ? p.shift_accepted[b] : 0;
  const int32_t a = p.target != StepCommitTarget::kVerify ? p.accepted[b] : 0;
  const int32_t built = p.rows.positions[first_row];
  const int32_t slot = p.req_slot[b];
  if (p.shift_accepted != nullptr) {
    *value = shift;
    if (shift < 0 || shift > d) return StepCommitError::kShift;
  }
  if (p.target != StepCommitTarget::kVerify) {
    *value = a;
    if (a < 0 || a > d) return StepCommitError::kAccepted;
  }
  // The rows: one per request for a draft decode, n otherwise, moved by shift (and a).
  const int32_t cached = built + shift + (chain ? a : 0);
  if (slot < 1 || slot >= p.page_table.num_rows) {
    for (int32_t j = 0; j < count; ++j) p.rows.write_slot[first_row + j] = -1;
    *value = slot;
    return StepCommitError::kSlot;
  }
  for (int32_t j = 0; j < count; ++j) {
    const int32_t pos = cached + j, chunk = pos / kPageSize;
    const int32_t page = pos >= 0 && chunk < p.page_table.width
                             ? p.page_table.data[int64_t{slot} * p.page_table.width + chunk]
                             : 0;
    if (page < 1 || page >= p.page_table.num_pages) {
      for (int32_t i = 0; i < count; ++i) p.rows.write_slot[first_row + i] = -1;
      *value = pos;
      return StepCommitError::kNoPage;
    }
  }
  fill_request_rows(p.rows, p.page_table, b, slot, cached, count, first_row, -1, p.topk);
  p.req_kv_len[b] = cached + count;
  if (p.target == StepCommitTarget::kVerify) {
    if (p.shift_emitted != nullptr)
      p.tokens[int64_t{b} * n] = p.shift_emitted[int64_t{b} * n + shift];
    return StepCommitError::kNone;
  }
  if (chain) {
    if (p.hidden_rows != nullptr) p.hidden_rows[b] = b * n + a;
    return StepCommitError::kNone;
  }
  const int32_t y = p.emitted[int64_t{b} * n + a];
  p.tokens[int64_t{b} * n + a] = y;
  p.tokens[int64_t{b} * n + d] = y;
  if (p.token_rows != nullptr) p.token_rows[int64_t{b} * n + a] = -1;
  p.sample_row[b] = b * n + a;
  return StepCommitError::kNone;
}

// The folded token gather of request b (kept_tokens / draft_tokens above; nothing without them).
// Requires what validate() checks (d <= kStepCommitMaxDrafts: the rows past it are not visited)
// and that `tokens` overlaps neither `token_rows` nor `kept_tokens` (the mirror's tokens against
// the draft slots or the sampler's tokens): every read is made before the first write.
DSA_HD void gather_request_tokens(const StepCommitParams& p, int32_t b) {
  if (p.target == StepCommitTarget::kChainDecode) {
    if (p.draft_tokens == nullptr) return;
    const int32_t t = p.draft_tokens[b];
    if (t >= 0 && t < p.vocab) p.tokens[b] = t;
    return;
  }
  if (p.kept_tokens == nullptr) return;
  // Every row's list entry, then every kept token, then the stores: on the GPU each pass's loads
  // are in flight together, not two dependent loads per row one row after another.
  const int32_t n = p.drafts_per_request + 1;
  const int64_t first = int64_t{b} * n;
  // Unrolled at the bound, so the arrays stay in registers.
  constexpr int32_t kRows = kStepCommitMaxDrafts + 1;
  int32_t k[kRows];
  int32_t t[kRows];
  DSA_HD_UNROLL
  for (int32_t j = 0; j < kRows; ++j) k[j] = j < n ? p.token_rows[first + j] : -1;
  DSA_HD_UNROLL
  for (int32_t j = 0; j < kRows; ++j) {
    t[j] = k[j] >= 0 && k[j] < p.kept_count ? p.kept_tokens[k[j]] : 0;
  }
  DSA_HD_UNROLL
  for (int32_t j = 0; j < kRows; ++j) {
    if (k[j] >= 0 && k[j] < p.kept_count) p.tokens[first + j] = t[j];
  }
}

// CPU reference: commit_request then gather_request_tokens for every request. A request's error is
// InvalidArgument (a_b, shift_b) or FailedPrecondition (no page, a bad slot), naming the request
// and the value, after every request was patched as far as it can be (the same buffers as the
// kernel).
Status step_commit_ref(const StepCommitParams& p);

// CUDA (device pointers, cuda::current_stream()): one thread per request (commit_request, then
// gather_request_tokens), no synchronisation, no allocation. The same bytes as the reference. An
// error is reported through the device error word (OpId::kStepCommit, row = the request, value as
// above) in every mode, since it is a safety check and costs nothing; it surfaces at the owner's
// next read of the word (at once in checked mode without a DeferDeviceErrors).
Status step_commit_cuda(const StepCommitParams& p);

}  // namespace dsa::kernels
