// GPU tests carry the ctest label `gpu` and skip themselves visibly when no device is present.
#pragma once

#include <gtest/gtest.h>

namespace dsa::testing {
// True when a CUDA device is usable (always false in host-only builds).
bool cuda_device_available();
}  // namespace dsa::testing

#define DSA_SKIP_WITHOUT_GPU()                      \
  do {                                              \
    if (!::dsa::testing::cuda_device_available()) { \
      GTEST_SKIP() << "SKIPPED: no CUDA device";    \
    }                                               \
  } while (0)
