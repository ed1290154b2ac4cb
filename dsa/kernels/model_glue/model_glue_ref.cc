#include <cmath>
#include <cstring>

#include "dsa/core/checked_mode.h"
#include "dsa/core/fp8_quant.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/model_glue/model_glue.h"

namespace dsa::kernels {

// ---- validation ----

Status validate(const IndexerQuantParams& p) {
  constexpr std::string_view op = "indexer_q_quant";
  DSA_RETURN_IF_ERROR(require_in(op, "num_blocks", p.num_blocks, 0, INT64_MAX));
  if (!(std::isfinite(p.fold) && p.fold > 0.f)) {
    return invalid_argument(fmt::format("{}: fold = {}: must be finite and > 0", op, p.fold));
  }
  if (p.num_blocks == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_pointer(op, "q", p.q));
  DSA_RETURN_IF_ERROR(require_pointer(op, "q8", p.q8));
  return require_pointer(op, "w", p.w);
}

Status validate(const RowCopyParams& p) {
  constexpr std::string_view op = "row_copy";
  DSA_RETURN_IF_ERROR(require_in(op, "num_rows", p.num_rows, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(op, "row_bytes", p.row_bytes, 0, INT64_MAX));
  if (p.num_rows == 0 || p.row_bytes == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_in(op, "index_bound", p.index_bound, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(op, "src_stride", p.src_stride, p.row_bytes, INT64_MAX));
  DSA_RETURN_IF_ERROR(require_in(op, "dst_stride", p.dst_stride, p.row_bytes, INT64_MAX));
  DSA_RETURN_IF_ERROR(require_pointer(op, "src", p.src));
  DSA_RETURN_IF_ERROR(require_pointer(op, "dst", p.dst));
  return require_pointer(op, "index", p.index);
}

// ---- references ----

Status indexer_q_quant_ref(const IndexerQuantParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  constexpr int kDim = 128;
  float buf[kDim];
  for (int64_t i = 0; i < p.num_blocks; ++i) {
    for (int t = 0; t < kDim; ++t) buf[t] = bf16_to_float(p.q[i * kDim + t]);
    const float qscale = quantize_block_pow2(buf, kDim, &p.q8[i * kDim]);
    p.w[i] = p.w[i] * p.fold * qscale;  // relu(s z) = s relu(z) for s > 0
  }
  return ok_status();
}

Status row_copy_ref(const RowCopyParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const bool gather = p.mode == RowCopyMode::kGather;
  for (int64_t i = 0; i < p.num_rows; ++i) {
    const int32_t r = p.index[i];
    if (r < 0) continue;
    if (r >= p.index_bound) {
      if (checked_mode()) {
        return element_error(StatusCode::kOutOfRange, "row_copy", "index", i, r,
                             fmt::format("must be < index_bound = {}", p.index_bound));
      }
      continue;
    }
    const int64_t s = gather ? r : i, d = gather ? i : r;
    std::memcpy(static_cast<char*>(p.dst) + d * p.dst_stride,
                static_cast<const char*>(p.src) + s * p.src_stride, size_t(p.row_bytes));
  }
  return ok_status();
}

}  // namespace dsa::kernels
