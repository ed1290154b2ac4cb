// Comparisons used by tests and by `dsa check`. A result carries a readable report of the first
// mismatches with their indices; NaN/Inf must sit at the same positions in both arrays.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dsa::testing {

struct CompareResult {
  bool ok = true;
  int64_t mismatches = 0;
  double max_abs_err = 0;
  std::string message;  // first mismatches, "[i] got g ref r (bound b)"
  explicit operator bool() const { return ok; }
};

// |got - ref| <= atol + rtol * |ref| elementwise; non-finite values must match exactly in kind.
CompareResult all_close(std::span<const float> got, std::span<const float> ref, double atol,
                        double rtol);

// |got - ref| <= bound[i] elementwise (per-element bounds such as SPEC.md §3b's 2^-8 M).
CompareResult within_bound(std::span<const float> got, std::span<const float> ref,
                           std::span<const float> bound);

// Exact equality of integer arrays.
CompareResult equal_i32(std::span<const int32_t> got, std::span<const int32_t> ref);

// Rows of `K` ints compared as sets (top-k order is unspecified).
CompareResult equal_rows_as_sets(std::span<const int32_t> got, std::span<const int32_t> ref,
                                 int64_t row_len);

}  // namespace dsa::testing
