// What the metadata builder reads (SPEC.md §4.2): per real request its page-table row, cached and
// new lengths and which rows are sampled; per forward the model, mode, n, d and padding; per
// process the capacities.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/runtime/forward_mode.h"

namespace dsa::runtime {

struct RequestInput {
  int32_t req_slot = 0;    // page-table row, in [1, R_slots)
  int32_t cached_len = 0;  // tokens in the cache before the forward
  int32_t new_len = 0;     // query rows this forward adds (= n in uniform modes)
  // Rows [sample_first, sample_first + sample_count) reach the LM head (§6.7). Defaults by mode:
  // DECODE its row, TARGET_VERIFY every row; DRAFT_EXTEND row a_b (sample_first = a_b, or -1 when
  // the commit kernel writes it later); EXTEND as the caller says (last row of a final chunk,
  // every row of a carried verify request, nothing for other chunks).
  int32_t sample_first = 0;
  int32_t sample_count = -1;  // -1 = the mode's default
};

struct ForwardBatch {
  ModelKind model = ModelKind::kTarget;
  ForwardMode mode = ForwardMode::kDecode;
  // IDLE only: the uniform row count of the step it stands in for (1 for decode, d + 1 else).
  int32_t idle_rows_per_request = 1;
  // Requests after padding: the CUDA-graph bucket or the DP-agreed count; 0 = no padding (B).
  int32_t batch_pad = 0;
  // EXTEND only: the DP-agreed row count; 0 = no padding (rows).
  int32_t rows_pad = 0;
  int64_t forward_id = 0;
  std::vector<RequestInput> requests;  // the B real requests, in order
};

// n_max = 8 query rows per request (SPEC.md §1.1), so at most 7 draft tokens: the one limit every
// layer (options, the command line) checks d against.
inline constexpr int32_t kMaxRowsPerRequest = 8;
inline constexpr int32_t kMaxDraftTokens = kMaxRowsPerRequest - 1;

// Fixed for the process; every metadata buffer is allocated once from these (SPEC.md §1.1).
struct MetadataConfig {
  int32_t num_draft_tokens = 0;  // d: n = d + 1 in verify and draft-extend
  int32_t topk = 2048;           // K
  int32_t page_table_width = 0;  // W, in pages
  int32_t num_consumers = 132;   // G of the paged-logits schedule
  int32_t max_requests = 0;      // B_max
  int32_t max_extend_rows = 0;   // T_ext
  int32_t max_extend_kv = 0;     // T_ext_kv: gathered keys per EXTEND forward
  int32_t num_rows = 0;          // R_slots: page-table rows
  int32_t num_pages = 0;         // pages per pool

  int32_t max_rows_per_request() const { return num_draft_tokens + 1; }
  int32_t row_capacity() const;      // rows_cap = max(B_max (d + 1), T_ext)
  int32_t request_capacity() const;  // B_max + 1 (EXTEND's padded request)
};

// rows per request of a uniform forward (DECODE 1, verify / draft-extend d + 1, IDLE the step's).
int32_t rows_per_request(const ForwardBatch& batch, const MetadataConfig& config);

}  // namespace dsa::runtime
