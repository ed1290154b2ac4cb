#include <algorithm>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk.h"
#include "dsa/kernels/topk/topk.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "paged_logits_topk";

// The paged-logits half of the problem, writing `logits` [B_pad n, ld] under `schedule`.
PagedLogitsParams logits_params(const PagedLogitsTopkParams& p, const int32_t* schedule,
                                int32_t schedule_words, float* logits, int64_t ld) {
  PagedLogitsParams l;
  l.q = p.q;
  l.w = p.w;
  l.row_len = p.row_len;
  l.req_slot = p.req_slot;
  l.page_table = p.page_table;
  l.pool = p.pool;
  l.schedule = schedule;
  l.schedule_words = schedule_words;
  l.batch_pad = p.batch_pad;
  l.rows_per_request = p.rows_per_request;
  l.num_heads = p.num_heads;
  l.num_consumers = 1;
  l.logits = logits;
  l.logits_ld = ld;
  l.logits_rows = int64_t{p.batch_pad} * p.rows_per_request;
  return l;
}

int64_t logits_ld(const PagedLogitsTopkParams& p) {
  return (int64_t{p.page_table.width} * kPageSize + 255) / 256 * 256;
}
}  // namespace

Status validate(const PagedLogitsTopkParams& p) {
  // The logits half is paged_logits' own validation, with a stand-in schedule (10 + 2 x 2
  // words for one consumer; only its size is checked) and output, on the stack: the CUDA op
  // validates on every launch.
  int32_t schedule_stub[14] = {};
  float logits_stub = 0.f;
  const PagedLogitsParams l =
      logits_params(p, schedule_stub, logits_schedule_words(1), &logits_stub,
                    p.page_table.width >= 1 ? logits_ld(p) : 0);
  DSA_RETURN_IF_ERROR(validate(l));
  if (p.k < kMinTopk || p.k > 2048 || p.k % kTopkMultiple != 0) {
    return field_error(StatusCode::kInvalidArgument, kOp, "k", p.k,
                       "must be in [64, 2048] and a multiple of 64");
  }
  if (int64_t{p.batch_pad} * p.rows_per_request > 0) {
    DSA_RETURN_IF_ERROR(require_pointer(kOp, "idx", p.idx));
  }
  return ok_status();
}

Status paged_logits_topk_ref(const PagedLogitsTopkParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const int32_t n = p.rows_per_request, rows = p.batch_pad * n, W = p.page_table.width;
  if (rows == 0) return ok_status();
  const int64_t ld = logits_ld(p);
  std::vector<int32_t> schedule(static_cast<size_t>(logits_schedule_words(1)));
  LogitsScheduleParams sp{
      p.row_len, p.batch_pad, n, 1, W, kPageSize, schedule.data(), int32_t(schedule.size())};
  DSA_RETURN_IF_ERROR(build_logits_schedule_ref(sp));
  std::vector<float> logits(size_t(rows) * size_t(ld));
  // Checked mode stops here on out-of-contract data, before anything is written.
  DSA_RETURN_IF_ERROR(paged_logits_ref(
      logits_params(p, schedule.data(), int32_t(schedule.size()), logits.data(), ld)));

  // The selection over each row's neutralised length and page-table row (paged_logits' rules;
  // the data already passed its checks, so topk runs unchecked and reads what the logits read).
  const int32_t cap = W * kPageSize;
  std::vector<int32_t> len(static_cast<size_t>(rows)), row_page(static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) {
    len[size_t(r)] = std::clamp(p.row_len[r], 0, cap);
    const int32_t slot = p.req_slot[r / n];
    row_page[size_t(r)] = slot < 0 || slot >= p.page_table.num_rows ? 0 : slot;
  }
  TopkParams t;
  t.logits = logits.data();
  t.logits_ld = static_cast<int32_t>(ld);
  t.rows = rows;
  t.len = len.data();
  t.k = p.k;
  t.variant = TopkVariant::kPaged;
  t.page_table = p.page_table;
  t.row_page = row_page.data();
  t.out_rows = rows;
  t.idx = p.idx;
  ScopedCheckedMode unchecked(false);
  return topk_ref(t);
}

}  // namespace dsa::kernels
