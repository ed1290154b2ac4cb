// The per-forward metadata every op reads (SPEC.md §4.4), in buffers allocated once at capacity:
// a build writes prefixes in place and never reallocates, so addresses are stable for graphs.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/runtime/forward_batch.h"

namespace dsa::runtime {

inline constexpr uint32_t kMetadataMagic = 0x4D455441;  // "META"

struct MetadataHeader {
  uint32_t magic = 0;
  ModelKind model = ModelKind::kTarget;
  ForwardMode mode = ForwardMode::kDecode;
  int32_t num_requests = 0;        // B
  int32_t batch_pad = 0;           // B_pad
  int32_t rows_per_request = 0;    // n (uniform modes; 0 in EXTEND)
  int32_t rows = 0;                // real rows
  int32_t rows_pad = 0;            // rows including padding
  int32_t paged_requests = 0;      // B_pg: EXTEND's paged sub-batch
  int32_t paged_rows_per_req = 0;  // n_pg
  int32_t topk = 0;                // K
  int32_t page_table_width = 0;    // W
  int32_t num_samples = 0;         // valid prefix of sample_row
  int32_t schedule_batch = 0;      // (B, n) the schedule was built over: (B_pad, n) or (B_pg, n_pg)
  int32_t schedule_rows_per_req = 0;
  int64_t forward_id = 0;

  bool operator==(const MetadataHeader&) const = default;
};

struct ForwardMetadata {
  explicit ForwardMetadata(const MetadataConfig& config);

  MetadataHeader header;
  // Row buffers [rows_cap].
  std::vector<int32_t> row_len, row_topk_len, row_req, row_page, positions, write_slot, ks, ke;
  std::vector<int32_t> sample_row;
  // Request buffers [B_max + 1] and prefix sums [B_max + 2].
  std::vector<int32_t> req_slot, req_kv_len, cu_q, cu_kv;
  // EXTEND's paged sub-batch: [B_max] and [B_max (d + 1)].
  std::vector<int32_t> pg_req_slot, pg_row_len, pg_row;
  // The paged-logits schedule over row_len (uniform) or pg_row_len (EXTEND), SPEC.md §3c.
  std::vector<int32_t> schedule;
};

}  // namespace dsa::runtime
