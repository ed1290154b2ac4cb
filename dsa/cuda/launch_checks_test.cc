// Host-side launcher checks (no device needed): the alignment rules and their messages, which
// callers and tests match by substring, and the unchecked error word (null, nothing allocated).
#include "dsa/cuda/launch_checks.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "dsa/cuda/launch.h"

namespace dsa::cuda {
namespace {

alignas(16) const uint8_t kBytes[64] = {};

TEST(LaunchChecks, IsAligned) {
  EXPECT_TRUE(is_aligned(kBytes, 16));
  EXPECT_FALSE(is_aligned(kBytes + 4, 16));
  EXPECT_TRUE(is_aligned(kBytes + 4, 4));
  EXPECT_TRUE(is_aligned(nullptr, 16));
}

TEST(LaunchChecks, RequireAlignedNamesTheField) {
  EXPECT_TRUE(require_aligned("op_cuda", "q", kBytes + 16, 16).ok());
  const Status s = require_aligned("op_cuda", "q", kBytes + 8, 16);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "op_cuda: q must be 16-byte aligned");
}

// Several pointers under one rule: one message naming them together, whichever is misaligned.
TEST(LaunchChecks, RequireAlignedGroup) {
  EXPECT_TRUE(require_aligned("op_cuda", "k and pool.data", {kBytes, kBytes + 32}, 16).ok());
  for (const void* bad : {static_cast<const void*>(kBytes + 2), static_cast<const void*>(kBytes)}) {
    const void* other = bad == kBytes ? kBytes + 2 : kBytes;
    const Status s = require_aligned("op_cuda", "k and pool.data", {other, bad}, 16);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "op_cuda: k and pool.data must be 16-byte aligned");
  }
}

TEST(LaunchChecks, UncheckedLaunchHasNoErrorWord) {
  StatusOr<DeviceErrorWord*> word = error_word_if(false);
  ASSERT_TRUE(word.ok()) << word.status().to_string();
  EXPECT_EQ(*word, nullptr);
}

}  // namespace
}  // namespace dsa::cuda
