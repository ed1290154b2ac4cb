#include "dsa/kernels/moe_routing/moe_routing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/moe_routing/moe_routing_check.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

struct Case {
  std::vector<float> logits, bias;
  std::vector<int32_t> row_len;
  std::vector<int32_t> ids;
  std::vector<float> w;
  int32_t experts = 8, groups = 2, topk_group = 1, k = 2;
  bool shared = false;
  MoeRoutingParams params() {
    const int32_t tokens = static_cast<int32_t>(logits.size()) / experts;
    ids.assign(size_t(tokens) * (k + (shared ? 1 : 0)), INT32_MIN);
    w.assign(ids.size(), NAN);
    MoeRoutingParams p;
    p.logits = logits.data();
    p.bias = bias.data();
    p.row_len = row_len.empty() ? nullptr : row_len.data();
    p.expert_ids = ids.data();
    p.weights = w.data();
    p.num_tokens = tokens;
    p.num_experts = experts;
    p.num_groups = groups;
    p.topk_group = topk_group;
    p.top_k = k;
    p.routed_scaling_factor = 2.5f;
    p.shared_expert_id = shared ? experts : -1;
    return p;
  }
};

const float kLn3 = std::log(3.f);

// 8 experts in 2 groups, keep 1 group, pick 2. s = [0.881, 0.269, 0.5, 0.5 | 0.75, 0.5, 0.25, 0.5];
// bias lifts expert 5 by 0.3, so s' of group 1 = [0.75, 0.8, 0.25, 0.5] (top-2 sum 1.55) beats
// group 0 (0.881 + 0.5 = 1.381) although expert 0 has the best single s'. Picks: 5 (0.8), 4
// (0.75). Weights use s, not s': 0.5 / 1.25 * 2.5 = 1.0 and 0.75 / 1.25 * 2.5 = 1.5.
TEST(MoeRouting, HandComputedGroupSelection) {
  Case c;
  c.logits = {2.f, -1.f, 0.f, 0.f, kLn3, 0.f, -kLn3, 0.f};
  c.bias = {0.f, 0.f, 0.f, 0.f, 0.f, 0.3f, 0.f, 0.f};
  ASSERT_TRUE(moe_routing_ref(c.params()).ok());
  EXPECT_EQ(c.ids, (std::vector<int32_t>{5, 4}));
  EXPECT_NEAR(c.w[0], 1.0f, 1e-6);
  EXPECT_NEAR(c.w[1], 1.5f, 1e-6);
}

// Same row with two groups kept: the best two experts overall by s' are 0 (0.881) and 5 (0.8).
TEST(MoeRouting, HandComputedTwoGroupsKept) {
  Case c;
  c.topk_group = 2;
  c.logits = {2.f, -1.f, 0.f, 0.f, kLn3, 0.f, -kLn3, 0.f};
  c.bias = {0.f, 0.f, 0.f, 0.f, 0.f, 0.3f, 0.f, 0.f};
  ASSERT_TRUE(moe_routing_ref(c.params()).ok());
  EXPECT_EQ(c.ids, (std::vector<int32_t>{0, 5}));
  const double s0 = 1.0 / (1.0 + std::exp(-2.0));
  EXPECT_NEAR(c.w[0], s0 / (s0 + 0.5) * 2.5, 1e-6);
  EXPECT_NEAR(c.w[1], 0.5 / (s0 + 0.5) * 2.5, 1e-6);
}

