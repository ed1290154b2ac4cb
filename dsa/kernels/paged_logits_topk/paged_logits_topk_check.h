// `dsa check` for the fused decode selection, and the problem fixture its tests share: an owned
// random decode problem (scattered pages, padded requests, chosen lengths) and the independent
// formulation, paged_logits_ref's rows fully sorted under the §3e order (no radix passes, no
// top-k reference) and mapped through the page table.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/paged_logits_topk/paged_logits_topk.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels {

struct PagedLogitsTopkProblem {
  int32_t batch = 0, n = 1, heads = 64, W = 1, k = 2048;
  testing::IndexerPoolBuffer pool{1};
  testing::PageTableBuffer table{1, 1, 1};
  std::vector<uint8_t> q;
  std::vector<float> w;
  std::vector<int32_t> row_len, req_slot, idx;

  // Request b's rows see base + j + 1 keys (bases cycled; -1 = random in [0, W P - n]), every
  // `padded`-th request padded (req_slot 0, lengths 0). idx starts as -7 everywhere.
  PagedLogitsTopkProblem(testing::Rng& rng, int32_t batch, int32_t n, int32_t heads, int32_t W,
                         int32_t k, const std::vector<int32_t>& bases, int32_t padded);
  PagedLogitsTopkParams params();  // host pointers
  int32_t rows() const { return batch * n; }
};

// The expected slots of every row (each sorted ascending, min(K, len) of them): the independent
// formulation above, over the lengths and table rows neutralised as paged_logits neutralises them.
StatusOr<std::vector<std::vector<int32_t>>> expected_slots(PagedLogitsTopkProblem& p);

// got [rows, K] against expected: row r's first m = expected[r].size() entries equal it as a set,
// the rest -1. Internal naming the row on a mismatch.
Status compare_selection(const std::vector<int32_t>& got,
                         const std::vector<std::vector<int32_t>>& expected, int32_t k);

using PagedLogitsTopkFn = Status (*)(const PagedLogitsTopkParams&);

// Runs `op` (checked mode) on `batch` verify-like requests of n rows over a context of
// context_len keys and compares with the independent formulation. The logits of the two sides are
// computed by different code (the op's, paged_logits_ref's), so a row whose K-th and (K+1)-th
// logits are closer than the §3b tolerance may legitimately differ at that boundary: such rows
// are compared on the entries strictly above the boundary value only.
Status check_paged_logits_topk(PagedLogitsTopkFn op, int32_t batch, int32_t n, int32_t heads,
                               int32_t context_len, uint64_t seed);

}  // namespace dsa::kernels
