// `dsa check` entry for the linear layers (SPEC.md §8.8). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/linear/linear.h"

namespace dsa::kernels {

using LinearFn = Status (*)(const LinearParams&);

// Runs `op` twice (bf16 and fp32 output) on random activations (per-token scales 2^-6..2^6) and a
// random weight (bf16, or e4m3 codes with non-power-of-two block scales when fp8_weight), with
// NaN-poisoned outputs, and compares with an independent formulation: transposed loops in long
// double, and for FP8 the block form of §8.8 (sum_k sx sw sum_j x8 w8) with the activation scale
// found by frexp. fp32 output within 2^-22 |ref| + 2^-40 M; bf16 output within 1 bf16 ulp.
// (Another backend is held to linear_tolerance instead; this check is for exact references.)
Status check_linear(LinearFn op, int32_t tokens, int32_t in_features, int32_t out_features,
                    bool fp8_weight, uint64_t seed);

}  // namespace dsa::kernels
