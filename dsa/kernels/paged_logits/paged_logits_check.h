// `dsa check` entry for paged MQA logits (SPEC.md §3b). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"
#include "dsa/kernels/paged_logits/paged_logits.h"

namespace dsa::kernels {

// Runs `op` (checked mode) on `batch` verify-like requests of n rows (row j sees
// C + j + 1 with C random below context_len, the first request at C = context_len - n so the full
// length is exercised; later requests padded with probability 1/4) over a scattered page table
// and compares with an independent integer-exact formulation that reads the pool bytes directly.
// Rows whose full check would cost more than ~4M multiply-adds are checked on a subset of columns
// (the first and last 64 and every 13th), which keeps V3.2 shapes (batch 2, n 4, 64 heads, 4096)
// to about a second; the reference itself always computes every column. Also checks that
// columns >= row_len are NaN.
using PagedLogitsFn = Status (*)(const PagedLogitsParams&);
using LogitsScheduleFn = Status (*)(const LogitsScheduleParams&);

// `op` and `build_schedule` are any backend's implementations.
Status check_paged_logits(PagedLogitsFn op, LogitsScheduleFn build_schedule, int32_t batch,
                          int32_t n, int32_t heads, int32_t context_len, uint64_t seed);

}  // namespace dsa::kernels
