// Paged MQA logits (SPEC.md §3b): the indexer scores of every row of B_pad requests of n rows
// against the keys of its request in the paged indexer pool. The n rows of a request share one
// K stream [0, L_b); per-row causality comes only from row_len.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

struct PagedLogitsParams {
  const uint8_t* q = nullptr;         // [B_pad * n, H_i, D_i] e4m3 codes, row r = b * n + j
  const float* w = nullptr;           // [B_pad * n, H_i] fp32 head weights, q scale folded in
  const int32_t* row_len = nullptr;   // [B_pad * n] int32 visible length of each row (§4.3)
  const int32_t* req_slot = nullptr;  // [B_pad] int32 page-table row of request b (0 = padded)
  PageTable page_table;               // [R_slots, W] int32 page ids; W = page_table.width
  IndexerPool pool;                   // one layer's indexer keys (§2.2), read only
  const int32_t* schedule = nullptr;  // [schedule_words] int32, §3c built from this row_len
  int32_t schedule_words = 0;         // must be 10 + 2(G + 1)
  int32_t batch_pad = 0;              // B_pad
  int32_t rows_per_request = 1;       // n, 1..8
  int32_t num_heads = 64;             // H_i in {16, 32, 64}; D_i = pool.head_dim = 128
  int32_t num_consumers = 1;          // G of the launch (recorded in the schedule header)
  float* logits = nullptr;            // [logits_rows, logits_ld] fp32 out; row r, column s
  int64_t logits_ld = 0;              // multiple of 256, >= W * P (§2.6)
  int64_t logits_rows = 0;            // rows allocated at `logits`, >= B_pad * n
};

// Host checks (InvalidArgument): H_i in {16, 32, 64}; D_i = 128, P = 64, page stride; 1 <= n <= 8;
// B_pad >= 0; G >= 1; W >= 1; page_table.num_pages = pool.num_pages; ld mod 256 = 0 and
// ld >= W P; logits_rows >= B_pad n; schedule_words = 10 + 2(G + 1); pointers.
Status validate(const PagedLogitsParams& p);

// CPU reference. After validate():
//  - always: schedule words 0..6 (magic, version, B_pad, n, G, S_tok, W) equal the launch's,
//    else FailedPrecondition and nothing is written;
//  - checked: schedule len_hash = hash of row_len (FailedPrecondition); 0 <= row_len <= W P,
//    and for every request with L_b > 0 req_slot in [0, R_slots) and the page ids of pages
//    < ceil(L_b / P) in [1, num_pages) (OutOfRange); columns >= row_len are poisoned with NaN;
//  - unchecked: negative lengths count as 0, lengths above W P are clamped, a req_slot outside
//    [0, R_slots) reads row 0, a page id outside [0, num_pages) reads page 0; columns >= row_len
//    are left untouched.
// Columns [0, row_len[r]) get kscale * sum_h w relu(q . k8), accumulated in double, rounded once.
// B_pad = 0 is a no-op (after the host and header checks).
Status paged_logits_ref(const PagedLogitsParams& p);

// CUDA implementation (sm_90a, params hold device pointers; launches on cuda::current_stream()).
// Host checks as validate() plus 16-byte aligned pool, q, w (InvalidArgument). The schedule header
// is checked on the device, always: a mismatch does no work and sets the device error word
// (FailedPrecondition). Checked mode additionally checks len_hash, row_len and page ids on the
// device and returns the error word's Status (synchronising); unchecked mode neutralises as the
// reference does and never synchronises. Columns >= row_len are left untouched.
Status paged_logits_cuda(const PagedLogitsParams& p);

// §3b tolerance of one element: 2^-8 * M[r, s], M = kscale * sum_h |w[h]| * sum_t |q[h,t] k8[t]|.
// q: [heads, 128] e4m3 codes of row r, w: [heads], k8: [128] e4m3 codes of the key.
float paged_logits_bound(const uint8_t* q, const float* w, int32_t heads, const uint8_t* k8,
                         float kscale);

// Fills bound [logits_rows, logits_ld] with 2^-8 M[r, s] for every defined column (s <
// row_len[r], neutralised as in unchecked mode) and 0 elsewhere, for GPU tests (within_bound).
// Runs validate() only; assumes in-contract data.
Status paged_logits_bounds(const PagedLogitsParams& p, float* bound);

}  // namespace dsa::kernels
