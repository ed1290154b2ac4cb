// The first place two outputs differ, for tests that EXPECT_EQ it against "" so that a failure
// prints where (and how) they differ rather than a bare "false".
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace dsa::testing {

// describe(i) for the first i where !equal(got[i], want[i]); "" when all are equal, "sizes differ"
// when the sizes are.
template <typename T, typename Describe, typename Equal = std::equal_to<T>>
std::string first_difference(const std::vector<T>& got, const std::vector<T>& want,
                             Describe&& describe, Equal equal = {}) {
  if (got.size() != want.size()) return "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (!equal(got[i], want[i])) return describe(i);
  }
  return "";
}

// The same for outputs that must be bit-identical (two runs, in place against out of place):
// elements compare as bytes, so NaN payloads and signed zeros count.
template <typename T>
std::string first_bit_difference(const std::vector<T>& got, const std::vector<T>& want) {
  static_assert(std::is_trivially_copyable_v<T>);
  return first_difference(
      got, want, [](size_t i) { return "element " + std::to_string(i) + " differs"; },
      [](const T& a, const T& b) { return std::memcmp(&a, &b, sizeof(T)) == 0; });
}

}  // namespace dsa::testing
