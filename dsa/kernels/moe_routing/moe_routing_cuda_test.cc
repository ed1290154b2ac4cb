// GPU tests of moe_routing_cuda against moe_routing_ref (SPEC.md §8.6): expert ids bit-exact and
// weights equal (within 1e-6 relative; the kernel computes them exactly as the reference) on
// tie-heavy and continuous rows, padded rows -1 / 0, tiny and V3.2 shapes (256 experts, 8 groups,
// keep 4, top 8), the checked error word and the unchecked neutralisation, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/kernels/moe_routing/moe_routing.h"
#include "dsa/kernels/moe_routing/moe_routing_check.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/host_buffers.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::host;
using testing::Rng;

struct Case {
  std::vector<float> logits, bias;
  std::vector<int32_t> row_len;  // empty = null
  int32_t experts = 8, groups = 2, topk_group = 1, k = 2;
  float factor = 2.5f;
  bool norm = true;
  bool shared = false;  // the shared expert's slot after the k (shared_expert_id = E)
  int32_t slots() const { return k + (shared ? 1 : 0); }
  int32_t tokens() const { return static_cast<int32_t>(logits.size() / size_t(experts)); }
  MoeRoutingParams params(const float* l, const float* b, const int32_t* len, int32_t* ids,
                          float* w) const {
    MoeRoutingParams p;
    p.logits = l;
    p.bias = b;
    p.row_len = row_len.empty() ? nullptr : len;
    p.expert_ids = ids;
    p.weights = w;
    p.num_tokens = tokens();
    p.num_experts = experts;
    p.num_groups = groups;
    p.topk_group = topk_group;
    p.top_k = k;
    p.routed_scaling_factor = factor;
    p.norm_topk_prob = norm;
    p.shared_expert_id = shared ? experts : -1;
    return p;
  }
};

struct Result {
  std::vector<int32_t> ids;
  std::vector<float> w;
  Status status;
};

Result run_gpu(const Case& c) {
  auto dl = dev(c.logits), db = dev(c.bias);
  auto dlen = dev(c.row_len.empty() ? std::vector<int32_t>{0} : c.row_len);
  const size_t n = size_t(c.tokens()) * c.slots();
  auto dids = testing::poisoned<int32_t>(std::max<size_t>(n, 1), 0x80);  // an id nobody writes
  auto dw = testing::poisoned<float>(std::max<size_t>(n, 1));            // NaN
  Result r;
  r.status = moe_routing_cuda(c.params(dl.data(), db.data(), dlen.data(), dids.data(), dw.data()));
  r.ids = host(dids);
  r.w = host(dw);
  r.ids.resize(n);
  r.w.resize(n);
  return r;
}

Result run_ref(const Case& c) {
  Result r;
  r.ids.assign(size_t(c.tokens()) * c.slots(), INT32_MIN);
  r.w.assign(r.ids.size(), NAN);
  r.status = moe_routing_ref(
      c.params(c.logits.data(), c.bias.data(), c.row_len.data(), r.ids.data(), r.w.data()));
  return r;
}

// Like the check's inputs: bias from {-0.125, 0, 0.125}, half the rows from a 7-value set (ties at
// every stage), half continuous; every fifth row padded.
Case random_case(Rng& rng, int32_t tokens, int32_t e, int32_t g, int32_t tg, int32_t k,
                 bool with_row_len) {
  Case c;
  c.experts = e, c.groups = g, c.topk_group = tg, c.k = k;
  c.bias.resize(size_t(e));
  for (auto& b : c.bias) b = 0.125f * float(rng.randint(-1, 1));
  c.logits.resize(size_t(tokens) * e);
  for (int32_t t = 0; t < tokens; ++t)
    for (int32_t x = 0; x < e; ++x)
      c.logits[size_t(t) * e + x] =
          t % 2 == 0 ? 0.5f * float(rng.randint(-3, 3)) : rng.normal(0.f, 2.f);
  if (with_row_len) {
    c.row_len.resize(size_t(tokens));
    for (int32_t t = 0; t < tokens; ++t)
      c.row_len[t] = t % 5 == 4 ? 0 : int32_t(rng.randint(1, 99));
  }
  return c;
}

