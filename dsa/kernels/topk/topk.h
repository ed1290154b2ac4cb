// Top-k with per-row lengths (SPEC.md §3e): for each row, the K best positions among the first
// len[r] logits under a total order (NaN below -inf, -0 == +0, ties to the lower position), written
// as plain positions, global cache slots (paged) or gathered-buffer rows (ragged), -1 padded to K.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/topk/topk_plan.h"

namespace dsa::kernels {

// How a selected position p of row r (output row o) becomes an idx entry.
enum class TopkVariant {
  kPlain,   // p
  kPaged,   // page_table[row_page[o]][p / P] * P + p % P  (global slot, §2.5)
  kRagged,  // p + offset[r]  (row of a gathered key buffer, §3g source 2)
};

inline constexpr int32_t kMinTopk = 64;
inline constexpr int32_t kTopkMultiple = 64;
// Floats one CTA of the one-pass CUDA path holds in shared memory at most (176 KB of the 227 KB
// a Hopper CTA may have; the rest is histograms and the candidate buffers).
inline constexpr int32_t kTopkMaxChunk = 45056;

struct TopkParams {
  const float* logits = nullptr;      // [R, ld] fp32; row r reads [col_base[r], +len[r])
  int32_t logits_ld = 0;              // ld: row stride in floats, ld % 4 == 0
  int32_t rows = 0;                   // R
  const int32_t* len = nullptr;       // [R] int32 visible length of each row (row_len, ke - ks)
  const int32_t* col_base = nullptr;  // [R] int32 first column of each row, or nullptr (= 0)
  int32_t k = 0;                      // K: 64 <= K <= 2048, K % 64 == 0
  TopkVariant variant = TopkVariant::kPlain;
  PageTable page_table;                  // kPaged only: [R_slots, W] page ids
  const int32_t* row_page = nullptr;     // kPaged only: [R_out] page-table row of each OUTPUT row
  int32_t page_size = kPageSize;         // kPaged only: P, must be 64
  const int32_t* offset = nullptr;       // kRagged only: [R] int32 added to every position (ks)
  const int32_t* out_row = nullptr;      // [R] int32 idx row receiving row r, -1 = not written;
                                         // nullptr = row r goes to idx row r
  int32_t out_rows = 0;                  // R_out: rows of idx (its capacity)
  int32_t* idx = nullptr;                // [R_out, K] int32 out: m selected entries, then -1
  const TopkPlanHeader* plan = nullptr;  // optional; validated when given, never needed
  // ---- CUDA only (the reference ignores these): launch constants, never derived from lengths.
  // One-pass path: a row is read from HBM once, into the shared memory of one CTA or of a cluster
  // of up to 8 CTAs, each holding a contiguous chunk of at most max_chunk floats. Taken whenever
  // 8 chunks cover a row of ld (ld + 3 <= 8 * max_chunk); max_chunk in [512, kTopkMaxChunk],
  // a multiple of 128.
  int32_t max_chunk = kTopkMaxChunk;
  // CTAs per row of the one-pass path: 0 = chosen from R, ld and the SM count (the fewest that
  // hold ld, more while the grid stays within half the SMs and each chunk keeps >= 8192 floats);
  // 1, 2, 4 or 8
  // = at least that many (never fewer than hold ld). A row that fits one chunk is selected by one
  // CTA whatever this is.
  int32_t cluster_size = 0;
  // Many wide rows (R >= stream_min_rows and ld >= 65536) take the streaming kernel too: one CTA
  // per row at two CTAs per SM overlaps one row's reads with another's selection, where one-pass
  // CTAs holding 16K+ floats fit one per SM. -1 = R above the SM count; INT32_MAX = never.
  int32_t stream_min_rows = -1;
  // Streaming path (rows wider than 8 chunks, ld + 3 > 8 * max_chunk): rows with len >= this are
  // selected by a cluster of 8 CTAs instead of one, re-reading the row from global memory; must
  // be >= 1.
  int32_t long_row_min_len = 65536;
  // Streaming path: clusters only when R <= this. With more rows one CTA per row already fills
  // the GPU (H200: 128 x 64K is 112.6 us on clusters, 61.7 us on one CTA per row). Must be >= 0.
  int32_t cluster_max_rows = 32;
};

// Host checks (InvalidArgument): R >= 0, K range and multiple of 64, ld >= 0 and ld % 4 == 0,
// logits 16-byte aligned (with ld % 4 == 0 every row is: the CUDA kernels bulk-copy rows),
// R_out >= 0 and R <= R_out without out_row, a known variant, pointers, and for kPaged a page
// table (data, W >= 1, R_slots >= 1, num_pages >= 1), row_page and P = 64; for kRagged offset;
// max_chunk in [512, kTopkMaxChunk] and a multiple of 128, cluster_size in {0, 1, 2, 4, 8},
// stream_min_rows >= -1,
// long_row_min_len >= 1, cluster_max_rows >= 0.
Status validate(const TopkParams& p);

// CPU reference. After validate(), a given plan header is checked (FailedPrecondition). Checked
// mode (OutOfRange, nothing written): len >= 0, col_base >= 0, col_base + len <= ld, out_row
// entries other than -1 in [0, R_out) and distinct; kPaged: row_page in [0, R_slots),
// ceil(len / P) <= W and every page id covering [0, len) in [1, num_pages); kRagged: offset >= 0
// and offset + len <= INT32_MAX. Unchecked: col_base clamped into [0, ld], len into
// [0, ld - col_base]; a row whose out_row is out of range is not written (of repeated out_rows the
// last row wins); kPaged: a bad row_page reads the reserved row 0, a page index >= W or a page id
// outside [0, num_pages) becomes page 0; kRagged: p + offset wraps modulo 2^32. Rows not written
// keep their idx contents.
Status topk_ref(const TopkParams& p);

// CUDA implementation (topk_cuda.cu): the same contract with every pointer (plan included) on the
// device, launched on cuda::current_stream(). Checked-mode data rules are verified on the device
// and returned through the device error word (the call then synchronises); unchecked mode never
// synchronises. Needs no scratch: long rows use thread-block clusters and distributed shared
// memory. Which kernel runs (a function of R and ld) decides the order inside idx[0..m).
Status topk_cuda(const TopkParams& p);

}  // namespace dsa::kernels
