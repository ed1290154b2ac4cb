// The launch shape of paged_logits_topk_cuda (a pure function of the shapes and the SM count, so
// a captured graph's launch is an eager launch's), exposed for tests and benchmarks.
#pragma once

#include <array>
#include <cstdint>

#include "dsa/core/status.h"

namespace dsa::kernels {

struct PagedLogitsTopkLaunch {
  bool fits = false;    // false: the shape takes paged_logits + topk
  int32_t cluster = 0;  // CTAs per request: the fewest that hold n x W P floats, doubled while
                        // the grid stays within the SMs and each CTA keeps >= 512 keys
  int32_t chunk = 0;    // keys per CTA, a multiple of 64
  int32_t stages = 0;   // key ring depth (two pages a stage)
  int32_t rows_per_pass = 0;  // rows selected together
  uint32_t smem_bytes = 0;
};

// Clusters of 1, 2, 4, 8 CTAs the device holds at once at the shared memory each would use for
// this shape (0 where it does not fit).
using ClusterCapacity = std::array<int32_t, 4>;

PagedLogitsTopkLaunch paged_logits_topk_launch(int32_t rows_per_request, int32_t num_heads,
                                               int32_t width, int32_t batch_pad,
                                               const ClusterCapacity& capacity);

// The current device's capacity for the shape (cudaOccupancyMaxActiveClusters; cached per shape).
StatusOr<ClusterCapacity> paged_logits_topk_capacity(int32_t rows_per_request, int32_t num_heads,
                                                     int32_t width);

}  // namespace dsa::kernels
