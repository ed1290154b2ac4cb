#include <cmath>
#include <cstring>

#include "dsa/core/checked_mode.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/common/write_slots.h"
#include "dsa/kernels/indexer_write/indexer_write.h"

namespace dsa::kernels {

namespace {
constexpr std::string_view kOp = "indexer_write";

// Checked-mode device-data rules, all verified before anything is written.
Status check_data(const IndexerWriteParams& p) {
  DSA_RETURN_IF_ERROR(
      check_write_slots(kOp, p.slot, p.num_tokens, p.pool.num_pages, p.pool.page_size));
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    if (p.slot[t] == -1) continue;
    for (int32_t d = 0; d < p.pool.head_dim; ++d) {
      float v = bf16_to_float(p.k[int64_t{t} * p.pool.head_dim + d]);
      if (!std::isfinite(v)) {
        return out_of_range(fmt::format("{}: k[{}][{}] = {}: keys must be finite", kOp, t, d, v));
      }
    }
  }
  return ok_status();
}
}  // namespace

Status validate(const IndexerWriteParams& p) {
  DSA_RETURN_IF_ERROR(require_in(kOp, "num_tokens", p.num_tokens, 0, INT32_MAX));
  if (p.num_tokens == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "k", p.k));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "slot", p.slot));
  DSA_RETURN_IF_ERROR(require_pointer(kOp, "pool.data", p.pool.data));
  DSA_RETURN_IF_ERROR(require_eq(kOp, "pool.head_dim", p.pool.head_dim, kIndexHeadDim));
  DSA_RETURN_IF_ERROR(require_eq(kOp, "pool.page_size", p.pool.page_size, kPageSize));
  DSA_RETURN_IF_ERROR(require_eq(kOp, "pool.page_stride_bytes", p.pool.page_stride_bytes,
                                 indexer_page_bytes(p.pool.page_size, p.pool.head_dim)));
  return require_in(kOp, "pool.num_pages", p.pool.num_pages, 1, INT32_MAX / kPageSize);
}

Status indexer_write_ref(const IndexerWriteParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  if (checked_mode()) DSA_RETURN_IF_ERROR(check_data(p));
  const int32_t d_i = p.pool.head_dim;
  float x[kIndexHeadDim];
  uint8_t q[kIndexHeadDim];
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    int32_t s = p.slot[t];
    if (!slot_in_pool(s, p.pool.num_pages, p.pool.page_size))
      continue;  // -1, and (unchecked) out-of-pool slots: no write
    for (int32_t d = 0; d < d_i; ++d) x[d] = bf16_to_float(p.k[int64_t{t} * d_i + d]);
    float scale = quantize_block_pow2(x, d_i, q);
    std::memcpy(p.pool.data + indexer_value_offset(p.pool, s), q, static_cast<size_t>(d_i));
    std::memcpy(p.pool.data + indexer_scale_offset(p.pool, s), &scale, sizeof(scale));
  }
  return ok_status();
}

}  // namespace dsa::kernels
