// Row copy (SPEC.md §8.6, §6.1): whole rows moved by an index list, beside the gathers of the
// paged caches, so the model's row selections stay in the backend's memory: the sampled rows'
// hidden states before the LM head, and the host-grouped FP8 experts' input gather and output
// scatter.
//   gather:  dst[i] = src[index[i]];   scatter: dst[index[i]] = src[i];   index -1 skips the row.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"

namespace dsa::kernels {

enum class RowCopyMode { kGather, kScatter };

struct RowCopyParams {
  const void* src = nullptr;       // rows of row_bytes, src_stride bytes apart
  void* dst = nullptr;             // rows of row_bytes, dst_stride bytes apart
  const int32_t* index = nullptr;  // [num_rows] int32 row of the indexed side, -1 = skip
  int64_t src_stride = 0;          // bytes
  int64_t dst_stride = 0;          // bytes
  int64_t row_bytes = 0;
  int32_t num_rows = 0;     // rows of the listed side
  int32_t index_bound = 0;  // rows of the indexed side: index must be < index_bound
  RowCopyMode mode = RowCopyMode::kGather;
  // Gather only: a listed row whose index is skipped (-1, or >= index_bound unchecked) is written
  // as zeros instead of left as it was, so the destination needs no zero fill first (one launch
  // instead of a memset and the copy).
  bool zero_skipped = false;
};
// Host checks (InvalidArgument): counts, strides >= row_bytes, pointers; zero_skipped only with
// kGather.
Status validate(const RowCopyParams& p);
// CPU reference: one memcpy per listed row. Index >= index_bound is OutOfRange in checked mode,
// skipped otherwise. CUDA: skipped (no device error word for this glue op).
Status row_copy_ref(const RowCopyParams& p);
Status row_copy_cuda(const RowCopyParams& p);

}  // namespace dsa::kernels
