#include "dsa/kernels/layernorm/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsa/kernels/layernorm/layernorm_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

struct Case {
  std::vector<bf16> x, y;
  std::vector<float> w, b;
  Case(std::initializer_list<float> xs, std::vector<float> w_, std::vector<float> b_)
      : w(std::move(w_)), b(std::move(b_)) {
    for (float f : xs) x.push_back(float_to_bf16(f));
    y.assign(x.size(), float_to_bf16(NAN));
  }
  LayerNormParams params() {
    LayerNormParams p;
    p.x = x.data();
    p.weight = w.data();
    p.bias = b.data();
    p.y = y.data();
    p.dim = static_cast<int32_t>(w.size());
    p.num_tokens = static_cast<int32_t>(x.size() / w.size());
    return p;
  }
  float out(size_t i) const { return bf16_to_float(y[i]); }
};

// x = [1, 2, 3, 4]: mu = 2.5, biased var = 1.25, (x - mu)/sigma = [-1.341641, -0.447214, ...];
// with w = [2, 1, 1, 0.5], b = [0.5, 0, -1, 0.25]: [-2.183282, -0.447214, -0.552786, 0.920820],
// which round to the bf16 values below.
TEST(LayerNorm, HandComputedAffine) {
  Case c({1.f, 2.f, 3.f, 4.f}, {2.f, 1.f, 1.f, 0.5f}, {0.5f, 0.f, -1.f, 0.25f});
  ASSERT_TRUE(layernorm_ref(c.params()).ok());
  EXPECT_EQ(c.out(0), -2.1875f);
  EXPECT_EQ(c.out(1), -0.447265625f);
  EXPECT_EQ(c.out(2), -0.5546875f);
  EXPECT_EQ(c.out(3), 0.921875f);
}

// x = [0, 2]: the biased variance is 1 (unbiased would be 2 and give +-0.707), so y = [-1, 1].
TEST(LayerNorm, VarianceIsBiased) {
  Case c({0.f, 2.f}, {1.f, 1.f}, {0.f, 0.f});
  ASSERT_TRUE(layernorm_ref(c.params()).ok());
  EXPECT_EQ(c.out(0), -1.f);
  EXPECT_EQ(c.out(1), 1.f);
}

// A constant row has zero variance: eps keeps it finite and y = b exactly.
TEST(LayerNorm, ConstantRowGivesBias) {
  Case c({5.f, 5.f, 5.f}, {3.f, -2.f, 7.f}, {0.25f, -1.5f, 9.f});
  ASSERT_TRUE(layernorm_ref(c.params()).ok());
  EXPECT_EQ(c.out(0), 0.25f);
  EXPECT_EQ(c.out(1), -1.5f);
  EXPECT_EQ(c.out(2), 9.f);
}

// Independent long-double formulation on random rows with large offsets.
TEST(LayerNorm, RandomRowsMatchIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, dim] : {std::pair{41, 128}, {3, 1000}, {4, 5}}) {
    Status s = check_layernorm(layernorm_ref, tokens, dim, seed + dim);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " D=" << dim << ": " << s.to_string();
  }
}

TEST(LayerNorm, InPlaceEqualsOutOfPlace) {
  Rng rng(testing::test_seed());
  const int32_t tokens = 5, dim = 128;
  auto x = rng.bf16_vector(size_t(tokens) * dim, 4.f);
  auto w = rng.normal_vector(dim), b = rng.normal_vector(dim);
  std::vector<bf16> y(x.size()), inplace = x;
  LayerNormParams p;
  p.x = x.data();
  p.weight = w.data();
  p.bias = b.data();
  p.y = y.data();
  p.num_tokens = tokens;
  p.dim = dim;
  ASSERT_TRUE(layernorm_ref(p).ok());
  p.x = p.y = inplace.data();
  ASSERT_TRUE(layernorm_ref(p).ok());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(inplace[i].bits, y[i].bits) << i;
}

TEST(LayerNorm, ZeroTokensIsNoOpWithoutPointers) {
  LayerNormParams p;
  p.dim = 128;
  EXPECT_TRUE(layernorm_ref(p).ok());
}

class LayerNormRejects : public ::testing::Test {
 protected:
  LayerNormRejects() : c({1.f, 2.f, 3.f, 4.f}, {1.f, 1.f}, {0.f, 0.f}) {}
  void expect(const LayerNormParams& p, const std::string& needle) {
    Status s = layernorm_ref(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  }
  Case c;
};

TEST_F(LayerNormRejects, NegativeTokens) {
  auto p = c.params();
  p.num_tokens = -1;
  expect(p, "num_tokens = -1");
}
TEST_F(LayerNormRejects, ZeroDim) {
  auto p = c.params();
  p.dim = 0;
  expect(p, "dim = 0");
}
TEST_F(LayerNormRejects, NegativeEps) {
  auto p = c.params();
  p.eps = -1.f;
  expect(p, "eps = -1");
}
TEST_F(LayerNormRejects, InfiniteEps) {
  auto p = c.params();
  p.eps = INFINITY;
  expect(p, "eps = inf");
}
TEST_F(LayerNormRejects, InputStrideBelowDim) {
  auto p = c.params();
  p.x_stride = 1;
  expect(p, "x_stride = 1");
}
TEST_F(LayerNormRejects, OutputStrideBelowDim) {
  auto p = c.params();
  p.y_stride = 1;
  expect(p, "y_stride = 1");
}
TEST_F(LayerNormRejects, NullX) {
  auto p = c.params();
  p.x = nullptr;
  expect(p, "x is null");
}
TEST_F(LayerNormRejects, NullWeight) {
  auto p = c.params();
  p.weight = nullptr;
  expect(p, "weight is null");
}
TEST_F(LayerNormRejects, NullBias) {
  auto p = c.params();
  p.bias = nullptr;
  expect(p, "bias is null");
}
TEST_F(LayerNormRejects, NullY) {
  auto p = c.params();
  p.y = nullptr;
  expect(p, "y is null");
}

}  // namespace
}  // namespace dsa::kernels
