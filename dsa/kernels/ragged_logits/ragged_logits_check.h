// `dsa check` entry for ragged MQA logits (SPEC.md §3d). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/ragged_logits/ragged_logits.h"

namespace dsa::kernels {

// Runs `op` (checked mode) on `tokens` query rows split over two requests of
// context_len gathered keys each (S = 2 context_len; row i of a request with m rows sees
// context_len - m + i + 1 keys from ks = cu_kv[b]), and compares with an independent
// integer-exact formulation; columns past each row must be NaN. The reference computes every
// column, about tokens x context_len x heads x 128 multiply-adds (tokens = 16, 64 heads, 4096
// keys: ~0.5 s on one core); the comparison covers every column of short rows and the first and
// last 64 plus every 13th column of rows longer than ~4M multiply-adds.
using RaggedLogitsFn = Status (*)(const RaggedLogitsParams&);

Status check_ragged_logits(RaggedLogitsFn op, int32_t tokens, int32_t heads, int32_t context_len,
                           uint64_t seed);

}  // namespace dsa::kernels
