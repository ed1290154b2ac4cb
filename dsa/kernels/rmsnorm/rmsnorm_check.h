// `dsa check` entries for RMSNorm, the residual add and the two fused (SPEC.md §8.3, §8.6). No
// gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"

namespace dsa::kernels {

using RmsNormFn = Status (*)(const RmsNormParams&);
using RmsNormPairFn = Status (*)(const RmsNormParams&, const RmsNormParams&);
using ResidualAddFn = Status (*)(const ResidualAddParams&);
using AddRmsNormFn = Status (*)(const AddRmsNormParams&);

// Runs `op` on `tokens` random rows of width `dim` (row scales spread over 2^-6..2^6, strided
// input, NaN-poisoned output) and compares every value with an independent long-double
// formulation: at most 1 bf16 ulp. OK on pass; the first mismatch otherwise.
Status check_rmsnorm(RmsNormFn op, int32_t tokens, int32_t dim, uint64_t seed);

// The gathered norm (x_rows): `tokens` entries into `bound` random rows (stride dim + 8), repeats
// and -1 (skip_minus_one) among them, and in unchecked mode also entries outside [0, bound). Every
// y within 1 bf16 ulp of the long-double norm of its gathered row (zeros for a bad entry), the gap
// after each output row untouched, and with `with_copy` x_copy bit-equal to the gathered rows.
Status check_rmsnorm_gathered(RmsNormFn op, int32_t tokens, int32_t dim, int32_t bound,
                              bool with_copy, uint64_t seed);

// rmsnorm_pair: two gathered norms as check_rmsnorm_gathered builds them (the second over another
// source of 2 bound + 1 rows, with x_copy), each into its own output, in one call of `op`; each
// checked as check_rmsnorm_gathered checks it.
Status check_rmsnorm_pair(RmsNormPairFn op, int32_t tokens, int32_t dim, int32_t bound,
                          uint64_t seed);

// Runs `op` on random (h, x) pairs of mixed magnitudes and requires bit equality with the exact
// sum rounded to fp32 and then to bf16.
Status check_residual_add(ResidualAddFn op, int32_t tokens, int32_t dim, uint64_t seed);

// Runs `op` on random (h, add) rows (row scales 2^-6..2^6, add 2^-8..2^2 of its row's scale so the
// add often rounds; strided, NaN-poisoned output) and requires h bit-equal to the exact sum
// rounded to fp32 then bf16, y within 1 bf16 ulp of the long-double norm of that h, and the gap
// between output rows untouched.
Status check_add_rmsnorm(AddRmsNormFn op, int32_t tokens, int32_t dim, uint64_t seed);

}  // namespace dsa::kernels
