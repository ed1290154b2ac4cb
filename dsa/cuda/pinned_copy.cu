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

// A grid-stride launch over `units` items: one thread each, at most kMaxBlocks blocks.
LaunchShape copy_shape(size_t units) {
  const size_t blocks = std::clamp<size_t>((units + kThreads - 1) / kThreads, 1, kMaxBlocks);
  return LaunchShape{dim3(unsigned(blocks)), dim3(kThreads), 0, current_stream()};
}

bool kernel_copy_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DSA_KERNEL_COPY");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

// DSA_COPY_PREFETCH=0: host-to-device copies read their source after the wait like any other
// kernel (for measuring the early read against it).
bool prefetch_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DSA_COPY_PREFETCH");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

// The kernel form for `direction`: the early host read where it applies.
bool reads_host_early(PinnedCopy direction) {
  return direction == PinnedCopy::kToDevice && prefetch_enabled();
}

Kind kind_of(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not an error of the stream: the copy engine takes it instead
    return Kind::kOther;
  }
  if (a.type == cudaMemoryTypeDevice) {
    // Another GPU's memory stays with the copy engine: this device's kernel may not reach it.
    int current = -1;
    return cudaGetDevice(&current) == cudaSuccess && current == a.device ? Kind::kDevice
                                                                         : Kind::kOther;
  }
  // Page-locked host memory is device-accessible at its own address under unified addressing;
  // anything else (a separate device alias) stays with the copy engine.
  if (a.type == cudaMemoryTypeHost && a.devicePointer == p) return Kind::kPinnedHost;
  return Kind::kOther;
}

// Each thread copies units i, i + stride, ... of T: the widest unit both addresses and the size
// are aligned to, so a 16-byte-aligned block moves in 16-byte accesses. kFromHost: the thread's
// first unit is read before the wait (pinned_copy.h), over PCIe while the kernel ahead runs.
template <typename T, bool kFromHost>
__global__ void pinned_copy_kernel(const T* __restrict__ src, T* __restrict__ dst, size_t units) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  T first{};
  if constexpr (kFromHost) {
    if (i < units) first = src[i];
  }
  pdl_wait();  // first but for the host read above: the PDL contract (cuda/pdl.h)
  pdl_trigger();
  if constexpr (kFromHost) {
    if (i < units) {
      dst[i] = first;
      i += stride;
    }
  }
  for (; i < units; i += stride) dst[i] = src[i];
}

template <typename T>
cudaError_t launch_copy(void* dst, const void* src, size_t bytes, PinnedCopy direction) {
  const size_t units = bytes / sizeof(T);
  const auto kernel =
      reads_host_early(direction) ? pinned_copy_kernel<T, true> : pinned_copy_kernel<T, false>;
  return launch(copy_shape(units), kernel, static_cast<const T*>(src), static_cast<T*>(dst), units);
}

// The runs of one launch: where each starts and, as a prefix sum, where it ends in the flattened
// index space the threads stride over.
struct Runs {
  uint32_t offset[kMaxWordRuns];
  uint32_t end[kMaxWordRuns];
  uint32_t count;
};

// Flattened index i of `runs`: the word offset it copies. k, the run of the thread's previous
// index, only moves forward.
__device__ __forceinline__ uint32_t run_word(const Runs& runs, uint32_t i, uint32_t& k) {
  while (i >= runs.end[k]) ++k;
  return runs.offset[k] + (i - (k ? runs.end[k - 1] : 0));
}

// kFromHost as pinned_copy_kernel's.
template <bool kFromHost>
__global__ void copy_word_runs_kernel(const int32_t* __restrict__ src, int32_t* __restrict__ dst,
                                      const Runs runs) {
  const uint32_t total = runs.count ? runs.end[runs.count - 1] : 0;
  const uint32_t stride = gridDim.x * blockDim.x;
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x, k = 0;
  int32_t first = 0;
  uint32_t first_at = 0;
  if constexpr (kFromHost) {
    if (i < total) {
      first_at = run_word(runs, i, k);
      first = src[first_at];
    }
  }
  pdl_wait();  // first but for the host read above: the PDL contract (cuda/pdl.h)
  pdl_trigger();
  if constexpr (kFromHost) {
    if (i < total) {
      dst[first_at] = first;
      i += stride;
    }
  }
  for (; i < total; i += stride) {
    const uint32_t at = run_word(runs, i, k);
    dst[at] = src[at];
  }
}

}  // namespace

Status copy_word_runs_async(int32_t* dst, const int32_t* src, const WordRun* runs, size_t count) {
  size_t words = 0;
  for (size_t i = 0; i < count; ++i) words += runs[i].words;
  if (words == 0) return ok_status();
  const PinnedCopy direction = pinned_copy_direction(dst, src, words * sizeof(int32_t));
  if (direction == PinnedCopy::kCopyEngine) {
    // The copy engine: one copy of the span from the first run to the end of the last (the words
    // between them are copied too, as equal as the source holds them), not one per run.
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t i = 0; i < count; ++i) {
      if (runs[i].words == 0) continue;
      lo = std::min<size_t>(lo, runs[i].offset);
      hi = std::max<size_t>(hi, size_t{runs[i].offset} + runs[i].words);
    }
    DSA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst + lo, src + lo, (hi - lo) * sizeof(int32_t),
                                             cudaMemcpyDefault, current_stream()));
    return ok_status();
  }
  for (size_t first = 0; first < count; first += kMaxWordRuns) {
    Runs r{};
    uint32_t total = 0;
    for (size_t i = first; i < std::min(count, first + kMaxWordRuns); ++i) {
      if (runs[i].words == 0) continue;
      r.offset[r.count] = runs[i].offset;
      total += runs[i].words;
      r.end[r.count++] = total;
    }
    if (total == 0) continue;
    const auto kernel =
        reads_host_early(direction) ? copy_word_runs_kernel<true> : copy_word_runs_kernel<false>;
    DSA_CUDA_RETURN_IF_ERROR(launch(copy_shape(total), kernel, src, dst, r));
  }
  return ok_status();
}

PinnedCopy pinned_copy_direction(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || bytes > kPinnedCopyMaxBytes || !kernel_copy_enabled()) {
    return PinnedCopy::kCopyEngine;
  }
  const Kind s = kind_of(src), d = kind_of(dst);
  if (s == Kind::kPinnedHost && d == Kind::kDevice) return PinnedCopy::kToDevice;
  if (s == Kind::kDevice && d == Kind::kPinnedHost) return PinnedCopy::kToHost;
  return PinnedCopy::kCopyEngine;
}

Status pinned_copy_async(void* dst, const void* src, size_t bytes, PinnedCopy direction) {
  if (direction == PinnedCopy::kCopyEngine) {
    return invalid_argument(
        "pinned_copy_async: direction kCopyEngine: pinned_copy_direction found no kernel copy "
        "for these pointers (memcpy_async takes the copy engine then)");
  }
  if (bytes == 0) return ok_status();
  const uintptr_t align =
      reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes;
  cudaError_t err;
  if (align % 16 == 0) {
    err = launch_copy<uint4>(dst, src, bytes, direction);
  } else if (align % 8 == 0) {
    err = launch_copy<uint2>(dst, src, bytes, direction);
  } else if (align % 4 == 0) {
    err = launch_copy<uint32_t>(dst, src, bytes, direction);
  } else {
    err = launch_copy<uint8_t>(dst, src, bytes, direction);
  }
  DSA_CUDA_RETURN_IF_ERROR(err);  // cudaLaunchKernelEx returns the launch's own error
  return ok_status();
}

}  // namespace dsa::cuda
