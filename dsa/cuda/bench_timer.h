// Timing for CUDA benchmarks (ARCHITECTURE.md §7): CUDA events around each launch after warm-up,
// the median over many runs. Benchmarks print time and the fraction of the measured H200 ceiling.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <vector>

#include "dsa/cuda/cuda_check.h"

namespace dsa::cuda {

// Measured on the project's H200 (SPEC.md §10).
inline constexpr double kH200Bandwidth = 4.28e12;  // bytes/s, device-to-device copy
inline constexpr double kH200Bf16Flops = 805e12;   // dense bf16 MMA
inline constexpr double kH200Fp8Flops = 1500e12;   // dense fp8 MMA
inline constexpr int kH200Sms = 132;

// Median microseconds of `launch` (which enqueues work on `stream`) over `iters` runs.
inline StatusOr<double> median_us(const std::function<Status()>& launch, cudaStream_t stream,
                                  int warmup = 5, int iters = 50) {
  for (int i = 0; i < warmup; ++i) DSA_RETURN_IF_ERROR(launch());
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  DSA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&a));
  DSA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    DSA_CUDA_RETURN_IF_ERROR(cudaEventRecord(a, stream));
    DSA_RETURN_IF_ERROR(launch());
    DSA_CUDA_RETURN_IF_ERROR(cudaEventRecord(b, stream));
    DSA_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(b));
    float t = 0;
    DSA_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::nth_element(ms.begin(), ms.begin() + long(ms.size() / 2), ms.end());
  return double(ms[ms.size() / 2]) * 1000.0;
}

// One line of a memory-bound benchmark: what ran (op and shape), the median time, the bytes
// moved, and the achieved bandwidth as TB/s and as a fraction of the measured H200 ceiling.
inline void print_bandwidth(const char* what, double us, double bytes) {
  const double bytes_per_s = bytes / (us * 1e-6);
  std::printf("%-40s %9.2f us %12.0f B %7.3f TB/s %5.1f%% of %.2f TB/s\n", what, us, bytes,
              bytes_per_s / 1e12, 100.0 * bytes_per_s / kH200Bandwidth, kH200Bandwidth / 1e12);
}

// A benchmark binary's main loop: bench(shape) for every shape, stopping at the first failure,
// printed as "<name>: <status>". Returns the process's exit code.
template <class Shape, class Bench>
int run_shapes(const char* name, std::initializer_list<Shape> shapes, Bench bench) {
  for (const Shape& shape : shapes) {
    const Status st = bench(shape);
    if (!st.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace dsa::cuda
