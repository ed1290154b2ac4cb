#include "dsa/kernels/rope/rope.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/rope/rope_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

// c(beta) = 64 ln(4096 / (2 pi beta)) / (2 ln 10000): c(32) = 10.47 -> low 10, c(1) = 22.51 ->
// high 23.
TEST(RopeYarn, CorrectionRangeAtV32) {
  YarnRange r = yarn_range(RopeConfig{});
  EXPECT_EQ(r.low, 10.0);
  EXPECT_EQ(r.high, 23.0);
}

// beta 800 / 700: c = -0.71 / -0.25 -> low = max(-1, 0) = 0, high = ceil(-0.25) = 0: equal, so
// high becomes 0.001.
TEST(RopeYarn, EqualBoundsAreSeparated) {
  RopeConfig c;
  c.beta_fast = 800;
  c.beta_slow = 700;
  ASSERT_TRUE(validate(c).ok());
  YarnRange r = yarn_range(c);
  EXPECT_EQ(r.low, 0.0);
  EXPECT_EQ(r.high, 0.001);
}

// Below low the frequency is theta_i; above high it is theta_i / 40; at i = 16 the ramp is 6/13 and
// theta' = 0.01 (1 - 6/13 * 39/40) = 0.0055.
TEST(RopeYarn, InverseFrequenciesHandComputed) {
  auto f = rope_inv_freq(RopeConfig{});
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[9], 0.0749894209, 1e-6 * 0.075);     // 10^-1.125, ramp 0
  EXPECT_NEAR(f[10], 0.0562341325, 1e-6 * 0.056);    // 10^-1.25, ramp 0 at i = low
  EXPECT_FLOAT_EQ(f[16], 0.0055f);                   // mid ramp
  EXPECT_NEAR(f[23], 3.33380e-5, 1e-5 * 3.3338e-5);  // 10^-2.875 / 40, ramp 1
  EXPECT_NEAR(f[31], 3.33380e-6, 1e-5 * 3.3338e-6);  // 10^-3.875 / 40
}

// factor 1 is plain RoPE (GLM-5's rope_parameters "default", theta 1e6): theta^(-2i/64) rounded
// once to fp32, for every pair including those inside the ramp.
TEST(RopeYarn, FactorOneIsPlainRope) {
  RopeConfig c;
  c.theta = 1000000.0;
  c.factor = 1.0;
  c.original_max_position = 202752;
  auto f = rope_inv_freq(c);
  for (int i = 0; i < kRopePairs; ++i) {
    EXPECT_EQ(f[i], static_cast<float>(std::pow(1000000.0, -2.0 * i / 64.0))) << "pair " << i;
  }
  EXPECT_NEAR(softmax_scale(c, 192, 64), 0.0625, 1e-9);  // GLM-5: 256^-1/2
}

TEST(RopeYarn, SoftmaxScale) {
  RopeConfig c;
  EXPECT_NEAR(softmax_scale(c, 64, 64), 0.1656269, 1e-7);   // tiny
  EXPECT_NEAR(softmax_scale(c, 128, 64), 0.1352338, 1e-7);  // V3.2
  c.factor = 1.0;                                           // no YaRN temperature: plain 192^-1/2
  EXPECT_NEAR(softmax_scale(c, 128, 64), 0.0721688, 1e-7);
}

TEST(RopeTable, HandComputedRows) {
  std::vector<float> cos(3 * kRopePairs, NAN), sin(cos.size(), NAN);
  ASSERT_TRUE(rope_table_ref({RopeConfig{}, 3, cos.data(), sin.data()}).ok());
  for (int32_t i = 0; i < kRopePairs; ++i) {
    EXPECT_EQ(cos[i], 1.f);
    EXPECT_EQ(sin[i], 0.f);
  }
  EXPECT_EQ(cos[kRopePairs], 0.540302277f);  // fp32(cos(1)), theta'_0 = 1
  EXPECT_EQ(sin[kRopePairs], 0.841470957f);
  EXPECT_EQ(cos[2 * kRopePairs], -0.416146845f);  // cos(2)
}

