#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/pinned_copy.h"
#include "dsa/cuda/stream.h"

namespace dsa::cuda {

namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 132 * 4;

enum class Kind { kDevice, kPinnedHost, kOther };

bool kernel_copy_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DSA_KERNEL_COPY");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

Kind kind_of(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not an error of the stream: the copy engine takes it instead
    return Kind::kOther;
  }
  if (a.type == cudaMemoryTypeDevice) return Kind::kDevice;
  // Page-locked host memory is device-accessible at its own address under unified addressing;
  // anything else (a separate device alias) stays with the copy engine.
  if (a.type == cudaMemoryTypeHost && a.devicePointer == p) return Kind::kPinnedHost;
  return Kind::kOther;
}

// Each thread copies units i, i + stride, ... of T: the widest unit both addresses and the size
// are aligned to, so a 16-byte-aligned block moves in 16-byte accesses.
template <typename T>
__global__ void pinned_copy_kernel(const T* __restrict__ src, T* __restrict__ dst, size_t units) {
  pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  pdl_trigger();
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < units; i += stride) {
    dst[i] = src[i];
  }
}

template <typename T>
cudaError_t launch_copy(void* dst, const void* src, size_t bytes) {
  const size_t units = bytes / sizeof(T);
  const size_t blocks = std::clamp<size_t>((units + kThreads - 1) / kThreads, 1, kMaxBlocks);
  return launch(LaunchShape{dim3(unsigned(blocks)), dim3(kThreads), 0, current_stream()},
                pinned_copy_kernel<T>, static_cast<const T*>(src), static_cast<T*>(dst), units);
}

}  // namespace

bool pinned_copy_applies(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || bytes > kPinnedCopyMaxBytes || !kernel_copy_enabled()) return false;
  const Kind s = kind_of(src), d = kind_of(dst);
  return (s == Kind::kPinnedHost && d == Kind::kDevice) ||
         (s == Kind::kDevice && d == Kind::kPinnedHost);
}

Status pinned_copy_async(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ok_status();
  const uintptr_t align =
      reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes;
  cudaError_t err;
  if (align % 16 == 0) {
    err = launch_copy<uint4>(dst, src, bytes);
  } else if (align % 8 == 0) {
    err = launch_copy<uint2>(dst, src, bytes);
  } else if (align % 4 == 0) {
    err = launch_copy<uint32_t>(dst, src, bytes);
  } else {
    err = launch_copy<uint8_t>(dst, src, bytes);
  }
  DSA_CUDA_RETURN_IF_ERROR(err);
  DSA_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ok_status();
}

}  // namespace dsa::cuda
