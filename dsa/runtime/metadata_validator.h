// The validator of SPEC.md §4.6: checks invariants 1–15 and 19 of built metadata, independently of
// the builder (it re-derives nothing with the builder's code). Run before every step in checked
// mode; a broken invariant is FailedPrecondition naming the invariant and the first offending
// index.
#pragma once

#include <optional>

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/runtime/forward_batch.h"
#include "dsa/runtime/forward_metadata.h"

namespace dsa::runtime {

// What the consumer expects this forward to be (inv. 14): in graph modes the graph's key.
struct ForwardKey {
  ModelKind model;
  ForwardMode mode;
  int32_t batch_pad;
  int32_t rows_per_request;
};

Status validate_forward_metadata(const ForwardMetadata& m, const MetadataConfig& config,
                                 const kernels::PageTable& page_table,
                                 std::optional<ForwardKey> expected = std::nullopt);

}  // namespace dsa::runtime