// Bit equality with the independent table over the whole V3.2 context plus lookahead (past
// max_position_embeddings, as §8.3 allows).
TEST(RopeTable, MatchesIndependentFormulationOverFullContext) {
  Status s = check_rope_table(RopeConfig{}, 163840 + 5 * 4);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

struct ApplyCase {
  std::vector<bf16> x;
  std::vector<int32_t> pos;
  std::vector<float> cos, sin;
  RopeParams params(RopeStyle style) {
    RopeParams p;
    p.x = x.data();
    p.positions = pos.data();
    p.cos = cos.data();
    p.sin = sin.data();
    p.num_tokens = static_cast<int32_t>(pos.size());
    p.token_stride = 64;
    p.num_positions = static_cast<int32_t>(cos.size() / kRopePairs);
    p.style = style;
    return p;
  }
};

// A table whose row 1 is the 3-4-5 rotation (cos 0.6, sin 0.8): the pair (1, 2) goes to
// (0.6 - 1.6, 0.8 + 1.2) = (-1, 2). Interleaved pairs are (x[2i], x[2i+1]); non-interleaved pairs
// are (x[i], x[i+32]).
ApplyCase rotation_case() {
  ApplyCase c;
  c.cos.assign(2 * kRopePairs, 1.f);
  c.sin.assign(2 * kRopePairs, 0.f);
  for (int32_t i = 0; i < kRopePairs; ++i)
    c.cos[kRopePairs + i] = 0.6f, c.sin[kRopePairs + i] = 0.8f;
  c.pos = {1};
  c.x.assign(64, float_to_bf16(0.f));
  return c;
}

TEST(RopeApply, HandComputedInterleaved) {
  ApplyCase c = rotation_case();
  c.x[0] = float_to_bf16(1.f), c.x[1] = float_to_bf16(2.f);
  c.x[32] = float_to_bf16(4.f);  // pair (x[32], x[33] = 0) -> (2.4, 3.2)
  ASSERT_TRUE(rope_ref(c.params(RopeStyle::kInterleaved)).ok());
  EXPECT_EQ(bf16_to_float(c.x[0]), -1.f);
  EXPECT_EQ(bf16_to_float(c.x[1]), 2.f);
  EXPECT_EQ(bf16_to_float(c.x[32]), round_to_bf16(2.4f));
  EXPECT_EQ(bf16_to_float(c.x[33]), round_to_bf16(3.2f));
}

TEST(RopeApply, HandComputedNonInterleaved) {
  ApplyCase c = rotation_case();
  c.x[0] = float_to_bf16(1.f), c.x[32] = float_to_bf16(2.f);
  c.x[1] = float_to_bf16(4.f);  // pair (x[1], x[33] = 0) -> (2.4, 3.2); x[0]'s partner is x[32]
  ASSERT_TRUE(rope_ref(c.params(RopeStyle::kNonInterleaved)).ok());
  EXPECT_EQ(bf16_to_float(c.x[0]), -1.f);
  EXPECT_EQ(bf16_to_float(c.x[32]), 2.f);
  EXPECT_EQ(bf16_to_float(c.x[1]), round_to_bf16(2.4f));
  EXPECT_EQ(bf16_to_float(c.x[33]), round_to_bf16(3.2f));
}

// Position 0 (cos 1, sin 0 in the real table) is the identity in both styles.
TEST(RopeApply, PositionZeroIsIdentity) {
  Rng rng(testing::test_seed());
  ApplyCase c;
  c.cos.resize(4 * kRopePairs), c.sin.resize(4 * kRopePairs);
  ASSERT_TRUE(rope_table_ref({RopeConfig{}, 4, c.cos.data(), c.sin.data()}).ok());
  c.pos = {0, 0};
  c.x = rng.bf16_vector(128, 3.f);
  const auto x0 = c.x;
  ASSERT_TRUE(rope_ref(c.params(RopeStyle::kInterleaved)).ok());
  ASSERT_TRUE(rope_ref(c.params(RopeStyle::kNonInterleaved)).ok());
  for (size_t i = 0; i < x0.size(); ++i) EXPECT_EQ(c.x[i].bits, x0[i].bits) << i;
}

// Independent formulations (complex multiply, rotate_half) on random strided heads.
TEST(RopeApply, RandomRowsMatchIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, heads] : {std::pair{33, 3}, {4, 16}, {1, 1}}) {
    Status s = check_rope(rope_ref, tokens, heads, seed + heads);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " H=" << heads << ": " << s.to_string();
  }
}

