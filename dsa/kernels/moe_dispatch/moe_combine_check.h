// `dsa check` entry for the MoE combine (SPEC.md §8.6). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/moe_dispatch/moe_combine.h"

namespace dsa::kernels {

using MoeCombineFn = Status (*)(const MoeCombineParams&);

// Runs `op` as the MoE does, with and without a shared expert: expert ids from random_expert_ids
// (every 5th row padded), routing weights in [0, 2.5), routed rows of the slots without an expert
// NaN (never computed, so never to be read), rows whose first two experts cancel exactly (so a
// different summation order shows), NaN-poisoned y. Compares bit for bit with an independent
// formulation: the same fp32 operations per element (their order is the §8.6 contract), taken a
// whole expert row at a time into a row accumulator. OK on pass; the first mismatch otherwise.
Status check_moe_combine(MoeCombineFn op, int32_t tokens, int32_t k, int32_t dim, uint64_t seed);

}  // namespace dsa::kernels
