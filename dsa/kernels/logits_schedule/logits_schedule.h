// Schedule metadata of the paged logits kernel (SPEC.md §3c): which (request, 256-token split)
// pairs each of G independent consumers (CTAs or clusters) processes. Built once per forward from
// the canonical per-row lengths; every paged-logits launch checks its header, and its hash in
// checked mode, so a schedule built for another layout is an error, never a hang (§9 row 1).
#pragma once

#include <cstdint>
#include <string_view>

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/logits_schedule/logits_schedule_math.h"

namespace dsa::kernels {

struct LogitsScheduleParams {
  const int32_t* row_len = nullptr;  // [B_pad * n] int32 per-row visible lengths, r = b * n + j
  int32_t batch_pad = 0;             // B_pad
  int32_t rows_per_request = 1;      // n, 1..8
  int32_t num_consumers = 1;         // G: CTAs, or clusters sharing one K stream
  int32_t page_table_width = 0;      // W, pages per page-table row
  int32_t page_size = kPageSize;     // P
  int32_t* schedule = nullptr;       // [schedule_capacity] int32 out; 10 + 2(G + 1) words written
  int32_t schedule_capacity = 0;     // words available at `schedule`
};

// 10 + 2(G + 1).
int32_t logits_schedule_words(int32_t num_consumers);

// Host checks (InvalidArgument): 1 <= n <= 8, G >= 1, W >= 1 (W P fits int32), B_pad >= 0,
// P = 64, T_seg cannot overflow int32, pointers; capacity < 10 + 2(G + 1) is ResourceExhausted.
Status validate(const LogitsScheduleParams& p);

// CPU reference: the §3c formulas verbatim (schedule_build). No data rule can fail: negative
// lengths count as 0 and lengths above W P are clamped, identically in builder and consumers.
Status build_logits_schedule_ref(const LogitsScheduleParams& p);

// CUDA (sm_90a) builder on cuda::current_stream(): one CTA reads the device row_len and writes the
// 10 + 2(G + 1) words of `schedule` (DEVICE pointers), bit-identical to the reference. No sync and
// no allocation, so it can be captured in a CUDA graph and replayed every forward.
Status build_logits_schedule_cuda(const LogitsScheduleParams& p);

// The always-on launch check of §3b (no work is done on failure): words 0..6 (magic, version,
// B_pad, n, G, S_tok, W) equal the launch's. FailedPrecondition "<op>: schedule word 2
// (batch_pad) = 4, expected 1". schedule_words must be >= 10 (callers check the size first).
Status check_schedule_header(std::string_view op, const int32_t* schedule, int32_t batch_pad,
                             int32_t n, int32_t G, int32_t W);

// The checked-mode hash check: word 8 equals the len_hash of this row_len.
Status check_schedule_hash(std::string_view op, const int32_t* schedule, const int32_t* row_len,
                           int32_t batch_pad, int32_t n);

// Full validator (§3c `validate_schedule`): rebuilds the schedule from (row_len, B_pad, n, G, W)
// and compares every word: FailedPrecondition naming the first mismatching word, e.g.
// "schedule word 8 (len_hash) = X, expected Y" or "schedule word 13 (entry[1].k) = ...". A wrong
// schedule_words is FailedPrecondition after the header words (so a wrong G is reported as word
// 4). Invalid (B_pad, n, G, W) themselves are InvalidArgument.
Status validate_logits_schedule(const int32_t* schedule, int32_t schedule_words,
                                const int32_t* row_len, int32_t batch_pad, int32_t n, int32_t G,
                                int32_t W);

}  // namespace dsa::kernels
