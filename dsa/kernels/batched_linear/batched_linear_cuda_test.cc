// GPU tests of batched_linear_cuda against batched_linear_ref: the absorbed MLA's V3.2 shapes
// (128 heads, q [T, H, 192] -> q_mla [T, H, 576] through W_UK^T and o_lat [T, H, 512] -> o
// [T, H, 128] through W_UV) and the tiny model's, odd sizes with padded strides, the
// batch-after-batch layout, one token; within linear's bf16 bound (2^-12 M + 2^-7 |ref|), the
// output's gaps left poisoned, graph replay equal to eager bit for bit (and the graph's node
// count, which must not grow with the batch), zero tokens, and the argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/graph.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/batched_linear/batched_linear.h"
#include "dsa/testing/compare.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/scoped_env.h"

namespace dsa::kernels {
namespace {

using testing::dev;
using testing::host;
using testing::Rng;

// A problem in one of the two layouts: heads side by side in a token's row ([T, B, *_head]) or
// batch after batch ([B, T, *_head] with a gap of 3 elements between batches).
struct Problem {
  int32_t b, t, in, out;
  int64_t x_head, y_head;  // per-batch width of x's and y's rows (>= in, >= out)
  bool batch_major = false;
  std::vector<bf16> x, w;
  // Head-interleaved only: more elements after a token's heads in x, as in a fused projection's
  // output whose other columns belong to another linear (model/fused_projections.h).
  int64_t x_row_extra = 0;

