// `dsa check` entry for the strided-batched linear (batched_linear.h). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/batched_linear/batched_linear.h"

namespace dsa::kernels {

using BatchedLinearFn = Status (*)(const BatchedLinearParams&);

// Runs `op` on random activations (per-token scales 2^-6..2^6) and random weights in the absorbed
// MLA's layouts: x as [T, B, in + 3] (each head's slice padded, so x_ld and the batch stride are
// not the width) and y as [T, B, out + 5], whose padding is NaN-poisoned and must stay so. The
// expected outputs are an independent formulation (transposed loops in long double); each output
// within 1 bf16 ulp of its correct rounding.
Status check_batched_linear(BatchedLinearFn op, int32_t batch, int32_t tokens, int32_t in_features,
                            int32_t out_features, uint64_t seed);

}  // namespace dsa::kernels
