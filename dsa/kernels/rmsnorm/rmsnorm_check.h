// `dsa check` entries for RMSNorm and the residual add (SPEC.md §8.3, §8.6). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"

namespace dsa::kernels {

using RmsNormFn = Status (*)(const RmsNormParams&);
using ResidualAddFn = Status (*)(const ResidualAddParams&);

// Runs `op` on `tokens` random rows of width `dim` (row scales spread over 2^-6..2^6, strided
// input, NaN-poisoned output) and compares every value with an independent long-double
// formulation: at most 1 bf16 ulp. OK on pass; the first mismatch otherwise.
Status check_rmsnorm(RmsNormFn op, int32_t tokens, int32_t dim, uint64_t seed);

// Runs `op` on random (h, x) pairs of mixed magnitudes and requires bit equality with the exact
// sum rounded to fp32 and then to bf16.
Status check_residual_add(ResidualAddFn op, int32_t tokens, int32_t dim, uint64_t seed);

}  // namespace dsa::kernels
