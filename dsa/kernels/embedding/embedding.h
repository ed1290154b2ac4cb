// Token embedding gather: y[t] = table[ids[t]] (model.embed_tokens, SPEC.md §8.2, §8.6).
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"

namespace dsa::kernels {

struct EmbeddingParams {
  const int32_t* ids = nullptr;  // [T] int32 token ids, in [0, V)
  const bf16* table = nullptr;   // [V, D] bf16 embedding table
  bf16* y = nullptr;             // [T, D] bf16 output rows
  int32_t num_tokens = 0;        // T
  int32_t vocab_size = 0;        // V
  int32_t dim = 0;               // D (hidden_size)
};

// Host checks (InvalidArgument): T >= 0, V >= 1, D >= 1, pointers.
Status validate(const EmbeddingParams& p);

// CPU reference: a copy of row ids[t] per token. Checked mode: an id outside [0, V) is OutOfRange
// naming the row and the id (nothing written). Unchecked: that token's output row is zero (the
// table is never read out of bounds).
Status embedding_ref(const EmbeddingParams& p);
// CUDA backend (device pointers): bit-exact gather; checked mode reports bad ids (OutOfRange).
Status embedding_cuda(const EmbeddingParams& p);

}  // namespace dsa::kernels
