// The CUDA side of core/random_fill.h: fills `count` elements of device memory with a FillSpec on
// cuda::current_stream() (asynchronous; no host copy). No CUDA types in this header.
#pragma once

#include <cstddef>

#include "dsa/core/random_fill.h"
#include "dsa/core/status.h"

namespace dsa::cuda {

// InvalidArgument for a null dst with count > 0; the launch error otherwise.
Status random_fill_async(void* dst, size_t count, const FillSpec& spec);

}  // namespace dsa::cuda
