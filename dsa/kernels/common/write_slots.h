// The slot rules every cache write shares (SPEC.md §3a, §4.7): a slot is -1 (padded row, skipped)
// or lies in [P, num_pages * P) — page 0 is reserved — and no slot repeats within one call.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_set>

#include "dsa/kernels/common/validate.h"

namespace dsa::kernels {

inline bool slot_in_pool(int32_t slot, int32_t num_pages, int32_t page_size) {
  return slot >= page_size && int64_t{slot} < int64_t{num_pages} * page_size;
}

// Checked mode: OutOfRange naming the first slot that breaks a rule.
inline Status check_write_slots(std::string_view op, const int32_t* slot, int32_t count,
                                int32_t num_pages, int32_t page_size) {
  std::unordered_set<int32_t> seen;
  for (int32_t t = 0; t < count; ++t) {
    const int32_t s = slot[t];
    if (s == -1) continue;
    if (!slot_in_pool(s, num_pages, page_size)) {
      return element_error(StatusCode::kOutOfRange, op, "slot", t, s,
                           "must be -1 or in [P, num_pages * P) (page 0 is reserved)");
    }
    if (!seen.insert(s).second) {
      return element_error(StatusCode::kOutOfRange, op, "slot", t, s,
                           "repeats a slot written earlier in the same call");
    }
  }
  return ok_status();
}

}  // namespace dsa::kernels
