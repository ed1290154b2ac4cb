// Test fixtures shared by the sparse MLA test files: a random decode problem on a paged pool,
// and the dense problem over explicit per-row key lists.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "dsa/kernels/sparse_mla/sparse_mla.h"
#include "dsa/kernels/sparse_mla/sparse_mla_dense_check.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels::test {

inline constexpr bf16 kPoisonBf16{0x7FC0};  // NaN: outputs must be overwritten

struct DecodeCase {
  testing::LatentPoolBuffer pool;
  int32_t rows, heads, topk;
  float sm_scale = kV32SmScale;
  std::vector<bf16> q;
  std::vector<int32_t> indices;   // [R, K], all -1 to start
  std::vector<int32_t> topk_len;  // [R], K to start
  bool pass_topk_len = true;
  std::vector<bf16> out;
  std::vector<float> lse;

  DecodeCase(int32_t num_pages, LatentFormat format, int32_t rows_, int32_t heads_, int32_t topk_,
             testing::Rng& rng)
      : pool(num_pages, format), rows(rows_), heads(heads_), topk(topk_) {
    pool.fill_random(rng);
    q = rng.bf16_vector(size_t(rows) * heads * kQkDim, 0.5f);
    indices.assign(size_t(rows) * topk, -1);
    topk_len.assign(rows, topk);
    poison();
  }
  void poison() {
    out.assign(size_t(rows) * heads * kVDim, kPoisonBf16);
    lse.assign(size_t(rows) * heads, NAN);
  }
  int32_t* row_indices(int32_t r) { return indices.data() + size_t(r) * topk; }
  SparseMlaDecodeParams params() {
    SparseMlaDecodeParams p;
    p.q = q.data(), p.cache = pool.pool(), p.indices = indices.data();
    p.topk_len = pass_topk_len ? topk_len.data() : nullptr;
    p.rows = rows, p.num_heads = heads, p.topk = topk, p.sm_scale = sm_scale;
    p.out = out.data(), p.lse = lse.data();
    return p;
  }
};

// Dense attention where row r attends exactly the pool rows lists[r] (duplicates kept), laid
// out contiguously: the dense counterpart of any index list.
inline DenseMlaResult dense_over_lists(const testing::LatentPoolBuffer& pool, const bf16* q,
                                       int32_t heads,
                                       const std::vector<std::vector<int32_t>>& lists,
                                       float sm_scale) {
  std::vector<float> kv;
  std::vector<int32_t> begin, end;
  for (const auto& list : lists) {
    begin.push_back(static_cast<int32_t>(kv.size() / kQkDim));
    for (int32_t s : list) {
      std::vector<float> row = pool.row(s);
      kv.insert(kv.end(), row.begin(), row.end());
    }
    end.push_back(static_cast<int32_t>(kv.size() / kQkDim));
  }
  return dense_mla_attention(q, static_cast<int32_t>(lists.size()), heads, kv, begin, end,
                             sm_scale);
}

inline void expect_same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i].bits, b[i].bits) << "element " << i;
}

}  // namespace dsa::kernels::test
