#include "dsa/runtime/backend_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dsa::runtime {

namespace {

constexpr size_t kAlign = 256;

// From this size a buffer is aligned to 2 MiB and asked for transparent huge pages (THP is often
// in `madvise` mode): the weights of a streamed checkpoint are GBs of such buffers, and with 4 KiB
// pages faulting them in (one fault per page) cost more than copying the data. Below it, the
// rounding to a huge page would waste more than a quarter of the buffer.
constexpr size_t kHugePage = size_t(2) << 20, kHugeFrom = 4 * kHugePage;

StatusOr<void*> host_alloc(size_t bytes) {
  const bool huge = bytes >= kHugeFrom;
  const size_t align = huge ? kHugePage : kAlign;
  const size_t rounded = (bytes + align - 1) / align * align;
  if (rounded == 0) return static_cast<void*>(nullptr);
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) return resource_exhausted("host allocation failed");
  if (huge) ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
  std::memset(p, 0, rounded);
  return p;
}
void host_release(void* p) { std::free(p); }
Status host_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
  return ok_status();
}
Status host_copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                    size_t height) {
  for (size_t r = 0; r < height; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                static_cast<const char*>(src) + r * src_pitch, width);
  }
  return ok_status();
}
Status host_copy_runs(int32_t* dst, const int32_t* src, const WordRun* runs, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (runs[i].words) {
      std::memmove(dst + runs[i].offset, src + runs[i].offset, runs[i].words * sizeof(int32_t));
    }
  }
  return ok_status();
}
Status host_zero(void* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
  return ok_status();
}
Status host_fill(void* dst, uint8_t byte, size_t bytes) {
  if (bytes) std::memset(dst, byte, bytes);
  return ok_status();
}
Status host_sync() { return ok_status(); }
// Host ops have completed when they return: a marker is a token, recording and waiting no-ops.
int host_marker_token = 0;
StatusOr<void*> host_create_marker() { return static_cast<void*>(&host_marker_token); }
void host_destroy_marker(void*) {}
Status host_marker_op(void*) { return ok_status(); }
// A timing marker on the host: the clock when it was recorded.
using HostClock = std::chrono::steady_clock;
StatusOr<void*> host_create_timing_marker() {
  return static_cast<void*>(new HostClock::time_point);
}
void host_destroy_timing_marker(void* m) { delete static_cast<HostClock::time_point*>(m); }
Status host_record_timing_marker(void* m) {
  *static_cast<HostClock::time_point*>(m) = HostClock::now();
  return ok_status();
}
StatusOr<double> host_elapsed_ms(void* from, void* to) {
  return std::chrono::duration<double, std::milli>(*static_cast<HostClock::time_point*>(to) -
                                                   *static_cast<HostClock::time_point*>(from))
      .count();
}

// cgroup v2's memory.max - memory.current for this process's group (containers), 0 = no limit.
size_t cgroup_headroom() {
  unsigned long long max = 0, current = 0;
  std::FILE* f = std::fopen("/sys/fs/cgroup/memory.max", "r");
  if (f == nullptr) return 0;
  const bool limited = std::fscanf(f, "%llu", &max) == 1;  // "max" (no limit) does not parse
  std::fclose(f);
  if (!limited) return 0;
  if (std::FILE* c = std::fopen("/sys/fs/cgroup/memory.current", "r")) {
    if (std::fscanf(c, "%llu", &current) != 1) current = 0;
    std::fclose(c);
  }
  return max > current ? size_t(max - current) : 1;
}

StatusOr<size_t> host_memavailable() {
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f)) {
      if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
        found = true;
        break;
      }
    }
    std::fclose(f);
    if (found) return size_t(kib) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return unimplemented("host memory: cannot read the available size");
  return size_t(pages) * size_t(page);
}

// /proc/meminfo's MemAvailable (Linux 3.14+: memory obtainable without swapping; else the free
// physical pages), capped by the cgroup's headroom.
StatusOr<size_t> host_available() {
  DSA_ASSIGN_OR_RETURN(size_t available, host_memavailable());
  const size_t cgroup = cgroup_headroom();
  return cgroup > 0 ? std::min(available, cgroup) : available;
}

#if !defined(DSA_HAVE_CUDA)
Status no_cuda() { return unimplemented("cuda memory: not built (this build has no nvcc)"); }
#endif

}  // namespace

#if defined(DSA_HAVE_CUDA)
const MemoryOps& cuda_memory_ops();  // backend_memory_cuda.cc
#endif

const MemoryOps& memory_ops(kernels::Backend backend) {
  static const MemoryOps host{kernels::Backend::kCpu,
                              host_alloc,
                              host_release,
                              host_copy,
                              host_copy_2d,
                              host_copy_runs,
                              host_zero,
                              host_fill,
                              host_sync,
                              host_alloc,
                              host_release,
                              host_available,
                              host_create_marker,
                              host_destroy_marker,
                              host_marker_op,
                              host_marker_op,
                              host_create_timing_marker,
                              host_destroy_timing_marker,
                              host_record_timing_marker,
                              host_elapsed_ms};
  if (backend == kernels::Backend::kCpu) return host;
#if defined(DSA_HAVE_CUDA)
  return cuda_memory_ops();
#else
  static const MemoryOps none{
      kernels::Backend::kCuda,
      [](size_t) -> StatusOr<void*> { return no_cuda(); },
      [](void*) {},
      [](void*, const void*, size_t) { return no_cuda(); },
      [](void*, size_t, const void*, size_t, size_t, size_t) { return no_cuda(); },
      [](int32_t*, const int32_t*, const WordRun*, size_t) { return no_cuda(); },
      [](void*, size_t) { return no_cuda(); },
      [](void*, uint8_t, size_t) { return no_cuda(); },
      [] { return no_cuda(); },
      [](size_t) -> StatusOr<void*> { return no_cuda(); },
      [](void*) {},
      []() -> StatusOr<size_t> { return no_cuda(); },
      []() -> StatusOr<void*> { return no_cuda(); },
      [](void*) {},
      [](void*) { return no_cuda(); },
      [](void*) { return no_cuda(); },
      []() -> StatusOr<void*> { return no_cuda(); },
      [](void*) {},
      [](void*) { return no_cuda(); },
      [](void*, void*) -> StatusOr<double> { return no_cuda(); }};
  return none;
#endif
}

}  // namespace dsa::runtime
