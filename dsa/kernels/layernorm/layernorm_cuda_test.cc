// GPU tests of layernorm_cuda against the CPU reference (SPEC.md §8.3): within 1 bf16 ulp,
// deterministic, in place allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "dsa/cuda/device_buffer.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/layernorm/layernorm.h"
#include "dsa/kernels/layernorm/layernorm_check.h"
#include "dsa/testing/bf16_values.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/host_buffers.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::dev;
using testing::host;
using testing::Rng;

struct Problem {
  int32_t tokens, dim;
  int64_t xs, ys;
  std::vector<bf16> x;
  std::vector<float> w, b;
};

// Rows with large, row-varying offsets (a one-pass variance would cancel), like the check.
Problem make_problem(Rng& rng, int32_t tokens, int32_t dim, int64_t xs, int64_t ys) {
  Problem pr{tokens, dim, xs, ys, std::vector<bf16>(size_t(tokens) * xs), {}, {}};
  for (int32_t t = 0; t < tokens; ++t) {
    const float offset = rng.uniform(-40.f, 40.f), scale = std::ldexp(1.f, int(rng.randint(-4, 4)));
    for (int64_t j = 0; j < xs; ++j)
      pr.x[t * xs + j] = float_to_bf16(offset + rng.normal() * scale);
  }
  pr.w = rng.normal_vector(size_t(dim));
  pr.b = rng.normal_vector(size_t(dim), 0.3f);
  return pr;
}

LayerNormParams params(const Problem& pr, const bf16* x, const float* w, const float* b, bf16* y) {
  LayerNormParams p;
  p.x = x;
  p.weight = w;
  p.bias = b;
  p.y = y;
  p.num_tokens = pr.tokens;
  p.dim = pr.dim;
  p.x_stride = pr.xs;
  p.y_stride = pr.ys;
  return p;
}

std::vector<bf16> run_gpu(const Problem& pr) {
  auto dx = dev(pr.x);
  auto dw = dev(pr.w), db = dev(pr.b);
  auto dy = testing::poisoned<bf16>(size_t(pr.tokens) * pr.ys);
  Status s = layernorm_cuda(params(pr, dx.data(), dw.data(), db.data(), dy.data()));
  EXPECT_TRUE(s.ok()) << s.to_string();
  return host(dy);
}

std::vector<bf16> run_ref(const Problem& pr) {
  std::vector<bf16> y(size_t(pr.tokens) * pr.ys, testing::poison_value<bf16>());
  Status s = layernorm_ref(params(pr, pr.x.data(), pr.w.data(), pr.b.data(), y.data()));
  EXPECT_TRUE(s.ok()) << s.to_string();
  return y;
}

TEST(LayerNormCuda, RandomRowsMatchReference) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t tokens, dim;
    int64_t xs, ys;
  } shapes[] = {{41, 128, 128, 128},   {3, 1000, 1005, 1000}, {4, 5, 5, 5},
                {2048, 128, 128, 128}, {7, 128, 133, 136},    {2, 7168, 7168, 7168}};
  for (const Shape& s : shapes) {
    Rng rng(seed + s.dim + s.xs + s.tokens);
    Problem pr = make_problem(rng, s.tokens, s.dim, s.xs, s.ys);
    auto got = run_gpu(pr), want = run_ref(pr);
    int bad = 0;
    for (int32_t t = 0; t < s.tokens; ++t) {
      for (int64_t j = 0; j < s.ys; ++j) {
        const size_t k = size_t(t) * s.ys + j;
        const bool gap = j >= s.dim;
        if (gap ? !testing::is_poison(got[k]) : bf16_ulp_distance(got[k], want[k]) > 1) {
          if (bad++ < 5)
            ADD_FAILURE() << "T=" << s.tokens << " D=" << s.dim << " y[" << t << "][" << j
                          << "] = " << bf16_to_float(got[k]) << ", reference "
                          << bf16_to_float(want[k]) << (gap ? " (gap written)" : "");
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

Status layernorm_cuda_on_host_buffers(const LayerNormParams& hp) {
  DSA_RETURN_IF_ERROR(validate(hp));
  const int64_t xs = hp.x_stride ? hp.x_stride : hp.dim, ys = hp.y_stride ? hp.y_stride : hp.dim;
  const size_t xn = size_t(hp.num_tokens - 1) * xs + hp.dim;
  const size_t yn = size_t(hp.num_tokens - 1) * ys + hp.dim;
  using P = LayerNormParams;
  return testing::run_on_host_buffers(
      hp, layernorm_cuda, testing::In<&P::x>{xn}, testing::In<&P::weight>{size_t(hp.dim)},
      testing::In<&P::bias>{size_t(hp.dim)}, testing::InOut<&P::y>{yn});
}

TEST(LayerNormCuda, MatchesIndependentFormulation) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, dim] : {std::pair{41, 128}, {3, 1000}, {4, 5}, {256, 128}}) {
    Status s = check_layernorm(layernorm_cuda_on_host_buffers, tokens, dim, seed + dim + tokens);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " D=" << dim << ": " << s.to_string();
  }
}

// The reference test's hand-computed rows: the affine case, the biased variance, a constant row
// (zero variance: y = b exactly).
TEST(LayerNormCuda, HandComputed) {
  DSA_SKIP_WITHOUT_GPU();
  auto run = [](std::initializer_list<float> xs, std::vector<float> w, std::vector<float> b) {
    Problem pr;
    pr.x = testing::bf16s(xs);
    pr.dim = static_cast<int32_t>(w.size());
    pr.tokens = static_cast<int32_t>(pr.x.size() / w.size());
    pr.xs = pr.ys = pr.dim;
    pr.w = std::move(w);
    pr.b = std::move(b);
    std::vector<float> out;
    for (bf16 v : run_gpu(pr)) out.push_back(bf16_to_float(v));
    return out;
  };
  auto y = run({1.f, 2.f, 3.f, 4.f}, {2.f, 1.f, 1.f, 0.5f}, {0.5f, 0.f, -1.f, 0.25f});
  EXPECT_EQ(y, (std::vector<float>{-2.1875f, -0.447265625f, -0.5546875f, 0.921875f}));
  y = run({0.f, 2.f}, {1.f, 1.f}, {0.f, 0.f});
  EXPECT_EQ(y, (std::vector<float>{-1.f, 1.f}));
  y = run({5.f, 5.f, 5.f}, {3.f, -2.f, 7.f}, {0.25f, -1.5f, 9.f});
  EXPECT_EQ(y, (std::vector<float>{0.25f, -1.5f, 9.f}));
}

TEST(LayerNormCuda, InPlaceAndDeterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Problem pr = make_problem(rng, 300, 128, 128, 128);
  auto a = run_gpu(pr), b = run_gpu(pr);
  auto dx = dev(pr.x);
  auto dw = dev(pr.w), db = dev(pr.b);
  ASSERT_TRUE(layernorm_cuda(params(pr, dx.data(), dw.data(), db.data(), dx.data())).ok());
  auto inplace = host(dx);
  ASSERT_EQ(testing::first_bit_difference(a, b), "") << "nondeterministic";
  ASSERT_EQ(testing::first_bit_difference(a, inplace), "") << "in place differs";
}

TEST(LayerNormCuda, ZeroTokensAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  LayerNormParams p;
  p.dim = 128;
  EXPECT_TRUE(layernorm_cuda(p).ok());
  p.num_tokens = 1;
  Status s = layernorm_cuda(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  p.x_stride = 3;
  s = layernorm_cuda(p);
  EXPECT_NE(s.message().find("x_stride = 3"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace dsa::kernels