void expect_same(const Result& got, const Result& want, const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status.to_string();
  ASSERT_TRUE(want.status.ok()) << what << ": " << want.status.to_string();
  int bad = 0;
  int64_t not_identical = 0;
  for (size_t i = 0; i < want.ids.size(); ++i) {
    const bool w_ok = std::fabs(double(got.w[i]) - want.w[i]) <= 1e-6 * std::fabs(want.w[i]);
    not_identical += got.w[i] != want.w[i];
    if ((got.ids[i] != want.ids[i] || !w_ok) && bad++ < 5)
      ADD_FAILURE() << what << " slot " << i << ": expert " << got.ids[i] << " weight " << got.w[i]
                    << ", reference expert " << want.ids[i] << " weight " << want.w[i];
  }
  EXPECT_EQ(bad, 0) << what;
  if (not_identical != 0)
    std::printf("note: %s: %lld weights not bit-identical (expected 0)\n", what.c_str(),
                static_cast<long long>(not_identical));
}

TEST(MoeRoutingCuda, RandomMatchesReference) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t tokens, e, g, tg, k;
  } shapes[] = {{40, 8, 2, 1, 2},    {40, 4, 2, 1, 2},     {40, 16, 4, 2, 4}, {40, 12, 3, 2, 5},
                {40, 256, 8, 4, 8},  {4096, 256, 8, 4, 8}, {33, 64, 1, 1, 6}, {50, 128, 64, 8, 8},
                {21, 256, 8, 8, 40}, {7, 2048, 16, 4, 64}};
  int n = 0;
  for (const Shape& s : shapes) {
    for (bool with_row_len : {true, false}) {
      Rng rng(seed + n++);
      Case c = random_case(rng, s.tokens, s.e, s.g, s.tg, s.k, with_row_len);
      const std::string what = "T=" + std::to_string(s.tokens) + " E=" + std::to_string(s.e) +
                               " G=" + std::to_string(s.g) + " TG=" + std::to_string(s.tg) +
                               " k=" + std::to_string(s.k) + (with_row_len ? " row_len" : "");
      expect_same(run_gpu(c), run_ref(c), what);
      c.norm = false;
      expect_same(run_gpu(c), run_ref(c), what + " unnormalised");
      c.shared = true;
      expect_same(run_gpu(c), run_ref(c), what + " unnormalised, shared expert slot");
    }
  }
}

Status moe_routing_cuda_on_host_buffers(const MoeRoutingParams& hp) {
  DSA_RETURN_IF_ERROR(validate(hp));
  const size_t n = size_t(hp.num_tokens) * routing_slots(hp);
  using P = MoeRoutingParams;
  return testing::run_on_host_buffers(
      hp, moe_routing_cuda, testing::In<&P::logits>{size_t(hp.num_tokens) * hp.num_experts},
      testing::In<&P::bias>{size_t(hp.num_experts)},
      // A null row_len stays null (every row real).
      testing::In<&P::row_len>{hp.row_len != nullptr ? size_t(hp.num_tokens) : 0},
      testing::Out<&P::expert_ids>{n}, testing::Out<&P::weights>{n});
}

TEST(MoeRoutingCuda, MatchesIndependentFormulation) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t e, g, tg, k;
  } shapes[] = {{8, 2, 1, 2}, {4, 2, 1, 2}, {16, 4, 2, 4}, {12, 3, 2, 5}, {256, 8, 4, 8}};
  for (const Shape& s : shapes) {
    Status st =
        check_moe_routing(moe_routing_cuda_on_host_buffers, 40, s.e, s.g, s.tg, s.k, seed + s.e);
    EXPECT_TRUE(st.ok()) << "E=" << s.e << ": " << st.to_string();
  }
}

const float kLn3 = std::log(3.f);

