#include "dsa/kernels/linear/linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/linear/linear_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

std::vector<bf16> to_bf16(std::initializer_list<float> v) {
  std::vector<bf16> out;
  for (float f : v) out.push_back(float_to_bf16(f));
  return out;
}
std::vector<uint8_t> to_e4m3(std::initializer_list<float> v) {
  std::vector<uint8_t> out;
  for (float f : v) out.push_back(float_to_e4m3(f).bits);
  return out;
}

LinearParams bf16_params(const std::vector<bf16>& x, const std::vector<bf16>& w, int32_t t,
                         int32_t in, int32_t out) {
  LinearParams p;
  p.x = x.data();
  p.weight = w.data();
  p.num_tokens = t;
  p.in_features = in;
  p.out_features = out;
  return p;
}

// x = [1, 2], W = [[3, 4], [-1, 0.25]]: y = [11, -0.5].
TEST(Linear, HandComputedBf16Weight) {
  auto x = to_bf16({1.f, 2.f}), w = to_bf16({3.f, 4.f, -1.f, 0.25f});
  std::vector<bf16> y(2, float_to_bf16(NAN));
  auto p = bf16_params(x, w, 1, 2, 2);
  p.y = y.data();
  ASSERT_TRUE(linear_ref(p).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 11.f);
  EXPECT_EQ(bf16_to_float(y[1]), -0.5f);
}

// The output option: 1 + 2^-8 is exact in fp32 and a bf16 tie that rounds to the even 1.0.
TEST(Linear, HandComputedOutputDtype) {
  auto x = to_bf16({1.f, 1.f}), w = to_bf16({1.f, 0x1p-8f});
  std::vector<bf16> y(1, float_to_bf16(NAN));
  std::vector<float> y32(1, NAN);
  auto p = bf16_params(x, w, 1, 2, 1);
  p.y = y.data();
  ASSERT_TRUE(linear_ref(p).ok());
  p.y = nullptr;
  p.y_f32 = y32.data();
  ASSERT_TRUE(linear_ref(p).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 1.f);
  EXPECT_EQ(y32[0], 1.f + 0x1p-8f);
}

// FP8 weight: x = [1, bf16(0.3) = 0.30078125]. One block, amax 1 -> v = 1/448 = 1.14 * 2^-9,
// so e = -8: x * 256 = [256, 77] -> e4m3 [256, 80] (step 8 in [64, 128)) -> x^ = [1, 0.3125].
// W8 row 0 = [1, 1] with scale 1 (rows 0..127 share block scale s[0][0]); to give row 1 its own
// scale it sits at row 128 with s[1][0] = 0.5 and W8 = [2, -0.5] -> w^ = [1, -0.25].
// y = [1.3125, 1 - 0.078125 = 0.921875].
TEST(Linear, HandComputedFp8WeightQuantisesActivations) {
  auto x = to_bf16({1.f, 0.3f});
  std::vector<uint8_t> w8(129 * 2, float_to_e4m3(0.f).bits);
  w8[0] = w8[1] = float_to_e4m3(1.f).bits;
  w8[256] = float_to_e4m3(2.f).bits;
  w8[257] = float_to_e4m3(-0.5f).bits;
  std::vector<float> sw = {1.f, 0.5f};
  std::vector<bf16> y(129, float_to_bf16(NAN));
  LinearParams p;
  p.x = x.data();
  p.weight_fp8 = w8.data();
  p.weight_scale_inv = sw.data();
  p.y = y.data();
  p.num_tokens = 1;
  p.in_features = 2;
  p.out_features = 129;
  ASSERT_TRUE(linear_ref(p).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 1.3125f);
  EXPECT_EQ(bf16_to_float(y[128]), 0.921875f);
  EXPECT_EQ(bf16_to_float(y[5]), 0.f);  // a zero weight row
}

// Independent formulations on random inputs, including the tiny LM head [6144, 256], V3.2-like
// shapes, and partial 128-blocks in both dimensions.
TEST(Linear, RandomMatchesIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t t, in, out;
    bool fp8;
  } shapes[] = {{3, 256, 6144, false}, {5, 300, 200, false}, {1, 1, 1, false},
                {4, 1536, 576, true},  {3, 300, 200, true},  {2, 7, 130, true}};
  for (const Shape& s : shapes) {
    Status st = check_linear(linear_ref, s.t, s.in, s.out, s.fp8, seed + s.in + s.out);
    EXPECT_TRUE(st.ok()) << s.t << "x" << s.in << "->" << s.out << (s.fp8 ? " fp8" : " bf16")
                         << ": " << st.to_string();
  }
}

// A token computed alone equals the same token inside a batch, bit for bit (CPU batch
// invariance), for both weight forms.
TEST(Linear, BatchInvariant) {
  Rng rng(testing::test_seed());
  const int32_t t = 5, in = 384, out = 200;
  auto x = rng.bf16_vector(size_t(t) * in, 2.f), w = rng.bf16_vector(size_t(out) * in, 0.1f);
  auto w8 = rng.e4m3_vector(size_t(out) * in, 10.f);
  std::vector<float> sw(2 * 3, 0.01f);
  for (bool fp8 : {false, true}) {
    std::vector<float> all(size_t(t) * out), one(out);
    auto p = bf16_params(x, w, t, in, out);
    if (fp8) p.weight = nullptr, p.weight_fp8 = w8.data(), p.weight_scale_inv = sw.data();
    p.y_f32 = all.data();
    ASSERT_TRUE(linear_ref(p).ok());
    p.x = x.data() + 3 * in;
    p.num_tokens = 1;
    p.y_f32 = one.data();
    ASSERT_TRUE(linear_ref(p).ok());
    for (int32_t i = 0; i < out; ++i) EXPECT_EQ(one[i], all[3 * out + i]) << fp8 << " " << i;
  }
}

