// SwiGLU's reference on hand-computed values (SPEC.md §8.6) and against the independent
// formulation of its check.
#include "dsa/kernels/activation/activation.h"

#include <gtest/gtest.h>

#include <vector>

#include "dsa/kernels/activation/activation_check.h"
#include "dsa/testing/bf16_values.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::bf16s;

TEST(Activation, SwigluHandComputed) {
  // silu(0) = 0; silu(2) * 3 = 2 / (1 + e^-2) * 3 = 5.2836 -> bf16 5.28125; silu(-1) * 1 =
  // -0.26894.
  auto g = bf16s({0.f, 2.f, -1.f}), u = bf16s({5.f, 3.f, 1.f});
  std::vector<bf16> out(3);
  ASSERT_TRUE(swiglu_ref({g.data(), u.data(), out.data(), 3}).ok());
  EXPECT_EQ(bf16_to_float(out[0]), 0.f);
  EXPECT_EQ(bf16_to_float(out[1]), 5.28125f);
  EXPECT_NEAR(bf16_to_float(out[2]), -0.26894f, 0.002f);
  EXPECT_EQ(swiglu_ref({nullptr, u.data(), out.data(), 3}).code(), StatusCode::kInvalidArgument);
}

TEST(Activation, SwigluMatchesIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, width] : {std::pair{37, 256}, {1, 2048}, {5, 18432}, {3, 7}}) {
    const Status s = check_swiglu(swiglu_ref, tokens, width, seed + width);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " width=" << width << ": " << s.to_string();
  }
}

}  // namespace
}  // namespace dsa::kernels