TEST(RopeApply, CheckedPositionOutOfTableIsOutOfRange) {
  for (int32_t bad : {2, -1, INT32_MIN}) {
    ApplyCase c = rotation_case();
    c.x.assign(128, float_to_bf16(1.f));
    c.pos = {1, bad};
    auto p = c.params(RopeStyle::kInterleaved);
    Status s = rope_ref(p);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find("positions[1] = " + std::to_string(bad)), std::string::npos)
        << s.to_string();
    EXPECT_EQ(bf16_to_float(c.x[0]), 1.f) << "a rejected call must not write";
  }
}

TEST(RopeApply, UncheckedPositionOutOfTableLeavesRowUnrotated) {
  ScopedCheckedMode unchecked(false);
  ApplyCase c = rotation_case();
  c.x.assign(128, float_to_bf16(1.f));
  c.pos = {1, 7};
  ASSERT_TRUE(rope_ref(c.params(RopeStyle::kInterleaved)).ok());
  EXPECT_EQ(bf16_to_float(c.x[0]), round_to_bf16(0.6f - 0.8f));  // row 0 rotated
  for (int32_t j = 64; j < 128; ++j) EXPECT_EQ(bf16_to_float(c.x[j]), 1.f) << j;
}

// Out of place: y's rope slots hold what the in-place call leaves in x, x is not written, y's other
// elements are not written, and (unchecked) a token outside the table is copied unrotated.
TEST(RopeApply, OutOfPlaceIsTheInPlaceResultElsewhere) {
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  ApplyCase c;
  c.cos.resize(8 * kRopePairs), c.sin.resize(8 * kRopePairs);
  ASSERT_TRUE(rope_table_ref({RopeConfig{}, 8, c.cos.data(), c.sin.data()}).ok());
  c.pos = {3, 7, 0, 9, 5};  // 9: outside the table
  const int32_t T = 5, H = 3;
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved}) {
    c.x = rng.bf16_vector(size_t(T) * 250, 2.f);
    const std::vector<bf16> x0 = c.x;
    auto p = c.params(style);
    p.num_heads = H, p.head_stride = 80, p.token_stride = 250;
    std::vector<bf16> y(size_t(T) * H * 100, float_to_bf16(-7.f));
    p.y = y.data(), p.y_head_stride = 100, p.y_token_stride = H * 100;
    ASSERT_TRUE(rope_ref(p).ok());
    for (size_t i = 0; i < x0.size(); ++i)
      ASSERT_EQ(c.x[i].bits, x0[i].bits) << "x written at " << i;
    p.y = nullptr;
    ASSERT_TRUE(rope_ref(p).ok());  // in place: the expected values
    for (int32_t t = 0; t < T; ++t) {
      for (int32_t h = 0; h < H; ++h) {
        for (int32_t j = 0; j < 100; ++j) {
          const bf16 got = y[size_t(t * H * 100 + h * 100 + j)];
          const bf16 want = j < 64 ? c.x[size_t(t * 250 + h * 80 + j)] : float_to_bf16(-7.f);
          ASSERT_EQ(got.bits, want.bits) << "t " << t << " h " << h << " j " << j;
        }
      }
    }
    for (int32_t j = 0; j < 64; ++j)  // token 3 (outside the table): in place, left as it was
      EXPECT_EQ(c.x[size_t(3 * 250 + j)].bits, x0[size_t(3 * 250 + j)].bits);
  }
}

