// `dsa check` entry for the token embedding gather. No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/embedding/embedding.h"

namespace dsa::kernels {

using EmbeddingFn = Status (*)(const EmbeddingParams&);

// Runs `op` (checked mode) on `tokens` random ids (repeats and both ends of the vocabulary
// included) over a random [vocab, dim] table with NaN-poisoned output, and compares every output
// bit with an element-by-element lookup. OK on pass; the first mismatch otherwise.
Status check_embedding(EmbeddingFn op, int32_t tokens, int32_t vocab, int32_t dim, uint64_t seed);

}  // namespace dsa::kernels
