// The launch shape of ragged_logits_cuda, exposed so GPU tests can reach every dispatched path
// (one slice and several slices of the key range) and benchmarks can print it.
#pragma once

#include <cstdint>

namespace dsa::kernels {

struct RaggedLogitsGrid {
  int32_t row_groups = 0;  // CTAs along the query rows: ceil(T / (256 / H_i))
  int32_t slices = 1;      // CTAs along each row group's key range
};

// A pure function of the shapes and the SM count, so a captured graph's grid is the one an eager
// launch of the same shapes takes. Slices exist only while row groups leave SMs idle, and each
// covers at least 2048 of the S keys.
RaggedLogitsGrid ragged_logits_grid(int32_t num_tokens, int32_t num_keys, int32_t num_heads,
                                    int32_t sm_count);

}  // namespace dsa::kernels
