#include "dsa/cuda/stream.h"

namespace dsa::cuda {
namespace {
thread_local cudaStream_t g_stream = nullptr;
}
cudaStream_t current_stream() { return g_stream; }
void set_current_stream(cudaStream_t stream) { g_stream = stream; }
}  // namespace dsa::cuda
