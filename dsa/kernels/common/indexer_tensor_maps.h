// Tensor maps of the indexer kernels' operands (host side, passed to the kernels by value): rows
// of 128 e4m3 bytes (D_i = 128, one 128-byte swizzle row), copied in boxes of 64 rows, the layout
// wgmma reads K-major operands in. Rows outside the tensor are zero-filled by the copy engine.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/cuda/tensor_map.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

// A contiguous [rows][128 B] array (query rows, gathered keys): one box = 64 rows.
inline Status rows_128b_map(const void* base, uint64_t rows, CUtensorMap* out) {
  cuda::ByteTensorMap m;
  m.base = base;
  m.rank = 2;
  m.dims = {uint64_t{kIndexHeadDim}, rows};
  m.strides = {uint64_t{kIndexHeadDim}};
  m.box = {uint32_t{kIndexHeadDim}, 64};
  return cuda::encode_tensor_map(m, out);
}

// The indexer pool's keys as [num_pages][64 tokens][128 B], pages page_stride_bytes apart (§2.2):
// one box = one page's keys.
inline Status indexer_keys_map(const IndexerPool& pool, CUtensorMap* out) {
  cuda::ByteTensorMap m;
  m.base = pool.data;
  m.rank = 3;
  m.dims = {uint64_t{kIndexHeadDim}, uint64_t{kPageSize}, uint64_t(pool.num_pages)};
  m.strides = {uint64_t{kIndexHeadDim}, uint64_t(pool.page_stride_bytes)};
  m.box = {uint32_t{kIndexHeadDim}, uint32_t{kPageSize}, 1};
  return cuda::encode_tensor_map(m, out);
}

}  // namespace dsa::kernels
