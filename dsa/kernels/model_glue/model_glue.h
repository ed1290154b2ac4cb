// Elementwise and row-movement glue between the model's GEMMs (SPEC.md §8.4–§8.6), so that every
// activation stays in the backend's memory:
//   indexer_q_quant:   per (token, head) block of 128: e4m3 codes with the §2.1 power-of-two scale,
//                      and w *= fold * qscale (§8.5 steps 4–5, class E).
//   row_copy:          rows selected by an index list (gather: dst[i] = src[index[i]]; scatter:
//                      dst[index[i]] = src[i]); index -1 skips the row.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct IndexerQuantParams {
  const bf16* q = nullptr;  // [blocks, 128] bf16 Hadamard-rotated indexer queries
  uint8_t* q8 = nullptr;    // [blocks, 128] e4m3 codes
  float* w = nullptr;       // [blocks] fp32 head weights, in place: w = w * fold * qscale
  int64_t num_blocks = 0;   // T * H_i
  float fold = 0.f;         // H_i^-1/2 * D_i^-1/2
};
Status validate(const IndexerQuantParams& p);
// CPU reference: quantize_block_pow2 per block (class E); CUDA: bit-identical.
Status indexer_q_quant_ref(const IndexerQuantParams& p);
Status indexer_q_quant_cuda(const IndexerQuantParams& p);

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
};
Status validate(const RowCopyParams& p);
// CPU reference: one memcpy per listed row. Index >= index_bound is OutOfRange in checked mode,
// skipped otherwise. CUDA: skipped (no device error word for this glue op).
Status row_copy_ref(const RowCopyParams& p);
Status row_copy_cuda(const RowCopyParams& p);

}  // namespace dsa::kernels
