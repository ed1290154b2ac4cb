// Shared by the rmsnorm tests (CPU and GPU): the row lists a gathered norm is tested on.
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include "dsa/testing/random.h"

namespace dsa::kernels::rmsnorm_test {

// Entries for `tokens` gathered rows of a `bound`-row source: mostly random rows, and where T
// allows it a repeat, -1, and out-of-range values on both sides (bound, bound + 3, -2, INT32_MIN,
// INT32_MAX).
inline std::vector<int32_t> gather_entries(testing::Rng& rng, int32_t tokens, int32_t bound) {
  std::vector<int32_t> rows(static_cast<size_t>(tokens));
  const int32_t bad[] = {bound, INT32_MIN, -2, INT32_MAX, bound + 3};
  for (int32_t t = 0; t < tokens; ++t) {
    switch (t % 6) {
      case 1:
        rows[t] = -1;
        break;
      case 3:
        rows[t] = rows[t - 3];  // a repeat of a valid row
        break;
      case 4:
        rows[t] = bad[(t / 6) % 5];
        break;
      default:
        rows[t] = int32_t(rng.randint(0, bound - 1));
    }
  }
  return rows;
}

}  // namespace dsa::kernels::rmsnorm_test
