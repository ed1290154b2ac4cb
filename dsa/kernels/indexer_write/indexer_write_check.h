// `dsa check` entry for the indexer key write: runs `op` (any backend's implementation) on random
// keys scattered over shuffled pages and compares every byte of the pool with an independent
// formulation of SPEC.md §3a.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/indexer_write/indexer_write.h"

namespace dsa::kernels {

using IndexerWriteFn = Status (*)(const IndexerWriteParams&);

Status check_indexer_write(IndexerWriteFn op, int32_t tokens, uint64_t seed);

}  // namespace dsa::kernels
