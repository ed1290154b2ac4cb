// `dsa check` entry for the attention step: one step of `mode` through `ops` on a small world,
// with its metadata validated (SPEC.md §4.6) and its rows compared with an independent run of the
// same tokens: sequential DECODE steps for TARGET_VERIFY, DRAFT_EXTEND and EXTEND (paged and
// ragged requests), an unpadded run for DECODE under bucket padding, untouched caches and inert
// outputs for IDLE.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"
#include "dsa/runtime/forward_mode.h"

namespace dsa::runtime {

Status check_attention_step(const kernels::OpTable& ops, ForwardMode mode, uint64_t seed);

}  // namespace dsa::runtime
