// MLA latent cache write (SPEC.md §4.7, formats §2.3 / §2.4): scatter each new token's
// [c (512) | k_pe (64)] row to its slot of one layer's latent pool. bf16 pools receive the row
// verbatim; FP8-656 pools receive c quantised per 128-value tile with the power-of-two rule (§2.1),
// the 4 tile scales, and k_pe as bf16. Class E.
#pragma once

#include <cstdint>

#include "dsa/core/dtype.h"
#include "dsa/core/status.h"
#include "dsa/kernels/common/paged_cache.h"

namespace dsa::kernels {

struct LatentWriteParams {
  const bf16* kv = nullptr;  // [T, 576] bf16: [c (512) | k_pe (64)] of the new tokens
  // Elements between kv's rows; 0 = 576. A fused projection's output row holds the latent beside
  // other columns (dsa/model/fused_projections.h), so the rows may lie further apart.
  int64_t kv_stride = 0;
  const int32_t* slot = nullptr;  // [T] int32 global slots, -1 = skip (padded rows)
  int32_t num_tokens = 0;         // T
  LatentPool pool;                // one layer's latent pool (bf16 or FP8-656), written in place
};

inline int64_t kv_row_stride(const LatentWriteParams& p) {
  return p.kv_stride == 0 ? kQkDim : p.kv_stride;
}

// Host checks (InvalidArgument): pointers, T >= 0, kv_stride 0 or >= 576 and a multiple of 8 (rows
// of 16-byte vectors), P = 64, num_pages >= 1, a known format.
Status validate(const LatentWriteParams& p);

// CPU reference. Checked mode: a slot outside {-1} U [P, num_pages * P), a non-finite kv value,
// or a slot repeated within the call is OutOfRange (nothing is written then). Unchecked: slots
// outside the pool are skipped.
Status latent_write_ref(const LatentWriteParams& p);

// CUDA (sm_90a) on cuda::current_stream(); params hold DEVICE pointers (kv and pool.data 16-byte
// aligned). Bit-exact with the reference. Checked mode: a slot outside {-1} U [P, num_pages P) or a
// non-finite value sets the device error word (OutOfRange; the launcher syncs and returns it); slot
// repeats are not checked on the device (inv. 7). Unchecked: out-of-pool slots are skipped.
Status latent_write_cuda(const LatentWriteParams& p);

// Byte offsets inside one FP8-656 row (§2.4).
inline constexpr int32_t kFp8ScaleOffset = kLatentDim;      // 4 fp32 tile scales at [512, 528)
inline constexpr int32_t kFp8RopeOffset = kLatentDim + 16;  // 64 bf16 k_pe at [528, 656)

}  // namespace dsa::kernels
