// `dsa check` entry for the row copy (SPEC.md §8.6). No gtest dependency.
#pragma once

#include <cstdint>

#include "dsa/core/status.h"
#include "dsa/kernels/gather/row_copy.h"

namespace dsa::kernels {

using RowCopyFn = Status (*)(const RowCopyParams&);

// Runs `op` as a gather and as a scatter of `rows` listed rows of `row_bytes` random bytes
// to or from a side of `indexed_rows` rows (strides wider than a row and unequal, about one index
// in seven -1, scatter targets distinct, the destination poisoned), and compares every
// destination byte, the gaps between rows included, with an independent formulation: for each
// destination row, the listed row that owns it, if any. Exact. Needs rows <= indexed_rows.
Status check_row_copy(RowCopyFn op, int32_t rows, int32_t indexed_rows, int64_t row_bytes,
                      uint64_t seed);

}  // namespace dsa::kernels
