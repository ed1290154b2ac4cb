// Fills backend memory with counter-based random values (core/random_fill.h) where it lives: a
// host loop for the CPU backend, a CUDA kernel (cuda/random_fill.cu) on the forward stream for
// CUDA, the same bytes either way. What --random-weights uses to make weights on the device.
#pragma once

#include <cstddef>

#include "dsa/core/random_fill.h"
#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"

namespace dsa::runtime {

// `count` elements of spec.kind at `dst` (backend memory of `backend`). CUDA: asynchronous;
// Unimplemented in a host-only build.
Status random_fill(kernels::Backend backend, void* dst, size_t count, const FillSpec& spec);

}  // namespace dsa::runtime
