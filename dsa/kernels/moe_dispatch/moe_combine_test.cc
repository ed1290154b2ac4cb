// MoE combine's reference on a hand-computed case (SPEC.md §8.6) and against the independent
// formulation of its check.
#include "dsa/kernels/moe_dispatch/moe_combine.h"

#include <gtest/gtest.h>

#include <vector>

#include "dsa/kernels/moe_dispatch/moe_combine_check.h"
#include "dsa/testing/bf16_values.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::bf16s;

TEST(MoeCombine, SkipsPaddedSlotsAndAddsShared) {
  // Two rows, k = 2, D = 2. Row 1 is padded (ids -1): only the shared expert remains.
  auto routed = bf16s({1.f, 2.f, 10.f, 20.f, 100.f, 100.f, 100.f, 100.f});
  std::vector<int32_t> ids = {3, 0, -1, -1};
  std::vector<float> w = {0.5f, 0.25f, 9.f, 9.f};
  auto shared = bf16s({1.f, 1.f, 7.f, 8.f});
  std::vector<bf16> y(4);
  MoeCombineParams p{routed.data(), ids.data(), w.data(), shared.data(), y.data(), 2, 2, 2};
  ASSERT_TRUE(moe_combine_ref(p).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 0.5f * 1 + 0.25f * 10 + 1);
  EXPECT_EQ(bf16_to_float(y[1]), 0.5f * 2 + 0.25f * 20 + 1);
  EXPECT_EQ(bf16_to_float(y[2]), 7.f);
  EXPECT_EQ(bf16_to_float(y[3]), 8.f);
}

TEST(MoeCombine, MatchesIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t tokens, k, dim;
  } shapes[] = {{40, 2, 256}, {1, 8, 7168}, {37, 8, 512}, {9, 1, 3}};
  int n = 0;
  for (const Shape& s : shapes) {
    const Status st = check_moe_combine(moe_combine_ref, s.tokens, s.k, s.dim, seed + n++);
    EXPECT_TRUE(st.ok()) << "T=" << s.tokens << " k=" << s.k << " D=" << s.dim << ": "
                         << st.to_string();
  }
}

}  // namespace
}  // namespace dsa::kernels