// Ties at every stage go to the lower index. All scores equal: the groups tie (group 0 kept) and
// its experts tie (0 and 1 picked), weights 0.5 / 1.0 * 2.5. Then group 1 wins outright and
// experts 5, 6, 7 tie behind expert 4: picks 4, then 5.
TEST(MoeRouting, TiesGoToLowerIndex) {
  Case c;
  c.logits.assign(16, 0.f);
  c.bias.assign(8, 0.f);
  ASSERT_TRUE(moe_routing_ref(c.params()).ok());
  EXPECT_EQ(c.ids, (std::vector<int32_t>{0, 1, 0, 1}));
  for (float w : c.w) EXPECT_NEAR(w, 1.25f, 1e-6);
  c.bias = {0, 0, 0, 0, 0.3f, 0.2f, 0.2f, 0.2f};
  ASSERT_TRUE(moe_routing_ref(c.params()).ok());
  EXPECT_EQ(c.ids, (std::vector<int32_t>{4, 5, 4, 5}));
}

TEST(MoeRouting, PaddedRowsGetNoExperts) {
  Case c;
  c.logits.assign(3 * 8, 0.5f);
  c.bias.assign(8, 0.f);
  c.row_len = {7, 0, 1};
  ASSERT_TRUE(moe_routing_ref(c.params()).ok());
  EXPECT_EQ(c.ids, (std::vector<int32_t>{0, 1, -1, -1, 0, 1}));
  EXPECT_EQ(c.w[2], 0.f);
  EXPECT_EQ(c.w[3], 0.f);
  EXPECT_NEAR(c.w[0], 1.25f, 1e-6);
}

TEST(MoeRouting, WithoutNormalisationWeightsAreScaledScores) {
  Case c;
  c.logits = {kLn3, 0, 0, 0, 0, 0, 0, 0};
  c.bias.assign(8, 0.f);
  auto p = c.params();
  p.norm_topk_prob = false;
  ASSERT_TRUE(moe_routing_ref(p).ok());
  EXPECT_EQ(c.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(c.w[0], 0.75 * 2.5, 1e-6);
  EXPECT_NEAR(c.w[1], 0.5 * 2.5, 1e-6);
}

// Brute force over all subsets (E <= 16) and full sorts (V3.2's 256 experts) on tie-heavy and
// continuous rows, padded rows included.
TEST(MoeRouting, RandomMatchesIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t e, g, tg, k;
  } shapes[] = {{8, 2, 1, 2}, {4, 2, 1, 2}, {16, 4, 2, 4}, {12, 3, 2, 5}, {256, 8, 4, 8}};
  for (const Shape& s : shapes) {
    Status st = check_moe_routing(moe_routing_ref, 40, s.e, s.g, s.tg, s.k, seed + s.e);
    EXPECT_TRUE(st.ok()) << "E=" << s.e << ": " << st.to_string();
  }
}

TEST(MoeRouting, CheckedDataRules) {
  Case c;
  c.logits.assign(16, 0.f);
  c.bias.assign(8, 0.f);
  c.logits[11] = NAN;
  Status s = moe_routing_ref(c.params());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("logits[1][3] = nan"), std::string::npos) << s.to_string();
  EXPECT_EQ(c.ids[0], INT32_MIN) << "a rejected call must not write";
  c.logits[11] = 0.f;
  c.bias[2] = INFINITY;
  s = moe_routing_ref(c.params());
  EXPECT_NE(s.message().find("bias[2] = inf"), std::string::npos) << s.to_string();
  c.bias[2] = 0.f;
  c.row_len = {3, -4};
  s = moe_routing_ref(c.params());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("row_len[1] = -4"), std::string::npos) << s.to_string();
}

// Unchecked: a NaN score is never preferred; a negative row_len is a padded row.
TEST(MoeRouting, UncheckedNeutralises) {
  ScopedCheckedMode unchecked(false);
  Case c;
  c.logits = {NAN, 0, 0, 0, 0, 0, 0, 0, /* row 1 */ 1, 1, 1, 1, 1, 1, 1, 1};
  c.bias.assign(8, 0.f);
  c.row_len = {1, -4};
  ASSERT_TRUE(moe_routing_ref(c.params()).ok());
  EXPECT_EQ(c.ids, (std::vector<int32_t>{1, 2, -1, -1}));
}