// The reference test's hand-computed rows (group selection by top-2 sums, two groups kept, ties
// to the lower index, padded rows, unnormalised weights).
TEST(MoeRoutingCuda, HandComputed) {
  DSA_SKIP_WITHOUT_GPU();
  Case c;
  c.logits = {2.f, -1.f, 0.f, 0.f, kLn3, 0.f, -kLn3, 0.f};
  c.bias = {0.f, 0.f, 0.f, 0.f, 0.f, 0.3f, 0.f, 0.f};
  Result r = run_gpu(c);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_EQ(r.ids, (std::vector<int32_t>{5, 4}));
  EXPECT_NEAR(r.w[0], 1.0f, 1e-6);
  EXPECT_NEAR(r.w[1], 1.5f, 1e-6);
  c.topk_group = 2;
  r = run_gpu(c);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 5}));

  Case ties;
  ties.logits.assign(16, 0.f);
  ties.bias.assign(8, 0.f);
  r = run_gpu(ties);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 0, 1}));
  for (float w : r.w) EXPECT_NEAR(w, 1.25f, 1e-6);
  ties.bias = {0, 0, 0, 0, 0.3f, 0.2f, 0.2f, 0.2f};
  r = run_gpu(ties);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{4, 5, 4, 5}));

  Case padded;
  padded.logits.assign(3 * 8, 0.5f);
  padded.bias.assign(8, 0.f);
  padded.row_len = {7, 0, 1};
  r = run_gpu(padded);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, -1, -1, 0, 1}));
  EXPECT_EQ(r.w[2], 0.f);
  EXPECT_EQ(r.w[3], 0.f);

  Case raw;
  raw.logits = {kLn3, 0, 0, 0, 0, 0, 0, 0};
  raw.bias.assign(8, 0.f);
  raw.norm = false;
  r = run_gpu(raw);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(r.w[0], 0.75 * 2.5, 1e-6);
  EXPECT_NEAR(r.w[1], 0.5 * 2.5, 1e-6);
}

// Checked: a non-finite logit or bias, or a negative row_len, is OutOfRange through the error
// word (row = token; value = the expert index, or the row_len); the word is cleared afterwards.
TEST(MoeRoutingCuda, CheckedDataRules) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  Case c;
  c.logits.assign(16, 0.f);
  c.bias.assign(8, 0.f);
  c.logits[11] = NAN;
  Result r = run_gpu(c);
  EXPECT_EQ(r.status.code(), StatusCode::kOutOfRange) << r.status.to_string();
  EXPECT_NE(r.status.message().find("index 1 (value 3)"), std::string::npos)
      << r.status.to_string();
  c.logits[11] = INFINITY;
  EXPECT_EQ(run_gpu(c).status.code(), StatusCode::kOutOfRange);
  c.logits[11] = 0.f;
  c.bias[2] = INFINITY;
  r = run_gpu(c);
  EXPECT_EQ(r.status.code(), StatusCode::kOutOfRange) << r.status.to_string();
  EXPECT_NE(r.status.message().find("(value 2)"), std::string::npos) << r.status.to_string();
  c.bias[2] = 0.f;
  c.row_len = {3, -4};
  r = run_gpu(c);
  EXPECT_EQ(r.status.code(), StatusCode::kOutOfRange) << r.status.to_string();
  EXPECT_NE(r.status.message().find("index 1 (value -4)"), std::string::npos)
      << r.status.to_string();
  c.row_len = {3, 1};
  EXPECT_TRUE(run_gpu(c).status.ok());
}

// Unchecked: a NaN score is never preferred; a negative row_len is a padded row; no error left.
TEST(MoeRoutingCuda, UncheckedNeutralises) {
  DSA_SKIP_WITHOUT_GPU();
  {
    ScopedCheckedMode unchecked(false);
    Case c;
    c.logits = {NAN, 0, 0, 0, 0, 0, 0, 0, /* row 1 */ 1, 1, 1, 1, 1, 1, 1, 1};
    c.bias.assign(8, 0.f);
    c.row_len = {1, -4};
    Result r = run_gpu(c);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2, -1, -1}));
    Result want = run_ref(c);
    EXPECT_EQ(r.ids, want.ids);
  }
  ScopedCheckedMode checked(true);
  Case ok;
  ok.logits.assign(8, 0.f);
  ok.bias.assign(8, 0.f);
  EXPECT_TRUE(run_gpu(ok).status.ok());
}

TEST(MoeRoutingCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Case c = random_case(rng, 2048, 256, 8, 4, 8, true);
  Result a = run_gpu(c), b = run_gpu(c);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.ids, b.ids);
  for (size_t i = 0; i < a.w.size(); ++i) ASSERT_EQ(a.w[i], b.w[i]) << i;
}

TEST(MoeRoutingCuda, ZeroTokensAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  MoeRoutingParams p;
  p.num_experts = 8, p.num_groups = 2, p.top_k = 2;
  testing::expect_rejects(p, moe_routing_cuda,
                          {{"no tokens", [](auto&) {}, StatusCode::kOk},
                           {"num_groups", [](auto& q) { q.num_tokens = 1, q.num_groups = 3; },
                            StatusCode::kInvalidArgument, "num_groups = 3"}});
}

}  // namespace
}  // namespace dsa::kernels
