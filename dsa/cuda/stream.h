// The stream CUDA ops launch on. The op table's functions take only params structs, so the stream
// is process state set by the runtime (and by tests); default: the legacy default stream.
#pragma once

#include <cuda_runtime.h>

namespace dsa::cuda {
cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);
}  // namespace dsa::cuda
