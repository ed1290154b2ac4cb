// The paged-logits schedule of a forward (SPEC.md §3c, inv. 15): derived from the very length
// array the logits op reads, row_len with (B_pad, n) in uniform modes, pg_row_len with
// (B_pg, n_pg) for EXTEND's paged sub-batch.
#pragma once

#include "dsa/core/status.h"
#include "dsa/runtime/forward_batch.h"
#include "dsa/runtime/forward_metadata.h"

namespace dsa::runtime {

int32_t schedule_words(const MetadataConfig& config);

// The (length array, B, n) a forward's paged-logits launches use.
struct ScheduleLayout {
  const int32_t* row_len;
  int32_t batch;
  int32_t rows_per_request;
};
ScheduleLayout schedule_layout(const ForwardMetadata& m);

Status build_metadata_schedule(const MetadataConfig& config, ForwardMetadata& m);
Status validate_metadata_schedule(const MetadataConfig& config, const ForwardMetadata& m);

}  // namespace dsa::runtime
