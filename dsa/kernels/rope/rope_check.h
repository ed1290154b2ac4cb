// `dsa check` entries for RoPE (SPEC.md §8.3). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/rope/rope.h"

namespace dsa::kernels {

using RopeFn = Status (*)(const RopeParams&);

// Builds the tables of `c` for [0, num_positions) with rope_table_ref and requires bit equality
// (class E) with an independent formulation (HF's extrapolation/interpolation mix, long-double
// cos/sin). OK on pass; the first mismatch otherwise.
Status check_rope_table(const RopeConfig& c, int32_t num_positions);

// Runs `op` in both styles on `tokens` random rows of `heads` strided heads (the rope dims sit
// after 16 other values, as q_pe does after q_nope) at random positions, and compares with an
// independent formulation in double (complex multiply for interleaved, HF's rotate_half for
// non-interleaved): within 1 bf16 ulp plus the fp32 rounding of the products. The values around
// the rope dims must stay untouched.
Status check_rope(RopeFn op, int32_t tokens, int32_t heads, uint64_t seed);

}  // namespace dsa::kernels
