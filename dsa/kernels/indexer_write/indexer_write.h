// Indexer key write (SPEC.md §3a): quantise each new key as one 128-value block with the
// power-of-two rule (§2.1) and scatter (values, scale) to its slot of the indexer pool (§2.2).
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

struct IndexerWriteParams {
  const bf16* k = nullptr;        // [T, D_i] bf16: post norm, RoPE, Hadamard keys
  const int32_t* slot = nullptr;  // [T] int32 global slots, -1 = skip (padded rows)
  int32_t num_tokens = 0;         // T
  IndexerPool pool;               // one layer's pool, written in place
};

// Host checks (InvalidArgument): pointers, T >= 0, D_i = 128, P = 64, page stride = P(D_i + 4).
Status validate(const IndexerWriteParams& p);

// CPU reference. Checked mode: a slot outside {-1} U [P, num_pages * P), a non-finite key, or a
// slot repeated within the call is OutOfRange (nothing is written then). Unchecked: such slots are
// skipped.
Status indexer_write_ref(const IndexerWriteParams& p);

// CUDA (sm_90a) on cuda::current_stream(); params hold DEVICE pointers (k and pool.data 16-byte
// aligned). Bit-exact with the reference. Checked mode: a slot outside {-1} U [P, num_pages P) or a
// non-finite key sets the device error word (OutOfRange; the launcher syncs and returns it); slot
// repeats are not checked on the device (inv. 7). Unchecked: out-of-pool slots are skipped.
Status indexer_write_cuda(const IndexerWriteParams& p);

}  // namespace dsa::kernels
