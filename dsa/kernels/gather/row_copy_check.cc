#include "dsa/kernels/gather/row_copy_check.h"

#include <fmt/format.h>

#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {
constexpr uint8_t kPoison = 0xA5;

// Independent formulation: owner[d] = the row of `src` that destination row d must hold, or -1.
// A gather fills every listed row from its index; a scatter fills each indexed row from the one
// listed row that names it (targets are distinct).
std::vector<int64_t> owners(const std::vector<int32_t>& index, int32_t dst_rows, bool gather) {
  std::vector<int64_t> owner(size_t(dst_rows), -1);
  for (int32_t d = 0; d < dst_rows; ++d) {
    if (gather) {
      owner[size_t(d)] = index[size_t(d)];
      continue;
    }
    for (size_t i = 0; i < index.size(); ++i) {
      if (index[i] == d) owner[size_t(d)] = int64_t(i);
    }
  }
  return owner;
}

Status compare(const std::vector<uint8_t>& dst, const std::vector<uint8_t>& src,
               const std::vector<int64_t>& owner, int64_t dst_stride, int64_t src_stride,
               int64_t row_bytes, const char* mode) {
  for (size_t d = 0; d < owner.size(); ++d) {
    for (int64_t b = 0; b < dst_stride; ++b) {
      const bool copied = owner[d] >= 0 && b < row_bytes;
      const uint8_t want = copied ? src[size_t(owner[d] * src_stride + b)] : kPoison;
      const uint8_t got = dst[d * size_t(dst_stride) + size_t(b)];
      if (got != want) {
        return internal_error(fmt::format(
            "row_copy ({}): destination row {} byte {} = {:#04x}, expected {:#04x} ({})", mode, d,
            b, got, want, copied ? fmt::format("row {} of src", owner[d]) : "untouched"));
      }
    }
  }
  return ok_status();
}
}  // namespace

Status check_row_copy(RowCopyFn op, int32_t rows, int32_t indexed_rows, int64_t row_bytes,
                      uint64_t seed) {
  if (rows < 1 || indexed_rows < rows || row_bytes < 1) {
    return invalid_argument(fmt::format(
        "check_row_copy: rows = {}, indexed_rows = {}, row_bytes = {}: need 1 <= rows <= "
        "indexed_rows and row_bytes >= 1",
        rows, indexed_rows, row_bytes));
  }
  ScopedCheckedMode checked(true);
  testing::Rng rng(seed);
  const int64_t src_stride = row_bytes + 5, dst_stride = row_bytes + 11;
  const std::vector<int32_t> targets = rng.permutation(0, indexed_rows);
  for (const RowCopyMode mode : {RowCopyMode::kGather, RowCopyMode::kScatter}) {
    const bool gather = mode == RowCopyMode::kGather;
    const int32_t src_rows = gather ? indexed_rows : rows, dst_rows = gather ? rows : indexed_rows;
    std::vector<int32_t> index(static_cast<size_t>(rows));
    for (int32_t i = 0; i < rows; ++i) {
      const int32_t row = gather ? int32_t(rng.randint(0, indexed_rows - 1)) : targets[size_t(i)];
      index[size_t(i)] = rng.randint(0, 6) == 0 ? -1 : row;
    }
    std::vector<uint8_t> src(size_t(src_rows * src_stride));
    for (uint8_t& b : src) b = uint8_t(rng.randint(0, 255));
    std::vector<uint8_t> dst(size_t(dst_rows * dst_stride), kPoison);
    DSA_RETURN_IF_ERROR(op({src.data(), dst.data(), index.data(), src_stride, dst_stride, row_bytes,
                            rows, indexed_rows, mode}));
    DSA_RETURN_IF_ERROR(compare(dst, src, owners(index, dst_rows, gather), dst_stride, src_stride,
                                row_bytes, gather ? "gather" : "scatter"));
  }
  return ok_status();
}

}  // namespace dsa::kernels
