#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "dsa/core/checked_mode.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/common/write_slots.h"
#include "dsa/kernels/latent_write/latent_write.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "latent_write";

// Checked-mode device-data rules, all verified before anything is written.
Status check_data(const LatentWriteParams& p) {
  DSA_RETURN_IF_ERROR(
      check_write_slots(kOp, p.slot, p.num_tokens, p.pool.num_pages, p.pool.page_size));
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    if (p.slot[t] == -1) continue;
    for (int32_t d = 0; d < kQkDim; ++d) {
      float v = bf16_to_float(p.kv[t * kv_row_stride(p) + d]);
      if (!std::isfinite(v)) {
        return out_of_range(
            fmt::format("{}: kv[{}][{}] = {}: latents must be finite", kOp, t, d, v));
      }
    }
  }
  return ok_status();
}

// §2.4: four 128-value tiles of c quantised independently, then the scales, then k_pe verbatim.
void write_fp8_row(const bf16* kv, uint8_t* row) {
  float x[kLatentTile];
  for (int32_t tile = 0; tile < kLatentDim / kLatentTile; ++tile) {
    for (int32_t i = 0; i < kLatentTile; ++i) x[i] = bf16_to_float(kv[tile * kLatentTile + i]);
    float scale = quantize_block_pow2(x, kLatentTile, row + tile * kLatentTile);
    std::memcpy(row + kFp8ScaleOffset + 4 * tile, &scale, sizeof(scale));
  }
  std::memcpy(row + kFp8RopeOffset, kv + kLatentDim, kRopeDim * sizeof(bf16));
}
}  // namespace

Status validate(const LatentWriteParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "kv", p.kv));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "slot", p.slot));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "pool.data", p.pool.data));
  if (p.kv_stride != 0 && (p.kv_stride < kQkDim || p.kv_stride % 8 != 0)) {
    return field_error(StatusCode::kInvalidArgument, kOp, "kv_stride", p.kv_stride,
                       "must be 0 (= 576) or >= 576 and a multiple of 8");
  }
  if (p.pool.format != LatentFormat::kBf16 && p.pool.format != LatentFormat::kFp8_656) {
    return field_error(StatusCode::kInvalidArgument, kOp, "pool.format",
                       static_cast<int64_t>(p.pool.format), "must be kBf16 or kFp8_656");
  }
  DSA_RETURN_IF_ERROR(require_eq(kOp, "pool.page_size", p.pool.page_size, kPageSize));
  return require_in(kOp, "pool.num_pages", p.pool.num_pages, 1, INT32_MAX / kPageSize);
}

Status latent_write_ref(const LatentWriteParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (checked_mode()) DSA_RETURN_IF_ERROR(check_data(p));
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    int32_t s = p.slot[t];
    if (!slot_in_pool(s, p.pool.num_pages, p.pool.page_size))
      continue;  // -1, and (unchecked) out-of-pool slots: no write
    const bf16* kv = p.kv + t * kv_row_stride(p);
    uint8_t* row = p.pool.data + latent_row_offset(p.pool, s);
    if (p.pool.format == LatentFormat::kBf16) {
      std::memcpy(row, kv, kBf16LatentBytes);
    } else {
      write_fp8_row(kv, row);
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
