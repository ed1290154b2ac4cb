// The CUDA backend's memory (built only with nvcc): cudaMalloc'd buffers, copies on the current
// stream.
#include "dsa/cuda/device_memory.h"
#include "dsa/cuda/pinned_copy.h"
#include "dsa/runtime/backend_memory.h"

namespace dsa::runtime {

namespace {

StatusOr<void*> device_alloc(size_t bytes) {
  DSA_ASSIGN_OR_RETURN(void* p, cuda::device_malloc(bytes));
  if (p) DSA_RETURN_IF_ERROR(cuda::memset_async(p, 0, bytes));
  return p;
}
Status device_zero(void* dst, size_t bytes) { return cuda::memset_async(dst, 0, bytes); }
Status device_fill(void* dst, uint8_t byte, size_t bytes) {
  return cuda::memset_async(dst, byte, bytes);
}

}  // namespace

const MemoryOps& cuda_memory_ops() {
  static const MemoryOps table{kernels::Backend::kCuda,
                               device_alloc,
                               cuda::device_free,
                               cuda::memcpy_async,
                               cuda::memcpy_2d_async,
                               cuda::copy_word_runs_async,
                               device_zero,
                               device_fill,
                               cuda::synchronize_stream,
                               cuda::pinned_host_malloc,
                               cuda::pinned_host_free,
                               cuda::free_device_memory,
                               cuda::create_marker,
                               cuda::destroy_marker,
                               cuda::record_marker,
                               cuda::wait_marker,
                               cuda::create_timing_marker,
                               cuda::destroy_marker,
                               cuda::record_marker,
                               cuda::elapsed_ms};
  return table;
}

}  // namespace dsa::runtime
