#include "dsa/cuda/device_memory.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <atomic>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/graph.h"
#include "dsa/cuda/pinned_copy.h"
#include "dsa/cuda/stream.h"

namespace dsa::cuda {

namespace {
std::atomic<uint64_t> g_allocations{0};
}

StatusOr<void*> device_malloc(size_t bytes) {
  // The allocator is locked while capturing (SPEC.md §5): an address baked into a graph must
  // outlive every replay, so nothing a graph uses may be allocated inside it.
  if (stream_capturing()) {
    return failed_precondition(fmt::format(
        "device allocation of {} bytes during CUDA graph capture: buffers a graph uses are "
        "allocated before capture",
        bytes));
  }
  void* p = nullptr;
  if (bytes) DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return p;
}

uint64_t device_allocation_count() { return g_allocations.load(std::memory_order_relaxed); }

StatusOr<void*> pinned_host_malloc(size_t bytes) {
  if (stream_capturing()) {
    return failed_precondition("pinned host allocation during CUDA graph capture");
  }
  void* p = nullptr;
  if (bytes) DSA_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, bytes));
  return p;
}

void pinned_host_free(void* p) {
  if (p) cudaFreeHost(p);
}

void device_free(void* p) {
  if (p) cudaFree(p);
}

Status memcpy_async(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ok_status();
  // Between device and page-locked host memory a small copy is a kernel (pinned_copy.h: no idle
  // gap around it in a chain of PDL launches).
  const PinnedCopy direction = pinned_copy_direction(dst, src, bytes);
  if (direction != PinnedCopy::kCopyEngine) return pinned_copy_async(dst, src, bytes, direction);
  DSA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, current_stream()));
  return ok_status();
}

Status memcpy_2d_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                       size_t height) {
  if (width == 0 || height == 0) return ok_status();
  DSA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                             cudaMemcpyDefault, current_stream()));
  return ok_status();
}

Status memset_async(void* dst, int byte, size_t bytes) {
  if (bytes == 0) return ok_status();
  DSA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, byte, bytes, current_stream()));
  return ok_status();
}

StatusOr<size_t> free_device_memory() {
  size_t free_bytes = 0, total_bytes = 0;
  DSA_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

Status synchronize_stream() {
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(current_stream()));
  return ok_status();
}

StatusOr<void*> create_marker() {
  cudaEvent_t e = nullptr;
  DSA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return static_cast<void*>(e);
}

void destroy_marker(void* marker) {
  if (marker != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(marker));
}

StatusOr<void*> create_timing_marker() {
  cudaEvent_t e = nullptr;
  DSA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  return static_cast<void*>(e);
}

StatusOr<double> elapsed_ms(void* from, void* to) {
  DSA_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(to)));
  float ms = 0;
  DSA_CUDA_RETURN_IF_ERROR(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)));
  return double(ms);
}

Status record_marker(void* marker) {
  DSA_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(marker), current_stream()));
  return ok_status();
}

Status wait_marker(void* marker) {
  DSA_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(marker)));
  return ok_status();
}

}  // namespace dsa::cuda