  int64_t x_size() const {
    return int64_t{t} * (int64_t{b} * x_head + x_row_extra) + (batch_major ? 3 * b : 0);
  }
  int64_t y_size() const { return int64_t{b} * t * y_head + (batch_major ? 3 * b : 0); }
  BatchedLinearParams params(const bf16* xp, const bf16* wp, bf16* yp) const {
    BatchedLinearParams p{xp, wp, yp, b, t, in, out, 0, 0, int64_t{out} * in, 0, 0};
    if (batch_major) {
      p.x_ld = x_head;
      p.x_batch_stride = t * x_head + 3;
      p.y_ld = y_head;
      p.y_batch_stride = t * y_head + 3;
    } else {
      p.x_ld = b * x_head + x_row_extra;
      p.x_batch_stride = x_head;
      p.y_ld = b * y_head;
      p.y_batch_stride = y_head;
    }
    return p;
  }
};

Problem make_problem(Rng& rng, int32_t b, int32_t t, int32_t in, int32_t out, int64_t x_head,
                     int64_t y_head, bool batch_major = false, int64_t x_row_extra = 0) {
  Problem pr{b, t, in, out, x_head, y_head, batch_major, {}, {}, x_row_extra};
  pr.x = rng.bf16_vector(size_t(pr.x_size()));
  pr.w = rng.bf16_vector(size_t(b) * out * in, 0.05f);
  return pr;
}

// Every y element the op writes, as [B, T, out] fp32, and whether each gap kept its poison.
std::vector<float> written(const Problem& pr, const std::vector<bf16>& y, bool* gaps_poisoned) {
  const BatchedLinearParams p = pr.params(nullptr, nullptr, nullptr);
  std::vector<bool> hit(y.size(), false);
  std::vector<float> out;
  for (int64_t b = 0; b < pr.b; ++b)
    for (int64_t t = 0; t < pr.t; ++t)
      for (int64_t i = 0; i < pr.out; ++i) {
        const int64_t k = b * p.y_batch_stride + t * p.y_ld + i;
        hit[size_t(k)] = true;
        out.push_back(bf16_to_float(y[size_t(k)]));
      }
  *gaps_poisoned = true;
  for (size_t k = 0; k < y.size(); ++k)
    if (!hit[k] && y[k].bits != 0xFFFF) *gaps_poisoned = false;
  return out;
}

void expect_within_tolerance(const Problem& pr) {
  const std::string what = "B=" + std::to_string(pr.b) + " T=" + std::to_string(pr.t) +
                           " in=" + std::to_string(pr.in) + " out=" + std::to_string(pr.out) +
                           (pr.batch_major ? " batch-major" : "");
  std::vector<bf16> ref16(size_t(pr.y_size()), bf16{0xFFFF});
  const BatchedLinearParams hp = pr.params(pr.x.data(), pr.w.data(), ref16.data());
  ASSERT_TRUE(batched_linear_ref(hp).ok()) << what;
  bool ref_gaps = false;
  const std::vector<float> ref = written(pr, ref16, &ref_gaps);
  ASSERT_TRUE(ref_gaps) << what;
  std::vector<float> bound(ref.size());
  ASSERT_TRUE(batched_linear_tolerance_bounds(hp, ref.data(), bound.data()).ok());

  auto x = dev(pr.x), w = dev(pr.w);
  auto y = testing::poisoned<bf16>(size_t(pr.y_size()));
  const Status s = batched_linear_cuda(pr.params(x.data(), w.data(), y.data()));
  ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
  bool gaps = false;
  const std::vector<float> got = written(pr, host(y), &gaps);
  EXPECT_TRUE(gaps) << what << ": an element outside the outputs was written";
  auto r = testing::within_bound(got, ref, bound);
  EXPECT_TRUE(r.ok) << what << ": " << r.message;
}

TEST(BatchedLinearCuda, MlaShapesWithinTolerance) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  for (int32_t t : {1, 3, 40, 257}) {
    expect_within_tolerance(make_problem(rng, 128, t, 128, 512, 192, 576));  // q_nope W_UK
    expect_within_tolerance(make_problem(rng, 128, t, 512, 128, 512, 128));  // o_lat W_UV^T
  }
  // The tiny model (16 heads, nope 64, v 64).
  expect_within_tolerance(make_problem(rng, 16, 5, 64, 512, 128, 576));
  expect_within_tolerance(make_problem(rng, 16, 5, 512, 64, 512, 64));
}

// T <= 8 with 16-byte rows runs the few-token kernel (common/few_token_gemv.cuh): every token
// count it templates on and the counts between (their last tokens masked), at V3.2's and the tiny
// model's per-head shapes, head-interleaved and batch-major layouts, out not a multiple of its 4
// rows per CTA.
TEST(BatchedLinearCuda, FewTokensWithinTolerance) {
  DSA_SKIP_WITHOUT_GPU();
  // The kernel is opt-in (few_token_gemv.cuh); on for this test's calls only.
  const testing::ScopedEnv few_tokens("DSA_LINEAR_FEW_TOKENS", "1");
  Rng rng(testing::test_seed() + 3);
  for (int32_t t : {1, 2, 4, 6, 8}) {
    expect_within_tolerance(make_problem(rng, 128, t, 128, 512, 192, 576));
    expect_within_tolerance(make_problem(rng, 16, t, 512, 64, 512, 64));
  }
  expect_within_tolerance(make_problem(rng, 16, 1, 64, 512, 128, 576));
  expect_within_tolerance(make_problem(rng, 3, 7, 8, 13, 8, 16));
  expect_within_tolerance(make_problem(rng, 2, 5, 2056, 6, 2056, 6, true));
}

// q_nope W_UK reading q from the fused q_b + wq_b output: rows wider than the heads (V3.2: 32768
// = 128 x 192 + 64 x 128; tiny: 4096 = 16 x 128 + 16 x 128), by cuBLASLt and the few-token kernel.
TEST(BatchedLinearCuda, RowsWiderThanTheHeadsWithinTolerance) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 5);
  for (const char* few : {"0", "1"}) {
    const testing::ScopedEnv env("DSA_LINEAR_FEW_TOKENS", few);
    for (int32_t t : {1, 8, 64}) {
      expect_within_tolerance(make_problem(rng, 128, t, 128, 512, 192, 576, false, 8192));
      expect_within_tolerance(make_problem(rng, 16, t, 64, 512, 128, 576, false, 2048));
    }
  }
}

