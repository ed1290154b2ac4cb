// CPU tests of the strided-batched linear: hand-computed values, dsa check's independent
// formulation (padded [T, B, d] layouts, odd sizes, one token, one batch), bit-for-bit equality
// with linear_ref run head by head (what the model ran before), the batch-after-batch layout,
// zero tokens, and every argument error naming its field.
#include "dsa/kernels/batched_linear/batched_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dsa/kernels/batched_linear/batched_linear_check.h"
#include "dsa/kernels/linear/linear.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using testing::Rng;

std::vector<bf16> to_bf16(std::initializer_list<float> v) {
  std::vector<bf16> out;
  for (float f : v) out.push_back(float_to_bf16(f));
  return out;
}

// Two heads side by side, one token: x = [[1, 2] | [3, -1]], W0 = [[3, 4]], W1 = [[0.5, 2]];
// y = [[11] | [-0.5]] written into a row of 4 with stride 2 (the odd columns stay).
TEST(BatchedLinear, HandComputed) {
  auto x = to_bf16({1.f, 2.f, 3.f, -1.f}), w = to_bf16({3.f, 4.f, 0.5f, 2.f});
  std::vector<bf16> y(4, float_to_bf16(7.f));
  BatchedLinearParams p{x.data(), w.data(), y.data(), 2, 1, 2, 1, 4, 2, 2, 4, 2};
  ASSERT_TRUE(batched_linear_ref(p).ok());
  EXPECT_EQ(bf16_to_float(y[0]), 11.f);
  EXPECT_EQ(bf16_to_float(y[1]), 7.f);
  EXPECT_EQ(bf16_to_float(y[2]), -0.5f);
  EXPECT_EQ(bf16_to_float(y[3]), 7.f);
}

TEST(BatchedLinear, MatchesIndependentFormulation) {
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t b, t, in, out;
  } shapes[] = {{1, 1, 1, 1},  {3, 5, 7, 130},   {2, 1, 129, 65}, {1, 4, 64, 3},
                {5, 3, 17, 1}, {4, 2, 128, 512}, {7, 9, 33, 31}};
  uint64_t n = 0;
  for (const Shape& s : shapes) {
    const Status st = check_batched_linear(batched_linear_ref, s.b, s.t, s.in, s.out, seed + n++);
    EXPECT_TRUE(st.ok()) << "B=" << s.b << " T=" << s.t << " in=" << s.in << " out=" << s.out
                         << ": " << st.to_string();
  }
}

// The model's shapes: q [T, H, qk] -> q_mla [T, H, 576] (W_UK^T) and o_lat [T, H, 512] -> o
// [T, H, v] (W_UV), each head bit for bit what linear_ref gives on that head's dense copy.
TEST(BatchedLinear, EqualsLinearRefPerHeadBitForBit) {
  Rng rng(testing::test_seed());
  struct Shape {
    int32_t h, t, in, out;
    int64_t x_head, y_head;  // the per-head stride in x's and y's rows
  } shapes[] = {{16, 3, 64, 512, 128, 576}, {16, 1, 512, 64, 512, 64}, {3, 7, 5, 9, 11, 12}};
  for (const Shape& s : shapes) {
    const int64_t x_ld = s.h * s.x_head, y_ld = s.h * s.y_head;
    const std::vector<bf16> x = rng.bf16_vector(size_t(x_ld) * s.t);
    const std::vector<bf16> w = rng.bf16_vector(size_t(s.h) * s.out * s.in, 0.1f);
    std::vector<bf16> y(size_t(y_ld) * s.t);
    BatchedLinearParams p{x.data(), w.data(), y.data(), s.h,      s.t,
                          s.in,     s.out,    x_ld,     s.x_head, int64_t{s.out} * s.in,
                          y_ld,     s.y_head};
    ASSERT_TRUE(batched_linear_ref(p).ok());
    for (int32_t h = 0; h < s.h; ++h) {
      std::vector<bf16> xh(size_t(s.t) * s.in), yh(size_t(s.t) * s.out);
      for (int32_t t = 0; t < s.t; ++t)
        for (int32_t j = 0; j < s.in; ++j)
          xh[size_t(t) * s.in + j] = x[size_t(t * x_ld + h * s.x_head + j)];
      LinearParams lp;
      lp.x = xh.data();
      lp.weight = w.data() + size_t(h) * s.out * s.in;
      lp.y = yh.data();
      lp.num_tokens = s.t;
      lp.in_features = s.in;
      lp.out_features = s.out;
      ASSERT_TRUE(linear_ref(lp).ok());
      for (int32_t t = 0; t < s.t; ++t)
        for (int32_t i = 0; i < s.out; ++i)
          ASSERT_EQ(y[size_t(t * y_ld + h * s.y_head + i)].bits, yh[size_t(t) * s.out + i].bits)
              << "head " << h << " token " << t << " out " << i;
    }
  }
}