TEST(RopeApply, ZeroTokensIsNoOpWithoutPointers) {
  RopeParams p;
  EXPECT_TRUE(rope_ref(p).ok());
}

void expect_invalid(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
}

TEST(RopeRejects, Config) {
  std::vector<float> cos(kRopePairs), sin(kRopePairs);
  auto table = [&](RopeConfig c) { return rope_table_ref({c, 1, cos.data(), sin.data()}); };
  RopeConfig c;
  c.theta = 1.0;
  expect_invalid(table(c), "theta = 1");
  c = {};
  c.factor = 0.5;
  expect_invalid(table(c), "factor = 0.5");
  c = {};
  c.original_max_position = 0;
  expect_invalid(table(c), "original_max_position = 0");
  c = {};
  c.beta_slow = 0;
  expect_invalid(table(c), "beta_slow = 0");
  c = {};
  c.beta_fast = 1;
  expect_invalid(table(c), "beta_fast = 1");
  c = {};
  c.mscale = 0.707;
  expect_invalid(table(c), "mscale = 0.707");
  c = {};
  c.mscale_all_dim = NAN;
  expect_invalid(table(c), "mscale_all_dim = nan");
}

TEST(RopeRejects, Table) {
  std::vector<float> buf(kRopePairs);
  expect_invalid(rope_table_ref({RopeConfig{}, -1, buf.data(), buf.data()}), "num_positions = -1");
  expect_invalid(rope_table_ref({RopeConfig{}, 1, nullptr, buf.data()}), "cos is null");
  expect_invalid(rope_table_ref({RopeConfig{}, 1, buf.data(), nullptr}), "sin is null");
}

TEST(RopeRejects, Apply) {
  ApplyCase c = rotation_case();
  c.x.resize(2 * 192);
  c.pos = {1, 1};
  auto good = [&] {
    auto p = c.params(RopeStyle::kInterleaved);
    p.num_heads = 2;
    p.head_stride = 96;
    p.token_stride = 192;
    return p;
  };
  ASSERT_TRUE(rope_ref(good()).ok());
  auto p = good();
  p.num_tokens = -3;
  expect_invalid(rope_ref(p), "num_tokens = -3");
  p = good(), p.num_heads = 0;
  expect_invalid(rope_ref(p), "num_heads = 0");
  p = good(), p.head_stride = 63;
  expect_invalid(rope_ref(p), "head_stride = 63");
  p = good(), p.token_stride = 159;  // one head's 64 values past the second head's start
  expect_invalid(rope_ref(p), "token_stride = 159");
  p = good(), p.num_positions = 0;
  expect_invalid(rope_ref(p), "num_positions = 0");
  std::vector<bf16> y(2 * 192);
  p = good(), p.y = y.data(), p.y_head_stride = 63, p.y_token_stride = 192;
  expect_invalid(rope_ref(p), "y_head_stride = 63");
  p = good(), p.y = y.data(), p.y_head_stride = 96, p.y_token_stride = 159;
  expect_invalid(rope_ref(p), "y_token_stride = 159");
  p = good(), p.y = p.x, p.y_head_stride = 96, p.y_token_stride = 192;
  expect_invalid(rope_ref(p), "y == x");
  p = good(), p.y = y.data(), p.y_head_stride = 96, p.y_token_stride = 192;
  EXPECT_TRUE(rope_ref(p).ok());
  p = good(), p.style = static_cast<RopeStyle>(7);
  expect_invalid(rope_ref(p), "style = 7");
  p = good(), p.x = nullptr;
  expect_invalid(rope_ref(p), "x is null");
  p = good(), p.positions = nullptr;
  expect_invalid(rope_ref(p), "positions is null");
  p = good(), p.cos = nullptr;
  expect_invalid(rope_ref(p), "cos is null");
  p = good(), p.sin = nullptr;
  expect_invalid(rope_ref(p), "sin is null");
}

}  // namespace
}  // namespace dsa::kernels
