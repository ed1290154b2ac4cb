// Fused indexer selection for decode (SPEC.md §3b then §3e): the paged MQA logits of every row of
// B_pad requests of n rows, and of each row the K best positions as global cache slots, without
// the logits ever reaching memory. Exactly paged_logits followed by topk (variant kPaged, row r's
// length row_len[r], its page-table row req_slot[r / n]): the same index sets.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

struct PagedLogitsTopkParams {
  // The paged-logits problem, as paged_logits takes it (no schedule: the fused kernel serves one
  // request per thread-block cluster).
  const uint8_t* q = nullptr;         // [B_pad * n, H_i, D_i] e4m3 codes, row r = b * n + j
  const float* w = nullptr;           // [B_pad * n, H_i] fp32 head weights, q scale folded in
  const int32_t* row_len = nullptr;   // [B_pad * n] int32 visible length of each row
  const int32_t* req_slot = nullptr;  // [B_pad] int32 page-table row of request b (0 = padded)
  PageTable page_table;               // [R_slots, W] int32 page ids
  IndexerPool pool;                   // one layer's indexer keys (§2.2), read only
  int32_t batch_pad = 0;              // B_pad
  int32_t rows_per_request = 1;       // n, 1..8
  int32_t num_heads = 64;             // H_i in {16, 32, 64}; D_i = 128
  // The selection.
  int32_t k = 0;           // K: 64 <= K <= 2048, K % 64 == 0
  int32_t* idx = nullptr;  // [B_pad * n, K] int32 out: min(K, len) slots, then -1
};

// Host checks (InvalidArgument): those of paged_logits (H_i, D_i = 128, P = 64, page stride, n,
// B_pad, W, num_pages) and of topk (K), and the pointers.
Status validate(const PagedLogitsTopkParams& p);

// CPU reference: paged_logits_ref into a scratch row block (with a schedule it builds itself),
// then topk_ref. Checked mode: paged_logits' data rules (row_len in [0, W P]; for a request with
// L_b > 0, req_slot in [0, R_slots) and its page ids in [1, num_pages)): OutOfRange, nothing
// written. Unchecked: neutralised as paged_logits and topk neutralise them.
Status paged_logits_topk_ref(const PagedLogitsTopkParams& p);

// Whether the fused CUDA kernel takes this shape: one cluster of at most 8 CTAs per request holds
// all n rows' logits of W P keys in shared memory (n W P <= 8 x about 36K floats at n = 1).
// False: callers run paged_logits_cuda + topk_cuda (the CUDA op returns ResourceExhausted).
bool paged_logits_topk_fits(int32_t rows_per_request, int32_t num_heads, int32_t width);

// CUDA implementation (sm_90a, device pointers, cuda::current_stream()). Host checks as
// validate() plus 16-byte aligned pool, q, w; ResourceExhausted when the shape does not fit.
// Checked mode checks the data rules on the device and returns the error word's Status
// (synchronising); unchecked mode never synchronises. No scratch, no allocation: graph-safe.
Status paged_logits_topk_cuda(const PagedLogitsTopkParams& p);

}  // namespace dsa::kernels
