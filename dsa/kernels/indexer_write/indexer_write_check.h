// `dsa check` entry for the indexer key write: runs `op` (any backend's implementation) on random
// keys scattered over shuffled pages and compares every byte of the pool with an independent
// formulation of SPEC.md §3a.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/indexer_write/indexer_write.h"

namespace dsa::kernels {

using IndexerWriteFn = Status (*)(const IndexerWriteParams&);

// The independent formulation of the §2.1 rule for one row of D_i = 128 bf16 values, shared by
// the checks of the key write and of the query quantisation (indexer_q_quant_check): the
// power-of-two scale from frexp of max(amax, 1e-4) / 448, the e4m3 codes by dividing by it.
void expected_pow2_row(const bf16* row, uint8_t* codes, float* scale);

Status check_indexer_write(IndexerWriteFn op, int32_t tokens, uint64_t seed);

}  // namespace dsa::kernels
