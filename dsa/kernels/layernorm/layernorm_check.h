// `dsa check` entry for LayerNorm (SPEC.md §8.3). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/layernorm/layernorm.h"

namespace dsa::kernels {

using LayerNormFn = Status (*)(const LayerNormParams&);

// Runs `op` on `tokens` random rows of width `dim` with large, row-varying offsets (so a one-pass
// variance would cancel), strided input and NaN-poisoned output, and compares every value with an
// independent long-double formulation: at most 1 bf16 ulp. OK on pass; the first mismatch
// otherwise.
Status check_layernorm(LayerNormFn op, int32_t tokens, int32_t dim, uint64_t seed);

}  // namespace dsa::kernels
