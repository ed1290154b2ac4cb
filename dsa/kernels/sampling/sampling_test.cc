// CPU tests of the sampling op's host checks and its reference (which defers to
// sample_token row by row).
#include "dsa/kernels/sampling/sampling.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "dsa/kernels/sampling/sampler.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

struct Rows {
  std::vector<float> logits, temperature, top_p;
  std::vector<int32_t> top_k, position, out;
  std::vector<uint64_t> seed;
  int32_t vocab = 0;
  Rows(int32_t rows, int32_t v, uint64_t rng_seed) : vocab(v) {
    testing::Rng rng(rng_seed);
    logits = rng.normal_vector(size_t(rows) * size_t(v), 2.f);
    temperature.assign(size_t(rows), 1.f);
    top_p.assign(size_t(rows), 1.f);
    top_k.assign(size_t(rows), 0);
    position.assign(size_t(rows), 0);
    out.assign(size_t(rows), -7);
    for (int32_t r = 0; r < rows; ++r) {
      seed.push_back(rng.engine()());
      position[size_t(r)] = static_cast<int32_t>(rng.randint(0, 1 << 20));
    }
  }
  SamplingOpParams params() {
    SamplingOpParams p;
    p.logits = logits.data();
    p.rows = static_cast<int32_t>(out.size());
    p.vocab = vocab;
    p.temperature = temperature.data();
    p.top_p = top_p.data();
    p.top_k = top_k.data();
    p.seed = seed.data();
    p.position = position.data();
    p.out = out.data();
    return p;
  }
};

TEST(SamplingValidate, RejectsBadShapesAndPointers) {
  Rows rows(2, 8, 1);
  EXPECT_TRUE(validate(rows.params()).ok());
  auto expect_bad = [&](auto mutate) {
    SamplingOpParams p = rows.params();
    mutate(p);
    const Status s = validate(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_EQ(sample_rows_ref(p).code(), StatusCode::kInvalidArgument);
  };
  expect_bad([](SamplingOpParams& p) { p.rows = -1; });
  expect_bad([](SamplingOpParams& p) { p.vocab = 0; });
  expect_bad([](SamplingOpParams& p) { p.logits = nullptr; });
  expect_bad([](SamplingOpParams& p) { p.temperature = nullptr; });
  expect_bad([](SamplingOpParams& p) { p.top_p = nullptr; });
  expect_bad([](SamplingOpParams& p) { p.top_k = nullptr; });
  expect_bad([](SamplingOpParams& p) { p.seed = nullptr; });
  expect_bad([](SamplingOpParams& p) { p.position = nullptr; });
  expect_bad([](SamplingOpParams& p) { p.out = nullptr; });
  // No rows: null pointers are fine.
  SamplingOpParams empty;
  empty.vocab = 4;
  EXPECT_TRUE(validate(empty).ok());
  EXPECT_TRUE(sample_rows_ref(empty).ok());
}

TEST(SamplingRef, RejectsBadRowParams) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto expect_bad = [](auto mutate) {
    Rows rows(3, 16, 2);
    mutate(rows);
    const Status s = sample_rows_ref(rows.params());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("row 1"), std::string::npos) << s.message();
  };
  expect_bad([](Rows& r) { r.temperature[1] = -0.5f; });
  expect_bad([&](Rows& r) { r.temperature[1] = nan; });
  expect_bad([](Rows& r) { r.temperature[1] = std::numeric_limits<float>::infinity(); });
  expect_bad([](Rows& r) { r.top_p[1] = 0.f; });
  expect_bad([](Rows& r) { r.top_p[1] = 1.5f; });
  expect_bad([&](Rows& r) { r.top_p[1] = nan; });
  expect_bad([](Rows& r) { r.top_k[1] = -1; });
  expect_bad([](Rows& r) { r.position[1] = -3; });
}

TEST(SamplingRef, MatchesSampleTokenPerRow) {
  Rows rows(6, 100, testing::test_seed());
  rows.temperature = {0.f, 0.7f, 1.f, 1.5f, 1.f, 0.9f};
  rows.top_k = {0, 0, 50, 0, 10, 0};
  rows.top_p = {1.f, 1.f, 1.f, 0.9f, 0.8f, 0.5f};
  ASSERT_TRUE(sample_rows_ref(rows.params()).ok());
  for (size_t r = 0; r < 6; ++r) {
    SamplingParams sp{rows.temperature[r], rows.top_p[r], rows.top_k[r], rows.seed[r]};
    const std::span<const float> row(rows.logits.data() + r * 100, 100);
    EXPECT_EQ(rows.out[r], sample_token(row, sp, rows.position[r])) << "row " << r;
  }
}

}  // namespace
}  // namespace dsa::kernels
