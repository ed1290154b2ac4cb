// The memory a strided operand covers, and whether two operands share a byte: for the ops'
// validation of in-place and overlapping buffers. Pointers are compared as integers (they usually
// come from different allocations); sizes saturate instead of overflowing (strides up to INT64_MAX
// pass the validations).
#pragma once

#include <cstdint>

namespace dsa::kernels {

// Elements from the first of `rows` rows `stride` apart to the end of the last row's `width`
// (INT64_MAX where that overflows). rows >= 1.
inline int64_t rows_span(int64_t rows, int64_t stride, int64_t width) {
  int64_t n = 0;
  if (__builtin_mul_overflow(rows - 1, stride, &n) || __builtin_add_overflow(n, width, &n)) {
    return INT64_MAX;
  }
  return n;
}

// Whether the byte spans [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool bytes_overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  const auto end = [](uintptr_t p, uint64_t bytes) {
    return bytes > UINTPTR_MAX - p ? UINTPTR_MAX : p + uintptr_t(bytes);
  };
  const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < end(b0, b_bytes) && b0 < end(a0, a_bytes);
}

// The same over element counts of T (counts near INT64_MAX saturate).
template <typename T>
bool elems_overlap(const T* a, int64_t a_elems, const T* b, int64_t b_elems) {
  const auto bytes = [](int64_t elems) {
    const uint64_t n = elems < 0 ? 0 : uint64_t(elems);
    return n > UINT64_MAX / sizeof(T) ? UINT64_MAX : n * sizeof(T);
  };
  return bytes_overlap(a, bytes(a_elems), b, bytes(b_elems));
}

}  // namespace dsa::kernels
