// The ONE metadata builder (SPEC.md §4): every per-row and per-request array the ops read, for
// every mode, with bucket / DP / idle padding, written in place into fixed-capacity buffers.
#pragma once

#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/runtime/forward_batch.h"
#include "dsa/runtime/forward_metadata.h"

namespace dsa::runtime {

// Builds `out` for `batch`. Reads inputs only for real requests. Errors: InvalidArgument for a
// malformed request (cached_len < 0, new_len < 1, new_len != n in a uniform mode, a bad or
// repeated req_slot, B_pad < B), ResourceExhausted for kv_len > W P or a capacity overrun,
// FailedPrecondition for a position whose page was never reserved. In checked mode the build is
// then validated (validate_forward_metadata). On error `out` is unspecified.
Status build_forward_metadata(const ForwardBatch& batch, const MetadataConfig& config,
                              const kernels::PageTable& page_table, ForwardMetadata& out);

}  // namespace dsa::runtime