// Batches one after another ([B, T, out] with a gap): the other non-overlapping layout.
TEST(BatchedLinear, BatchAfterBatchLayout) {
  Rng rng(testing::test_seed());
  const int32_t B = 3, T = 4, in = 6, out = 5;
  const int64_t y_ld = 7, y_bs = T * y_ld + 2;
  const std::vector<bf16> x = rng.bf16_vector(size_t(B) * T * in);
  const std::vector<bf16> w = rng.bf16_vector(size_t(B) * out * in);
  std::vector<bf16> y(size_t(B * y_bs), float_to_bf16(NAN));
  BatchedLinearParams p{x.data(), w.data(), y.data(), B,        T,    in,
                        out,      in,       T * in,   out * in, y_ld, y_bs};
  ASSERT_TRUE(batched_linear_ref(p).ok());
  for (int32_t b = 0; b < B; ++b) {
    for (int32_t t = 0; t < T; ++t) {
      for (int32_t i = 0; i < y_ld; ++i) {
        const float got = bf16_to_float(y[size_t(b * y_bs + t * y_ld + i)]);
        if (i >= out) {
          EXPECT_TRUE(std::isnan(got)) << "padding written";
          continue;
        }
        double want = 0;
        for (int32_t j = 0; j < in; ++j)
          want += double(bf16_to_float(x[size_t((b * T + t) * in + j)])) *
                  bf16_to_float(w[size_t((b * out + i) * in + j)]);
        EXPECT_NEAR(got, want, 0x1p-7 * std::fabs(want) + 1e-30);
      }
    }
  }
}

TEST(BatchedLinear, ZeroTokensTouchNothingAndNeedNoPointers) {
  BatchedLinearParams p{nullptr, nullptr, nullptr, 4, 0, 8, 8, 32, 8, 64, 32, 8};
  EXPECT_TRUE(batched_linear_ref(p).ok());
}

BatchedLinearParams valid(const std::vector<bf16>& buf) {
  // x, W, y all point into one buffer: validate only reads the pointers.
  bf16* b = const_cast<bf16*>(buf.data());
  return BatchedLinearParams{b, b, b, 2, 3, 4, 5, 8, 4, 20, 10, 5};
}

void expect_error(BatchedLinearParams p, const std::string& field) {
  const Status s = batched_linear_ref(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << field;
  EXPECT_NE(s.message().find(field), std::string::npos) << s.to_string();
}

TEST(BatchedLinear, BadArgumentsNameTheField) {
  const std::vector<bf16> buf(64);
  ASSERT_TRUE(validate(valid(buf)).ok());
  auto with = [&](auto edit) {
    BatchedLinearParams p = valid(buf);
    edit(p);
    return p;
  };
  expect_error(with([](auto& p) { p.batch = 0; }), "batch = 0");
  expect_error(with([](auto& p) { p.num_tokens = -1; }), "num_tokens = -1");
  expect_error(with([](auto& p) { p.in_features = 0; }), "in_features = 0");
  expect_error(with([](auto& p) { p.out_features = 0; }), "out_features = 0");
  expect_error(with([](auto& p) { p.x_ld = 3; }), "x_ld = 3");
  expect_error(with([](auto& p) { p.x_batch_stride = -1; }), "x_batch_stride = -1");
  expect_error(with([](auto& p) { p.w_batch_stride = 19; }), "w_batch_stride = 19");
  expect_error(with([](auto& p) { p.y_ld = 4; }), "y_ld = 4");
  expect_error(with([](auto& p) { p.y_batch_stride = -1; }), "y_batch_stride = -1");
  expect_error(with([](auto& p) { p.y_batch_stride = 4; }), "y_batch_stride = 4");  // overlap
  expect_error(with([](auto& p) { p.y_ld = 9; }), "y_batch_stride = 5 with y_ld = 9");
  expect_error(with([](auto& p) { p.x_ld = kBatchedLinearMaxStride + 1; }), "x_ld");
  expect_error(with([](auto& p) { p.x = nullptr; }), "x is null");
  expect_error(with([](auto& p) { p.weight = nullptr; }), "weight is null");
  expect_error(with([](auto& p) { p.y = nullptr; }), "y is null");
  // One token: any batch stride of at least `out` separates the batches.
  EXPECT_TRUE(validate(with([](auto& p) {
                p.num_tokens = 1;
                p.y_ld = 5;
                p.y_batch_stride = 1000;
              })).ok());
  // One batch: the batch stride is never used.
  EXPECT_TRUE(validate(with([](auto& p) {
                p.batch = 1;
                p.y_batch_stride = 0;
              })).ok());
}

}  // namespace
}  // namespace dsa::kernels