TEST(Linear, ToleranceHandComputed) {
  EXPECT_EQ(linear_tolerance(true, 256.0, -2.0), 1.0 + 0x1p-6);  // 2^-8 M + 2^-7 |ref|
  EXPECT_EQ(linear_tolerance(false, 4096.0, 128.0), 2.0);        // 2^-12 M + 2^-7 |ref|
  // x = [1, -2], W = [[3, 4]]: ref = -5, M = 3 + 8 = 11.
  auto x = to_bf16({1.f, -2.f}), w = to_bf16({3.f, 4.f});
  auto p = bf16_params(x, w, 1, 2, 1);
  std::vector<float> ref = {-5.f}, bound(1, NAN);
  std::vector<float> unused(1);
  p.y_f32 = unused.data();
  ASSERT_TRUE(linear_tolerance_bounds(p, ref.data(), bound.data()).ok());
  EXPECT_EQ(bound[0], float(11 * 0x1p-12 + 5 * 0x1p-7));
}

TEST(Linear, ZeroTokensIsNoOp) {
  auto w = to_bf16({1.f});
  std::vector<float> y(1, -3.f);
  LinearParams p;
  p.weight = w.data();
  p.y_f32 = y.data();
  p.in_features = p.out_features = 1;
  ASSERT_TRUE(linear_ref(p).ok());
  EXPECT_EQ(y[0], -3.f);
}

struct Fp8Case {
  std::vector<bf16> x = to_bf16({1.f, 2.f, 3.f, 4.f});
  std::vector<uint8_t> w8 = to_e4m3({1.f, 1.f, 1.f, 1.f});
  std::vector<float> sw = {1.f};
  std::vector<float> y = std::vector<float>(2, -9.f);
  LinearParams params() {
    LinearParams p;
    p.x = x.data();
    p.weight_fp8 = w8.data();
    p.weight_scale_inv = sw.data();
    p.y_f32 = y.data();
    p.num_tokens = 2;
    p.in_features = 2;
    p.out_features = 1;
    return p;
  }
};

TEST(Linear, CheckedNonFiniteActivationIsOutOfRange) {
  Fp8Case c;
  c.x[3] = float_to_bf16(INFINITY);
  Status s = linear_ref(c.params());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  EXPECT_NE(s.message().find("x[1][1] = inf"), std::string::npos) << s.to_string();
  EXPECT_EQ(c.y[0], -9.f) << "a rejected call must not write";
}

TEST(Linear, CheckedNonFiniteScaleIsOutOfRange) {
  Fp8Case c;
  c.sw[0] = NAN;
  Status s = linear_ref(c.params());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  EXPECT_NE(s.message().find("weight_scale_inv[0] = nan"), std::string::npos) << s.to_string();
}

// Unchecked: out-of-contract activations give unspecified values for their token only.
TEST(Linear, UncheckedNonFiniteActivationStaysInItsRow) {
  ScopedCheckedMode unchecked(false);
  Fp8Case c;
  c.x[3] = float_to_bf16(NAN);
  ASSERT_TRUE(linear_ref(c.params()).ok());
  EXPECT_EQ(c.y[0], 3.f);  // token 0: 1 + 2
}

void expect_invalid(const LinearParams& p, const std::string& needle) {
  Status s = linear_ref(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
}

TEST(LinearRejects, EveryHostRule) {
  Fp8Case c;
  auto w = to_bf16({1.f, 1.f});
  std::vector<bf16> yb(2);
  auto p = c.params();
  p.num_tokens = -1;
  expect_invalid(p, "num_tokens = -1");
  p = c.params(), p.in_features = 0;
  expect_invalid(p, "in_features = 0");
  p = c.params(), p.out_features = 0;
  expect_invalid(p, "out_features = 0");
  p = c.params(), p.weight = w.data();
  expect_invalid(p, "weight and weight_fp8 are both set");
  p = c.params(), p.weight_fp8 = nullptr, p.weight_scale_inv = nullptr;
  expect_invalid(p, "weight and weight_fp8 are both null");
  p = c.params(), p.weight_scale_inv = nullptr;
  expect_invalid(p, "weight_scale_inv is null");
  p = c.params(), p.weight_fp8 = nullptr, p.weight = w.data();
  expect_invalid(p, "weight_scale_inv is set with a bf16 weight");
  p = c.params(), p.y = yb.data();
  expect_invalid(p, "y and y_f32 are both set");
  p = c.params(), p.y_f32 = nullptr;
  expect_invalid(p, "y and y_f32 are both null");
  p = c.params(), p.x = nullptr;
  expect_invalid(p, "x is null");
  // The output over x, at its start and overlapping only x's last element; next to it is fine.
  std::vector<bf16> xy(8);
  p = c.params(), p.x = xy.data(), p.y_f32 = nullptr, p.y = xy.data();
  expect_invalid(p, "the output overlaps x");
  p.y = xy.data() + 3;  // x is [2][2]: elements 0..3
  expect_invalid(p, "the output overlaps x");
  p.y = xy.data() + 4;
  EXPECT_TRUE(validate(p).ok());
  p = c.params();
  Status s = linear_tolerance_bounds(p, nullptr, c.y.data());
  EXPECT_NE(s.message().find("ref is null"), std::string::npos) << s.to_string();
  s = linear_tolerance_bounds(p, c.y.data(), nullptr);
  EXPECT_NE(s.message().find("bound is null"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace dsa::kernels
