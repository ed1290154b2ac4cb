// `dsa check` entry for the gathers (SPEC.md §3h). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/gather/gather.h"

namespace dsa::kernels {

// Gathers `batch` requests with random lengths in [0, context_len] (some empty, as paged-path
// and padded requests are) from scattered pages of an indexer pool and of bf16 and FP8-656
// latent pools, and compares every gathered row with an independent per-token lookup written
// with its own byte arithmetic. OK on pass; the first mismatch otherwise.
using IndexerGatherFn = Status (*)(const IndexerGatherParams&);
using LatentGatherFn = Status (*)(const LatentGatherParams&);

Status check_gather(IndexerGatherFn indexer_gather, LatentGatherFn latent_gather, int32_t batch,
                    int32_t context_len, uint64_t seed);

}  // namespace dsa::kernels