TEST(MoeRouting, ZeroTokensIsNoOpWithoutPointers) {
  MoeRoutingParams p;
  p.num_experts = 8, p.num_groups = 2, p.top_k = 2;
  EXPECT_TRUE(moe_routing_ref(p).ok());
}

// The shared expert's slot: rows of k + 1, the first k exactly the unshared routing's, then
// expert E with weight 1 (a padded row: -1 and 0 in all k + 1).
TEST(MoeRouting, SharedExpertSlotFollowsTheRoutedOnes) {
  testing::Rng rng(testing::test_seed());
  Case c;
  c.experts = 16, c.groups = 4, c.topk_group = 2, c.k = 3;
  const int32_t tokens = 23;
  c.logits = rng.normal_vector(size_t(tokens) * c.experts, 2.f);
  c.bias.assign(size_t(c.experts), 0.f);
  for (auto& b : c.bias) b = 0.125f * float(rng.randint(-1, 1));
  for (int32_t t = 0; t < tokens; ++t) c.row_len.push_back(t % 5 == 4 ? 0 : 1 + t);
  ASSERT_TRUE(moe_routing_ref(c.params()).ok());
  const std::vector<int32_t> ids = c.ids;
  const std::vector<float> w = c.w;
  c.shared = true;
  ASSERT_TRUE(moe_routing_ref(c.params()).ok());
  for (int32_t t = 0; t < tokens; ++t) {
    const bool padded = c.row_len[size_t(t)] == 0;
    for (int32_t j = 0; j < c.k; ++j) {
      EXPECT_EQ(c.ids[size_t(t * 4 + j)], ids[size_t(t * 3 + j)]) << t << " " << j;
      EXPECT_EQ(c.w[size_t(t * 4 + j)], w[size_t(t * 3 + j)]) << t << " " << j;
    }
    EXPECT_EQ(c.ids[size_t(t * 4 + 3)], padded ? -1 : 16) << t;
    EXPECT_EQ(c.w[size_t(t * 4 + 3)], padded ? 0.f : 1.f) << t;
  }
}

TEST(MoeRoutingRejects, EveryHostRule) {
  Case c;
  c.logits.assign(8, 0.f);
  c.bias.assign(8, 0.f);
  auto expect = [&](auto mutate, const std::string& needle) {
    auto p = c.params();
    mutate(p);
    Status s = moe_routing_ref(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
  };
  using P = MoeRoutingParams;
  expect([](P& p) { p.num_tokens = -1; }, "num_tokens = -1");
  expect([](P& p) { p.num_experts = 1; }, "num_experts = 1");
  expect([](P& p) { p.num_groups = 0; }, "num_groups = 0");
  expect([](P& p) { p.num_groups = 8; }, "num_groups = 8");  // groups of one expert
  expect([](P& p) { p.num_groups = 3; }, "num_groups = 3: must divide num_experts = 8");
  expect([](P& p) { p.topk_group = 0; }, "topk_group = 0");
  expect([](P& p) { p.topk_group = 3; }, "topk_group = 3");
  expect([](P& p) { p.top_k = 0; }, "top_k = 0");
  expect([](P& p) { p.top_k = 5; }, "top_k = 5");  // only 4 experts in the kept group
  expect([](P& p) { p.routed_scaling_factor = 0.f; }, "routed_scaling_factor = 0");
  expect([](P& p) { p.routed_scaling_factor = NAN; }, "routed_scaling_factor = nan");
  expect([](P& p) { p.logits = nullptr; }, "logits is null");
  expect([](P& p) { p.bias = nullptr; }, "bias is null");
  expect([](P& p) { p.expert_ids = nullptr; }, "expert_ids is null");
  expect([](P& p) { p.weights = nullptr; }, "weights is null");
  expect([](P& p) { p.shared_expert_id = 3; }, "shared_expert_id = 3: must be -1 (none) or");
  expect([](P& p) { p.shared_expert_id = 9; }, "shared_expert_id = 9");
}

}  // namespace
}  // namespace dsa::kernels
