// `dsa check` entry for the paged-logits schedule (SPEC.md §3c). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/logits_schedule/logits_schedule.h"

namespace dsa::kernels {

// Builds a schedule for `batch` requests of `n` verify-like rows (row j sees C + j + 1, C random
// below context_len; about a quarter of the requests padded with zero lengths) and G consumers,
// validates it, and checks that every consumer's walk visits exactly the splits an independent
// count-based assignment gives it. OK on pass; the first mismatch in the message otherwise.
using BuildLogitsScheduleFn = Status (*)(const LogitsScheduleParams&);

Status check_logits_schedule(BuildLogitsScheduleFn build, int32_t batch, int32_t n, int32_t G,
                             int32_t context_len, uint64_t seed);

}  // namespace dsa::kernels
