// The launch shape of paged_logits_topk_cuda (a pure function of the shapes and the SM count, so
// a captured graph's launch is an eager launch's), exposed for tests and benchmarks.
#pragma once

#include <cstdint>

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

PagedLogitsTopkLaunch paged_logits_topk_launch(int32_t rows_per_request, int32_t num_heads,
                                               int32_t width, int32_t batch_pad, int32_t sm_count);

}  // namespace dsa::kernels
