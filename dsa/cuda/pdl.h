// Programmatic dependent launch (PDL, Hopper): a kernel launched with the programmatic
// stream-serialisation attribute may start while the kernel before it in the stream (or before it
// in a captured graph: the edge becomes programmatic) is still running, so its launch latency and
// prologue overlap the predecessor's tail. At the decode shapes the engine runs, a forward is a
// chain of a few hundred short kernels and that latency is a large part of the forward
// (bench/RESULTS.md), which is why every dsa kernel takes part.
//
// The contract that makes it safe, for every kernel launched through cuda::launch:
//   * `pdl_wait()` is the kernel's first statement, before any global memory read or write and
//     before any early return. (One exception: a host-to-device copy kernel reads its page-locked
//     source, which the host filled, before it; cuda/pinned_copy.h.) griddepcontrol.wait returns
//     once the predecessor grid has completed and its writes are visible; since the predecessor
//     itself waited on its own predecessor before completing, completion is transitive down the
//     chain. A kernel that returned early without waiting would break that chain for its successor,
//     hence "before any return".
//   * `pdl_trigger()` follows it: it lets the successor be scheduled as soon as every CTA of this
//     grid has reached it (the successor's CTAs then sit in their own pdl_wait()). All of this
//     grid's CTAs are resident by then, so the successor cannot starve it.
// Non-kernel predecessors (copies, memsets) and kernels we do not build (cuBLASLt) keep full
// serialisation semantics; pdl_wait() waits for full completion whatever the predecessor did.
// DSA_PDL=0 in the environment turns the attribute off (every launch fully serialised), for
// bisecting; both instructions are then no-ops.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace dsa::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches carry the PDL attribute: on unless DSA_PDL=0 (read once per process).
bool pdl_enabled();

// A launch's shape. `cluster` > 1 (or `cluster_attribute_for_one`, for kernels that use cluster
// barriers with clusters of one) adds the cluster-dimension attribute along x.
struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t smem_bytes = 0;
  cudaStream_t stream = nullptr;
  unsigned cluster = 1;
  bool cluster_attribute_for_one = false;
};

// The cudaLaunchConfig_t of a shape, owning the attributes it points at (not copyable, so the
// pointer stays valid): PDL when enabled, the cluster dimension when asked.
struct LaunchConfig {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attrs[2] = {};

  explicit LaunchConfig(const LaunchShape& s);
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
};

// Launches `kernel(args...)` with `shape`; the kernel must follow the contract above. Returns the
// launch's error (configuration errors surface here, as from <<<...>>> plus cudaGetLastError).
template <typename... Params, typename... Args>
cudaError_t launch(const LaunchShape& shape, void (*kernel)(Params...), Args&&... args) {
  LaunchConfig lc(shape);
  return cudaLaunchKernelEx(&lc.config, kernel, static_cast<Args&&>(args)...);
}

}  // namespace dsa::cuda
