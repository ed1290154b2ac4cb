// `dsa check` entry for the indexer query quantisation (SPEC.md §8.5). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"

namespace dsa::kernels {

using IndexerQQuantFn = Status (*)(const IndexerQuantParams&);

// Runs `op` on tokens * heads blocks of 128 query values (block scales spread over 2^-12..2^12,
// one all-zero block, codes poisoned 0xEE), head weights ~ N(0, 1) and the model's fold
// H_i^-1/2 D_i^-1/2, and compares every code and weight with an independent formulation: the
// codes and scale of expected_pow2_row (indexer_write_check.h), w = ldexp(w fold, log2 scale).
// Exact. OK on pass; the first mismatch otherwise.
Status check_indexer_q_quant(IndexerQQuantFn op, int32_t tokens, int32_t heads, uint64_t seed);

}  // namespace dsa::kernels
