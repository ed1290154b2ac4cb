#include "dsa/runtime/forward_batch.h"

#include <algorithm>

#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/metadata_schedule.h"

namespace dsa::runtime {

int32_t MetadataConfig::row_capacity() const {
  return std::max(max_requests * max_rows_per_request(), max_extend_rows);
}

int32_t MetadataConfig::request_capacity() const { return max_requests + 1; }

int32_t rows_per_request(const ForwardBatch& batch, const MetadataConfig& config) {
  if (batch.mode == ForwardMode::kIdle) return batch.idle_rows_per_request;
  return uniform_rows_per_request(batch.mode, config.num_draft_tokens);
}

ForwardMetadata::ForwardMetadata(const MetadataConfig& c) {
  const size_t rows = static_cast<size_t>(c.row_capacity());
  const size_t reqs = static_cast<size_t>(c.request_capacity());
  for (auto* v : {&row_len, &row_topk_len, &row_req, &row_page, &positions, &write_slot, &ks, &ke,
                  &sample_row}) {
    v->assign(rows, 0);
  }
  req_slot.assign(reqs, 0);
  req_kv_len.assign(reqs, 0);
  cu_q.assign(reqs + 1, 0);
  cu_kv.assign(reqs + 1, 0);
  pg_req_slot.assign(static_cast<size_t>(c.max_requests), 0);
  pg_row_len.assign(static_cast<size_t>(c.max_requests * c.max_rows_per_request()), 0);
  pg_row.assign(pg_row_len.size(), -1);
  schedule.assign(static_cast<size_t>(schedule_words(c)), 0);
}

}  // namespace dsa::runtime
