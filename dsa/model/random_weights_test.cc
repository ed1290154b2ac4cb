// --random-weights at the model: built from config.json alone (a narrowed tiny config made FP8 as
// V3.2 ships), on the CPU both ways — from the host image of make-checkpoint's tensors, and
// generated in backend memory by the counter-based fill the CUDA kernel shares (the device path,
// run here through the host loop) — finite logits, deterministic per seed, other seeds other
// values. Also the fill itself: deterministic, in range, the same element by element in any order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsa/core/random_fill.h"
#include "dsa/model/dsa_model.h"
#include "dsa/model/model_test_util.h"
#include "dsa/runtime/random_fill.h"

namespace dsa::model {
namespace {

using runtime::ForwardMode;

// One EXTEND of a 10-token prompt; returns the last row's logits (the forward's only sample).
std::vector<float> prompt_logits(bool in_backend, uint64_t seed) {
  testing::TempDir dir;
  testing::write_tiny_fp8_config(dir / "", 2);
  ModelOptions o;
  o.max_requests = 1;
  o.max_context = 128;
  o.max_extend_rows = 16;
  o.random_weights = true;
  o.random_seed = seed;
  o.random_weights_in_backend = in_backend;
  auto m = DsaModel::load(dir / "", o, kernels::cpu_ops());
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  auto slot = (*m)->pages().open_request();
  EXPECT_TRUE(slot.ok());
  EXPECT_TRUE((*m)->pages().reserve(*slot, 10).ok());
  runtime::ForwardBatch fb;
  fb.mode = ForwardMode::kExtend;
  fb.requests = {{*slot, 0, 10, 9, 1}};
  const std::vector<int32_t> tokens = {0, 5, 17, 300, 4000, 6000, 42, 42, 1, 7};
  ForwardOutput out;
  Status s = (*m)->forward(fb, tokens, {}, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out.logits;
}

void expect_finite_and_spread(const std::vector<float>& logits, const char* what) {
  ASSERT_EQ(logits.size(), 6144u) << what;
  double lo = INFINITY, hi = -INFINITY;
  for (float x : logits) {
    ASSERT_TRUE(std::isfinite(x)) << what;
    lo = std::min(lo, double(x));
    hi = std::max(hi, double(x));
  }
  // Not all equal (a zero weight somewhere would flatten them), and not blown up.
  EXPECT_GT(hi - lo, 1e-3) << what;
  EXPECT_LT(hi - lo, 1e4) << what;
}

TEST(RandomWeights, HostImageGivesFiniteDeterministicLogits) {
  const std::vector<float> a = prompt_logits(false, 3), b = prompt_logits(false, 3),
                           c = prompt_logits(false, 4);
  expect_finite_and_spread(a, "host image");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(RandomWeights, BackendFillGivesFiniteDeterministicLogits) {
  const std::vector<float> a = prompt_logits(true, 3), b = prompt_logits(true, 3),
                           c = prompt_logits(true, 4);
  expect_finite_and_spread(a, "backend fill");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

double spread(const std::vector<float>& v) {
  double sum = 0, sq = 0;
  for (float x : v) sum += x, sq += double(x) * x;
  const double mean = sum / double(v.size());
  return std::sqrt(std::max(0.0, sq / double(v.size()) - mean * mean));
}

// The device path's magnitudes are make-checkpoint's (other values, the same distributions): the
// logits' standard deviations agree within a factor of 2 (a wrong scale or amplitude anywhere in
// the stack moves them by far more, layer after layer).
TEST(RandomWeights, BackendFillHasTheHostImagesMagnitudes) {
  const double host = spread(prompt_logits(false, 3)), backend = spread(prompt_logits(true, 3));
  std::printf("logit standard deviation: host image %.4f, backend fill %.4f\n", host, backend);
  EXPECT_GT(backend, host / 2);
  EXPECT_LT(backend, host * 2);
}

TEST(RandomFill, DeterministicInRangeAndOrderFree) {
  const FillSpec u{FillKind::kBf16Uniform, 99, 0.25f};
  std::vector<bf16> v(4096);
  ASSERT_TRUE(runtime::random_fill(kernels::Backend::kCpu, v.data(), v.size(), u).ok());
  double sum = 0, sq = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const float x = bf16_to_float(v[i]);
    ASSERT_LE(std::fabs(x), 0.25f);
    sum += x;
    sq += double(x) * x;
  }
  // Uniform(+-0.25): mean 0, variance 0.25^2 / 3 (4096 draws: loose bounds, fixed hash).
  EXPECT_NEAR(sum / 4096, 0.0, 0.02);
  EXPECT_NEAR(sq / 4096, 0.0625 / 3, 0.003);
  // Element i depends on (key, i) only: a fill of the tail from i equals the tail.
  std::vector<bf16> w(4096);
  for (size_t i = 4095;; --i) {
    fill_element(u, w.data(), i);
    if (i == 0) break;
  }
  EXPECT_EQ(0, std::memcmp(v.data(), w.data(), v.size() * 2));
  // FP8 codes under their amplitude never saturate past 448, and the constant kinds are exact.
  std::vector<e4m3> q(1000);
  ASSERT_TRUE(runtime::random_fill(kernels::Backend::kCpu, q.data(), q.size(),
                                   {FillKind::kE4m3Uniform, 5, 448.0f})
                  .ok());
  for (e4m3 x : q) ASSERT_TRUE(std::isfinite(e4m3_to_float(x)));
  std::vector<float> f(10);
  ASSERT_TRUE(runtime::random_fill(kernels::Backend::kCpu, f.data(), f.size(),
                                   {FillKind::kF32Const, 0, 0.125f})
                  .ok());
  for (float x : f) EXPECT_EQ(x, 0.125f);
  std::vector<bf16> other(4096);
  ASSERT_TRUE(runtime::random_fill(kernels::Backend::kCpu, other.data(), other.size(),
                                   {FillKind::kBf16Uniform, 100, 0.25f})
                  .ok());
  EXPECT_NE(0, std::memcmp(v.data(), other.data(), v.size() * 2)) << "another key, other values";
}

}  // namespace
}  // namespace dsa::model
