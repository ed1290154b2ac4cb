// `dsa check` entry for the 128-point Hadamard transform (SPEC.md §8.5). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/hadamard/hadamard.h"

namespace dsa::kernels {

using HadamardFn = Status (*)(const HadamardParams&);

// Runs `op` on `rows` random rows (row scales 2^-8..2^8, NaN-poisoned output) and compares every
// value with the explicit O(n^2) sum of the definition, in long double: at most 1 bf16 ulp.
// OK on pass; the first mismatch otherwise.
Status check_hadamard(HadamardFn op, int32_t rows, uint64_t seed);

}  // namespace dsa::kernels
