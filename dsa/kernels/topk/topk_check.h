// `dsa check` for top-k (SPEC.md §3e), and the independent formulation the tests share: a full
// sort of (value, position) pairs, written without the reference's comparator or nth_element.
#pragma once

#include <cstdint>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/topk/topk.h"

namespace dsa::kernels {

// Positions [0, len) of `row` fully sorted by the §3e order, the first min(len, k) kept, returned
// in ascending position order.
std::vector<int32_t> topk_positions_by_full_sort(const float* row, int32_t len, int32_t k);

// One idx row of K entries against the expected images: [0, m) must equal `expected` as a set
// (m = expected.size(), no -1 and no repeat inside) and [m, K) must be -1; `ordered` (the trivial
// rows, len <= K) also requires [0, m) to equal `expected` entry by entry. A mismatch is Internal
// (a wrong result, not a bad input), its message naming `row` and the first offending entry.
Status compare_topk_row(const int32_t* got, std::vector<int32_t> expected, int32_t k, int32_t row,
                        bool ordered);

using TopkFn = Status (*)(const TopkParams&);

// Runs `op` (any backend's top-k) on `rows` random rows (ties, +-inf, NaN, -0; +inf past every
// length) with lengths in [0, context_len] including 0, < K, = K and context_len, into a poisoned
// idx, and compares every row with the full sort. OK on pass, the first mismatch otherwise.
Status check_topk(TopkFn op, int32_t rows, int32_t k, int32_t context_len, uint64_t seed);

}  // namespace dsa::kernels
