// `dsa check` entry for the MLP activation (SPEC.md §8.6). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/activation/activation.h"

namespace dsa::kernels {

using SwigluFn = Status (*)(const SwigluParams&);

// Runs `op` on `tokens` rows of `width` (gate scales spread over 2^-4..2^4, |g| <= 60, a few
// exact zeros, NaN-poisoned output), out of place and then in place (out == gate), and compares
// every value with an independent long-double formulation, u g sigmoid(g): at most 1 bf16 ulp from
// its correctly rounded value. OK on pass; the first mismatch otherwise.
Status check_swiglu(SwigluFn op, int32_t tokens, int32_t width, uint64_t seed);

}  // namespace dsa::kernels
