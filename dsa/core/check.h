// DSA_CHECK: aborts on a broken internal invariant. Never for user input (that is a Status).
#pragma once

namespace dsa::detail {
[[noreturn]] void check_failed(const char* expr, const char* file, int line);
}  // namespace dsa::detail

#define DSA_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::dsa::detail::check_failed(#cond, __FILE__, __LINE__))
