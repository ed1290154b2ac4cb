#include <cstring>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/common/validate.h"
#include "dsa/kernels/gather/row_copy.h"

namespace dsa::kernels {

Status validate(const RowCopyParams& p) {
  constexpr std::string_view op = "row_copy";
  DSA_RETURN_IF_ERROR(require_in(op, "num_rows", p.num_rows, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(op, "row_bytes", p.row_bytes, 0, INT64_MAX));
  if (p.zero_skipped && p.mode != RowCopyMode::kGather) {
    return invalid_argument("row_copy: zero_skipped is for kGather only");
  }
  if (p.num_rows == 0 || p.row_bytes == 0) return ok_status();
  DSA_RETURN_IF_ERROR(require_in(op, "index_bound", p.index_bound, 1, INT32_MAX));
  DSA_RETURN_IF_ERROR(require_in(op, "src_stride", p.src_stride, p.row_bytes, INT64_MAX));
  DSA_RETURN_IF_ERROR(require_in(op, "dst_stride", p.dst_stride, p.row_bytes, INT64_MAX));
  DSA_RETURN_IF_ERROR(require_pointer(op, "src", p.src));
  DSA_RETURN_IF_ERROR(require_pointer(op, "dst", p.dst));
  return require_pointer(op, "index", p.index);
}

Status row_copy_ref(const RowCopyParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const bool gather = p.mode == RowCopyMode::kGather;
  if (checked_mode()) {  // before any row is written
    for (int64_t i = 0; i < p.num_rows; ++i) {
      if (p.index[i] >= p.index_bound) {
        return element_error(StatusCode::kOutOfRange, "row_copy", "index", i, p.index[i],
                             fmt::format("must be < index_bound = {}", p.index_bound));
      }
    }
  }
  for (int64_t i = 0; i < p.num_rows; ++i) {
    const int32_t r = p.index[i];
    if (r < 0 || r >= p.index_bound) {
      if (p.zero_skipped) {
        std::memset(static_cast<char*>(p.dst) + i * p.dst_stride, 0, size_t(p.row_bytes));
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
