// The router-margin probe the CUDA end-to-end tests use to recognise near-ties inside the model.
#include "tests/e2e/router_margin.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/e2e/model_compare.h"

namespace dsa::e2e {
namespace {

double logit_of(double s) { return std::log(s / (1.0 - s)); }  // sigmoid^-1

// Two groups of two experts, one group kept, both of its experts taken: the margin is the
// difference of the group sums (0.9 + 0.7 vs 0.8 + 0.75 -> 0.05); padded rows are not routed.
TEST(RouterMargin, GroupMarginOfAHandMadeRow) {
  std::vector<float> logits = {float(logit_of(0.9)),
                               float(logit_of(0.7)),
                               float(logit_of(0.8)),
                               float(logit_of(0.75)),
                               0.f,
                               0.f,
                               0.f,
                               0.f};
  std::vector<float> bias(4, 0.f);
  std::vector<int32_t> row_len = {5, 0};
  std::vector<int32_t> ids(4);
  std::vector<float> w(4);
  kernels::MoeRoutingParams p;
  p.logits = logits.data();
  p.bias = bias.data();
  p.row_len = row_len.data();
  p.expert_ids = ids.data();
  p.weights = w.data();
  p.num_tokens = 2;
  p.num_experts = 4;
  p.num_groups = 2;
  p.topk_group = 1;
  p.top_k = 2;
  reset_router_margin();
  ASSERT_TRUE(probed_cpu_ops().moe_routing(p).ok());
  EXPECT_NEAR(router_margin(), 0.05, 1e-6);
  EXPECT_EQ(ids[0], 0);  // the routing itself is the reference's
  EXPECT_EQ(ids[2], -1);
}

// Through the model: every forward routes, so the probe reports a finite, positive margin.
TEST(RouterMargin, ModelForwardRecordsAMargin) {
  auto m = load_tiny(probed_cpu_ops(), {});
  ASSERT_TRUE(m);
  reset_router_margin();
  EXPECT_TRUE(std::isinf(router_margin()));
  (void)last_rows(*m, golden().prompts[0].ids, 1);
  EXPECT_GT(router_margin(), 0.0);
  EXPECT_LT(router_margin(), 1.0);
}

}  // namespace
}  // namespace dsa::e2e