// DSA_LINEAR_FEW_TOKENS=narrow never takes a batched product (its narrow widths are linear's):
// o_lat W_UV^T at V3.2's shape (128 outputs per head) gives cuBLASLt's bits under it, which differ
// from the few-token kernel's (=1).
TEST(BatchedLinearCuda, FewTokensNarrowLeavesBatchedProducts) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 6);
  const Problem pr = make_problem(rng, 128, 2, 512, 128, 512, 128);
  auto x = dev(pr.x), w = dev(pr.w);
  auto run = [&](const char* mode) {
    const testing::ScopedEnv env("DSA_LINEAR_FEW_TOKENS", mode);
    auto y = testing::poisoned<bf16>(size_t(pr.y_size()));
    const Status s = batched_linear_cuda(pr.params(x.data(), w.data(), y.data()));
    EXPECT_TRUE(s.ok()) << mode << ": " << s.to_string();
    bool gaps = false;
    return written(pr, host(y), &gaps);
  };
  const std::vector<float> narrow = run("narrow"), all = run("1"), none = run("0");
  ASSERT_NE(all, none) << "the two kernels gave the same bits";
  EXPECT_EQ(narrow, none);
}

TEST(BatchedLinearCuda, OddShapesAndLayoutsWithinTolerance) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 1);
  expect_within_tolerance(make_problem(rng, 1, 1, 1, 1, 1, 1));
  expect_within_tolerance(make_problem(rng, 3, 5, 7, 130, 10, 135));
  expect_within_tolerance(make_problem(rng, 5, 1, 129, 65, 129, 65));
  expect_within_tolerance(make_problem(rng, 7, 9, 33, 31, 36, 36));
  expect_within_tolerance(make_problem(rng, 3, 4, 6, 5, 6, 7, true));
  expect_within_tolerance(make_problem(rng, 4, 33, 128, 512, 128, 520, true));
}

// One op whatever the batch: its graph has as many nodes at 128 heads as at 2, and replays what
// eager computes, bit for bit, for inputs written after the capture.
TEST(BatchedLinearCuda, GraphReplayEqualsEagerAndNodesDoNotGrowWithBatch) {
  DSA_SKIP_WITHOUT_GPU();
  ASSERT_TRUE(cuda::use_forward_stream().ok());
  Rng rng(testing::test_seed() + 2);
  size_t nodes_at[2] = {0, 0};
  int k = 0;
  for (int32_t heads : {2, 128}) {
    Problem pr = make_problem(rng, heads, 3, 128, 512, 192, 576);
    auto x = dev(pr.x), w = dev(pr.w);
    auto y = testing::poisoned<bf16>(size_t(pr.y_size()));
    const BatchedLinearParams p = pr.params(x.data(), w.data(), y.data());
    ASSERT_TRUE(batched_linear_cuda(p).ok());  // warm-up: workspace, plan
    auto graph = cuda::Graph::capture([&] { return batched_linear_cuda(p); });
    ASSERT_TRUE(graph.ok()) << graph.status().to_string();
    nodes_at[k++] = graph->num_nodes();
    std::printf("batched_linear H=%d T=3 128->512: %zu graph nodes\n", heads, graph->num_nodes());
    for (int rep = 0; rep < 2; ++rep) {
      const std::vector<bf16> next = rng.bf16_vector(pr.x.size());
      ASSERT_TRUE(x.upload(std::span<const bf16>(next)).ok());
      ASSERT_TRUE(graph->launch().ok());
      ASSERT_EQ(cudaStreamSynchronize(cuda::current_stream()), cudaSuccess);
      const auto replayed = host(y);
      ASSERT_TRUE(batched_linear_cuda(p).ok());
      ASSERT_EQ(cudaStreamSynchronize(cuda::current_stream()), cudaSuccess);
      const auto eager = host(y);
      for (size_t i = 0; i < eager.size(); ++i)
        ASSERT_EQ(eager[i].bits, replayed[i].bits)
            << "H=" << heads << " rep " << rep << " at " << i;
    }
  }
  EXPECT_EQ(nodes_at[0], nodes_at[1]);
}

TEST(BatchedLinearCuda, ZeroTokensAndBadArguments) {
  DSA_SKIP_WITHOUT_GPU();
  BatchedLinearParams p{nullptr, nullptr, nullptr, 4, 0, 8, 8, 32, 8, 64, 32, 8};
  EXPECT_TRUE(batched_linear_cuda(p).ok());
  p.num_tokens = 2;
  p.y_batch_stride = 4;  // batches overlap
  const Status s = batched_linear_cuda(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("y_batch_stride = 4"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace dsa::kernels
