// The paged benchmarks' problem in the anchors' cold-L2 method (dsa/cuda/bench_cold.h): `copies`
// disjoint copies of B requests of W pages, every request's pages scattered over the pool.
// Shared by paged_logits_bench and paged_logits_topk_bench, so the two time the same inputs.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "dsa/core/splitmix64.h"
#include "dsa/core/status.h"
#include "dsa/cuda/bench_cold.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::testing {

// Random e4m3 codes with bit 6 clear: |v| < 2, never NaN (0x7F / 0xFF have bit 6 set).
inline void fill_bench_codes(SplitMix64& rng, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng.next() & 0xBFBFBFBFBFBFBFBFull;
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = uint8_t(rng.next()) & 0xBF;
}

struct ColdIndexerPool {
  cuda::DeviceBuffer<uint8_t> pool;  // [pages][8448], page 0 reserved and zero
  std::vector<int32_t> table;  // [table_rows, W]: row 0 reserved, copy c's request b at 1 + c B + b
  int64_t pages = 0;
  int32_t table_rows = 0;
};

// Pages: random keys with power-of-two scales, a template of up to 4096 pages filled on the host
// and repeated over the pool on the device (values may repeat across copies; addresses, which is
// what L2 sees, do not). Page table: the pages of (copy, request, i) from a random permutation of
// [1, pages), so every copy's pages are disjoint and scattered. `pages` = copies B W + 1 must fit
// int32 page slots (InvalidArgument otherwise).
inline StatusOr<ColdIndexerPool> make_cold_indexer_pool(SplitMix64& rng, int32_t copies, int32_t B,
                                                        int32_t W) {
  constexpr int32_t kPage = kernels::kPageSize, kDim = kernels::kIndexHeadDim;
  const int64_t page_bytes = int64_t{kPage} * (kDim + 4);
  ColdIndexerPool out;
  out.pages = int64_t{copies} * B * W + 1;
  if (out.pages > INT32_MAX / kPage) return invalid_argument("paged bench shape too large");
  const int64_t tmpl_pages = std::min<int64_t>(out.pages - 1, 4096);
  std::vector<uint8_t> tmpl(size_t(tmpl_pages * page_bytes));
  for (int64_t page = 0; page < tmpl_pages; ++page) {
    uint8_t* base = tmpl.data() + page * page_bytes;
    fill_bench_codes(rng, base, size_t(kPage) * kDim);
    for (int32_t o = 0; o < kPage; ++o) {
      const float scale = 1.f / float(1 << (rng.next() % 8));
      std::memcpy(base + kPage * kDim + 4 * o, &scale, 4);
    }
  }
  DSA_ASSIGN_OR_RETURN(out.pool,
                       cuda::DeviceBuffer<uint8_t>::alloc(size_t(out.pages * page_bytes)));
  DSA_CUDA_RETURN_IF_ERROR(cudaMemset(out.pool.data(), 0, size_t(page_bytes)));
  DSA_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(out.pool.data() + page_bytes, tmpl.data(), tmpl.size(), cudaMemcpyHostToDevice));
  DSA_RETURN_IF_ERROR(
      cuda::fill_pool_by_doubling(out.pool.data(), out.pages, page_bytes, tmpl_pages));

  std::vector<int32_t> perm(size_t(out.pages - 1));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int32_t(i + 1);
  for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[rng.next() % (i + 1)]);
  out.table_rows = copies * B + 1;
  out.table.assign(size_t(out.table_rows) * W, 0);
  for (size_t r = 1; r < size_t(out.table_rows); ++r) {
    for (int32_t i = 0; i < W; ++i) out.table[r * W + size_t(i)] = perm[(r - 1) * W + size_t(i)];
  }
  return out;
}

}  // namespace dsa::testing
