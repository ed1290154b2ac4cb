// GPU tests of rmsnorm_cuda, residual_add_cuda and add_rmsnorm_cuda against the CPU references
// (SPEC.md §8.3, §8.6): RMSNorm within 1 bf16 ulp, the residual add bit-exact, all deterministic;
// the fused add_rmsnorm bit-identical to residual_add_cuda followed by rmsnorm_cuda, the gathered
// rmsnorm (x_rows) bit-identical to row_copy_cuda's gather into zeros followed by rmsnorm_cuda.
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
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/gather/row_copy.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"
#include "dsa/kernels/rmsnorm/rmsnorm_check.h"
#include "dsa/kernels/rmsnorm/rmsnorm_test_util.h"
#include "dsa/testing/bf16_values.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/host_buffers.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using rmsnorm_test::gather_entries;
using testing::bf16s;
using testing::dev;
using testing::host;
using testing::Rng;

// Rows with scales spread over 2^-6..2^6, [T, stride] with the first D of each row used.
std::vector<bf16> random_rows(Rng& rng, int32_t tokens, int64_t stride) {
  std::vector<bf16> x(size_t(tokens) * stride);
  for (int32_t t = 0; t < tokens; ++t) {
    const float scale = std::ldexp(1.f, int(rng.randint(-6, 6)));
    for (int64_t j = 0; j < stride; ++j) x[t * stride + j] = float_to_bf16(rng.normal() * scale);
  }
  return x;
}

RmsNormParams params(const bf16* x, const bf16* w, bf16* y, int32_t tokens, int32_t dim, int64_t xs,
                     int64_t ys, float eps) {
  RmsNormParams p;
  p.x = x;
  p.weight = w;
  p.y = y;
  p.num_tokens = tokens;
  p.dim = dim;
  p.x_stride = xs;
  p.y_stride = ys;
  p.eps = eps;
  return p;
}

// Runs the GPU op on (x, w) with the given strides; output poisoned with 0xFF (bf16 NaN).
std::vector<bf16> run_gpu(const std::vector<bf16>& x, const std::vector<bf16>& w, int32_t tokens,
                          int32_t dim, int64_t xs, int64_t ys, float eps = 1e-6f) {
  auto dx = dev(x), dw = dev(w);
  auto dy = testing::poisoned<bf16>(size_t(tokens) * ys);
  Status s = rmsnorm_cuda(params(dx.data(), dw.data(), dy.data(), tokens, dim, xs, ys, eps));
  EXPECT_TRUE(s.ok()) << s.to_string();
  return host(dy);
}

std::vector<bf16> run_ref(const std::vector<bf16>& x, const std::vector<bf16>& w, int32_t tokens,
                          int32_t dim, int64_t xs, int64_t ys, float eps = 1e-6f) {
  std::vector<bf16> y(size_t(tokens) * ys, testing::poison_value<bf16>());
  Status s = rmsnorm_ref(params(x.data(), w.data(), y.data(), tokens, dim, xs, ys, eps));
  EXPECT_TRUE(s.ok()) << s.to_string();
  return y;
}

// Every output within 1 bf16 ulp of the reference; the gap between output rows untouched.
void expect_close(const std::vector<bf16>& got, const std::vector<bf16>& want, int32_t tokens,
                  int32_t dim, int64_t ys, const char* what) {
  int bad = 0;
  for (int32_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < ys; ++j) {
      const size_t k = size_t(t) * ys + j;
      if (j >= dim) {
        if (!testing::is_poison(got[k]) && bad++ < 5) {
          ADD_FAILURE() << what << " gap written at " << k;
        }
        continue;
      }
      if (bf16_ulp_distance(got[k], want[k]) > 1 && bad++ < 5) {
        ADD_FAILURE() << what << " y[" << t << "][" << j << "] = " << bf16_to_float(got[k])
                      << ", reference " << bf16_to_float(want[k]);
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// Tiny and V3.2 widths (512 latent read from a 576-wide kv_a row, 1536 q_a, 7168 hidden), both
// kernel paths: 16-byte vectors (aligned strides) and scalar (odd D or odd strides).
TEST(RmsNormCuda, RandomRowsMatchReference) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t tokens, dim;
    int64_t xs, ys;
  } shapes[] = {{37, 512, 512, 512},      {5, 1536, 1536, 1536},
                {9, 256, 256, 256},       {3, 7, 7, 7},
                {64, 7168, 7168, 7168},   {33, 512, 576, 512},
                {17, 7168, 7171, 7168},   {6, 1536, 1539, 1541},
                {4, 96, 104, 112},        {2, 16384, 16384, 16384},
                {1, 70000, 70000, 70000}, {130, 256, 256, 256}};
  for (const Shape& s : shapes) {
    Rng rng(seed + s.dim + s.xs);
    auto x = random_rows(rng, s.tokens, s.xs);
    auto w = rng.bf16_vector(size_t(s.dim), 0.5f);
    auto got = run_gpu(x, w, s.tokens, s.dim, s.xs, s.ys);
    auto want = run_ref(x, w, s.tokens, s.dim, s.xs, s.ys);
    std::string what = "T=" + std::to_string(s.tokens) + " D=" + std::to_string(s.dim) +
                       " xs=" + std::to_string(s.xs) + " ys=" + std::to_string(s.ys);
    expect_close(got, want, s.tokens, s.dim, s.ys, what.c_str());
  }
}

// The check entry (independent long-double formulation) through a host-pointer adapter.
Status rmsnorm_cuda_on_host_buffers(const RmsNormParams& hp) {
  DSA_RETURN_IF_ERROR(validate(hp));
  const int64_t xs = hp.x_stride ? hp.x_stride : hp.dim, ys = hp.y_stride ? hp.y_stride : hp.dim;
  const size_t xn = size_t(hp.num_tokens - 1) * xs + hp.dim;
  const size_t yn = size_t(hp.num_tokens - 1) * ys + hp.dim;
  using P = RmsNormParams;
  return testing::run_on_host_buffers(hp, rmsnorm_cuda, testing::In<&P::x>{xn},
                                      testing::In<&P::weight>{size_t(hp.dim)},
                                      testing::InOut<&P::y>{yn});
}

TEST(RmsNormCuda, MatchesIndependentFormulation) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, dim] : {std::pair{37, 512}, {5, 1536}, {9, 256}, {3, 7}, {8, 7168}}) {
    Status s = check_rmsnorm(rmsnorm_cuda_on_host_buffers, tokens, dim, seed + dim);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " D=" << dim << ": " << s.to_string();
  }
}

// The reference test's hand-computed rows: [3, 4] -> [217 * 2^-8, 145 * 2^-7]; eps under the
// root ([1, 1] with eps 0.25 -> 229 * 2^-8); a zero row gives 0, not NaN; NaN stays in its row.
TEST(RmsNormCuda, HandComputedEdgeCases) {
  DSA_SKIP_WITHOUT_GPU();
  auto y = run_gpu(bf16s({3.f, 4.f}), bf16s({1.f, 1.f}), 1, 2, 2, 2);
  EXPECT_EQ(bf16_to_float(y[0]), 0.84765625f);
  EXPECT_EQ(bf16_to_float(y[1]), 1.1328125f);
  y = run_gpu(bf16s({1.f, 1.f, 0.f, 0.f}), bf16s({1.f, 1.f}), 2, 2, 2, 2, 0.25f);
  EXPECT_EQ(bf16_to_float(y[0]), 0.89453125f);
  EXPECT_EQ(bf16_to_float(y[2]), 0.f);
  EXPECT_EQ(bf16_to_float(y[3]), 0.f);
  y = run_gpu(bf16s({1.f, NAN, 1.f, 2.f}), bf16s({1.f, 1.f}), 2, 2, 2, 2);
  EXPECT_TRUE(std::isnan(bf16_to_float(y[0])));
  EXPECT_FALSE(std::isnan(bf16_to_float(y[2])));
  // Same on the vector path (D = 8): a zero row and a NaN row next to a normal one.
  std::vector<bf16> x(3 * 8, float_to_bf16(0.f));
  for (int j = 0; j < 8; ++j) x[8 + j] = float_to_bf16(2.f), x[16 + j] = float_to_bf16(1.f);
  x[17] = float_to_bf16(NAN);
  y = run_gpu(x, std::vector<bf16>(8, float_to_bf16(1.f)), 3, 8, 8, 8);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(bf16_to_float(y[j]), 0.f);
    EXPECT_EQ(bf16_to_float(y[8 + j]), 1.f);
    EXPECT_TRUE(std::isnan(bf16_to_float(y[16 + j])));
  }
}

// In place (y == x on the device) equals out of place, bit for bit, on both paths; two runs are
// bit-identical.
TEST(RmsNormCuda, InPlaceAndDeterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  for (int32_t dim : {7168, 7}) {
    const int32_t tokens = 19;
    auto x = random_rows(rng, tokens, dim);
    auto w = rng.bf16_vector(size_t(dim), 0.5f);
    auto a = run_gpu(x, w, tokens, dim, dim, dim), b = run_gpu(x, w, tokens, dim, dim, dim);
    auto dx = dev(x), dw = dev(w);
    RmsNormParams p;
    p.x = dx.data();
    p.y = dx.data();
    p.weight = dw.data();
    p.num_tokens = tokens;
    p.dim = dim;
    ASSERT_TRUE(rmsnorm_cuda(p).ok());
    auto inplace = host(dx);
    ASSERT_EQ(testing::first_bit_difference(a, b), "") << "nondeterministic";
    ASSERT_EQ(testing::first_bit_difference(a, inplace), "") << "in place differs";
  }
}

TEST(RmsNormCuda, ZeroTokensAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  RmsNormParams p;
  p.dim = 16;
  EXPECT_TRUE(rmsnorm_cuda(p).ok());
  p.num_tokens = 2;
  Status s = rmsnorm_cuda(p);  // null pointers
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  p.eps = 0.f;
  s = rmsnorm_cuda(p);
  EXPECT_NE(s.message().find("eps = 0"), std::string::npos) << s.to_string();
}

// ---- gathered rmsnorm (x_rows): bit-identical to row_copy's gather, then the plain norm ----

struct GatherShape {
  int32_t tokens, dim, bound;  // bound: rows of the source x
  int64_t xs, ys;
  // Elements before x / x_copy in their buffers (1: not 16-byte aligned, the scalar kernel).
  size_t x_off = 0, copy_off = 0;
};

std::string describe(const GatherShape& s) {
  return "T=" + std::to_string(s.tokens) + " D=" + std::to_string(s.dim) +
         " bound=" + std::to_string(s.bound) + " xs=" + std::to_string(s.xs) +
         " ys=" + std::to_string(s.ys) + " x_off=" + std::to_string(s.x_off) +
         " copy_off=" + std::to_string(s.copy_off);
}

struct GatherInputs {
  std::vector<bf16> x;  // x_off elements, then [bound, xs]
  std::vector<int32_t> rows;
  std::vector<bf16> w;
};

struct GatherOut {
  std::vector<bf16> y;     // [T, ys], poisoned before the call
  std::vector<bf16> copy;  // [T, D]: x_copy (poisoned before the call) or the pair's dense buffer
};

// rmsnorm_cuda with x_rows (and x_copy when `with_copy`).
GatherOut run_gathered_gpu(const GatherInputs& in, const GatherShape& s, bool with_copy,
                           bool skip) {
  auto dx = dev(in.x), dw = dev(in.w);
  auto drows = dev(in.rows, 1);
  auto dy = testing::poisoned<bf16>(std::max<size_t>(size_t(s.tokens) * s.ys, 1));
  auto dcopy = testing::poisoned<bf16>(s.copy_off + size_t(s.tokens) * s.dim + 1);
  RmsNormParams p =
      params(dx.data() + s.x_off, dw.data(), dy.data(), s.tokens, s.dim, s.xs, s.ys, 1e-6f);
  p.x_rows = drows.data();
  p.x_row_bound = s.bound;
  p.skip_minus_one = skip;
  p.x_copy = with_copy ? dcopy.data() + s.copy_off : nullptr;
  Status st = rmsnorm_cuda(p);
  EXPECT_TRUE(st.ok()) << describe(s) << ": " << st.to_string();
  GatherOut out{host(dy), host(dcopy)};
  out.y.resize(size_t(s.tokens) * s.ys);
  out.copy.erase(out.copy.begin(), out.copy.begin() + std::ptrdiff_t(s.copy_off));
  out.copy.resize(size_t(s.tokens) * s.dim);
  return out;
}

// The unfused pair: row_copy_cuda's gather into a zero-filled dense [T, D] buffer (dense_off
// elements into its allocation: 1 puts the plain norm on the scalar kernel), then rmsnorm_cuda.
GatherOut run_pair_gpu(const GatherInputs& in, const GatherShape& s, size_t dense_off) {
  auto dx = dev(in.x), dw = dev(in.w);
  auto drows = dev(in.rows, 1);
  auto ddense = dev(std::vector<bf16>(dense_off + size_t(s.tokens) * s.dim + 1, bf16{}));
  auto dy = testing::poisoned<bf16>(std::max<size_t>(size_t(s.tokens) * s.ys, 1));
  bf16* dense = ddense.data() + dense_off;
  RowCopyParams rc;
  rc.src = dx.data() + s.x_off;
  rc.dst = dense;
  rc.index = drows.data();
  rc.src_stride = s.xs * int64_t(sizeof(bf16));
  rc.dst_stride = s.dim * int64_t(sizeof(bf16));
  rc.row_bytes = s.dim * int64_t(sizeof(bf16));
  rc.num_rows = s.tokens;
  rc.index_bound = s.bound;
  rc.mode = RowCopyMode::kGather;
  Status st = row_copy_cuda(rc);
  EXPECT_TRUE(st.ok()) << describe(s) << ": row_copy: " << st.to_string();
  st = rmsnorm_cuda(params(dense, dw.data(), dy.data(), s.tokens, s.dim, 0, s.ys, 1e-6f));
  EXPECT_TRUE(st.ok()) << describe(s) << ": rmsnorm: " << st.to_string();
  GatherOut out{host(dy), host(ddense)};
  out.y.resize(size_t(s.tokens) * s.ys);
  out.copy.erase(out.copy.begin(), out.copy.begin() + std::ptrdiff_t(dense_off));
  out.copy.resize(size_t(s.tokens) * s.dim);
  return out;
}

// rmsnorm_ref with the same x_rows: [T, ys] y (gaps poisoned) and [T, D] x_copy.
GatherOut run_gathered_ref(const GatherInputs& in, const GatherShape& s) {
  GatherOut out{std::vector<bf16>(size_t(s.tokens) * s.ys, testing::poison_value<bf16>()),
                std::vector<bf16>(size_t(s.tokens) * s.dim, testing::poison_value<bf16>())};
  RmsNormParams p =
      params(in.x.data() + s.x_off, in.w.data(), out.y.data(), s.tokens, s.dim, s.xs, s.ys, 1e-6f);
  p.x_rows = in.rows.data();
  p.x_row_bound = s.bound;
  p.x_copy = out.copy.data();
  Status st = rmsnorm_ref(p);
  EXPECT_TRUE(st.ok()) << describe(s) << ": " << st.to_string();
  return out;
}

// Both kernel paths with every entry kind (-1, repeats, out of range on either side: zero rows in
// unchecked mode), with and without x_copy, skip_minus_one on and off: y and x_copy bit-identical
// to the pair, which the gathered norm runs on the same path (source rows 16-byte aligned: the
// vector kernel; D % 8 != 0, an unaligned stride, x, x_copy or y stride: the scalar kernel, and
// the pair's dense buffer is then put off alignment to match). y within 1 bf16 ulp of the
// gathered rmsnorm_ref, x_copy bit-equal to its copy.
TEST(RmsNormCuda, GatheredBitIdenticalToRowCopyThenRmsNorm) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  const uint64_t seed = testing::test_seed();
  const GatherShape shapes[] = {
      {1, 256, 4, 256, 256},    {5, 256, 11, 264, 256},      {33, 7168, 40, 7168, 7168},
      {5, 7168, 6, 7176, 7184}, {130, 512, 200, 576, 512},   {2, 16384, 3, 16384, 16384},
      {33, 77, 50, 77, 77},     {5, 77, 7, 80, 83},          {1, 77, 1, 77, 77},
      {6, 256, 9, 259, 256},    {6, 256, 9, 256, 256, 1, 0}, {6, 7168, 9, 7168, 7168, 0, 1},
      {3, 1536, 4, 1536, 1541}, {1, 70000, 2, 70000, 70000}, {0, 256, 4, 256, 256}};
  int i = 0;
  for (const GatherShape& s : shapes) {
    Rng rng(seed + uint64_t(i++));
    GatherInputs in;
    in.x = random_rows(rng, 1, int64_t(s.x_off));
    const std::vector<bf16> rows = random_rows(rng, s.bound, s.xs);
    in.x.insert(in.x.end(), rows.begin(), rows.end());
    in.rows = gather_entries(rng, s.tokens, s.bound);
    in.w = rng.bf16_vector(size_t(s.dim), 0.5f);
    const GatherOut ref = run_gathered_ref(in, s);
    for (bool with_copy : {false, true}) {
      const bool skip = (i + int(with_copy)) % 2 == 1;
      const std::string what = describe(s) + (with_copy ? " x_copy" : "") + (skip ? " skip" : "");
      const bool vec = s.dim % 8 == 0 && s.xs % 8 == 0 && s.ys % 8 == 0 && s.x_off % 8 == 0 &&
                       (!with_copy || s.copy_off % 8 == 0);
      const GatherOut got = run_gathered_gpu(in, s, with_copy, skip);
      const GatherOut pair = run_pair_gpu(in, s, vec ? 0 : 1);
      EXPECT_EQ(testing::first_bit_difference(got.y, pair.y), "") << what << ": y vs pair";
      if (with_copy) {
        EXPECT_EQ(testing::first_bit_difference(got.copy, pair.copy), "") << what << ": x_copy";
        EXPECT_EQ(testing::first_bit_difference(got.copy, ref.copy), "")
            << what << ": x_copy vs reference";
      } else {
        EXPECT_TRUE(std::all_of(got.copy.begin(), got.copy.end(),
                                [](bf16 v) { return testing::is_poison(v); }))
            << what << ": x_copy written without being set";
      }
      expect_close(got.y, ref.y, s.tokens, s.dim, s.ys, what.c_str());
    }
  }
}

// Checked mode on the device: a bad entry is OutOfRange through the error word, naming its
// position and value (-1 too, unless skip_minus_one), on both kernel paths; the word is cleared
// (a good call after it is OK), and a good call's y is the unchecked one.
TEST(RmsNormCuda, GatheredCheckedModeReportsBadEntries) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  for (int32_t dim : {8, 3}) {
    const int32_t bound = 4, tokens = 4;
    auto dx = dev(random_rows(rng, bound, dim));
    auto dw = dev(rng.bf16_vector(size_t(dim), 0.5f));
    auto run = [&](const std::vector<int32_t>& rows, bool skip, std::vector<bf16>* y) {
      auto drows = dev(rows);
      auto dy = testing::poisoned<bf16>(size_t(tokens) * dim);
      RmsNormParams p = params(dx.data(), dw.data(), dy.data(), tokens, dim, 0, 0, 1e-6f);
      p.x_rows = drows.data();
      p.x_row_bound = bound;
      p.skip_minus_one = skip;
      Status st = rmsnorm_cuda(p);
      if (y != nullptr) *y = host(dy);
      return st;
    };
    ScopedCheckedMode checked(true);
    for (int32_t bad : {bound, -2, INT32_MIN, INT32_MAX}) {
      for (bool skip : {false, true}) {
        const std::string what =
            "D=" + std::to_string(dim) + " entry " + std::to_string(bad) + (skip ? " skip" : "");
        Status s = run({0, 3, bad, 1}, skip, nullptr);
        EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << what << ": " << s.to_string();
        EXPECT_NE(s.message().find("index 2 (value " + std::to_string(bad) + ")"),
                  std::string::npos)
            << what << ": " << s.to_string();
        EXPECT_NE(s.message().find("x_rows"), std::string::npos) << what << ": " << s.to_string();
        s = run({0, 3, 2, 1}, skip, nullptr);
        EXPECT_TRUE(s.ok()) << what << ": the error word was left set: " << s.to_string();
      }
    }
    Status s = run({0, -1, 3, 3}, false, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << "D=" << dim << ": " << s.to_string();
    EXPECT_NE(s.message().find("index 1 (value -1)"), std::string::npos) << s.to_string();
    std::vector<bf16> y_checked, y_unchecked;
    s = run({0, -1, 3, 3}, true, &y_checked);
    EXPECT_TRUE(s.ok()) << "D=" << dim << ": -1 with skip_minus_one reported: " << s.to_string();
    {
      ScopedCheckedMode unchecked(false);
      ASSERT_TRUE(run({0, -1, 3, 3}, true, &y_unchecked).ok());
    }
    EXPECT_EQ(testing::first_bit_difference(y_checked, y_unchecked), "") << "D=" << dim;
    for (int32_t d = 0; d < dim; ++d)
      EXPECT_EQ(y_checked[size_t(dim) + d].bits & 0x7FFF, 0) << "D=" << dim << " zero row " << d;
  }
}

// The check entry (independent long-double norm of each gathered row, x_copy, the gaps) through a
// host-pointer adapter, in both modes (checked: no out-of-range entries, -1 with skip_minus_one).
Status rmsnorm_gathered_cuda_on_host_buffers(const RmsNormParams& hp) {
  DSA_RETURN_IF_ERROR(validate(hp));
  const int64_t xs = hp.x_stride ? hp.x_stride : hp.dim, ys = hp.y_stride ? hp.y_stride : hp.dim;
  const size_t xn = size_t(hp.x_row_bound - 1) * xs + hp.dim;
  const size_t yn = size_t(hp.num_tokens - 1) * ys + hp.dim;
  using P = RmsNormParams;
  const testing::In<&P::x> x{xn};
  const testing::In<&P::weight> w{size_t(hp.dim)};
  const testing::In<&P::x_rows> rows{size_t(hp.num_tokens)};
  const testing::InOut<&P::y> y{yn};
  if (hp.x_copy == nullptr) return testing::run_on_host_buffers(hp, rmsnorm_cuda, x, w, rows, y);
  return testing::run_on_host_buffers(hp, rmsnorm_cuda, x, w, rows, y,
                                      testing::InOut<&P::x_copy>{size_t(hp.num_tokens) * hp.dim});
}

TEST(RmsNormCuda, GatheredMatchesIndependentFormulation) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (bool checked : {false, true}) {
    ScopedCheckedMode mode(checked);
    for (auto [tokens, dim, bound] : {std::tuple{37, 256, 50}, {9, 77, 4}, {8, 7168, 3}}) {
      for (bool with_copy : {false, true}) {
        Status s = check_rmsnorm_gathered(rmsnorm_gathered_cuda_on_host_buffers, tokens, dim, bound,
                                          with_copy, seed + dim);
        EXPECT_TRUE(s.ok()) << "T=" << tokens << " D=" << dim << " bound=" << bound
                            << (with_copy ? " x_copy" : "") << (checked ? " checked" : "") << ": "
                            << s.to_string();
      }
    }
  }
}

// Host checks before any launch: the gather's own fields.
TEST(RmsNormCuda, GatheredHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  auto dx = dev(std::vector<bf16>(4 * 8, float_to_bf16(1.f))), dw = dev(std::vector<bf16>(8));
  auto drows = dev(std::vector<int32_t>{0, 1});
  auto dy = testing::poisoned<bf16>(2 * 8);
  RmsNormParams p = params(dx.data(), dw.data(), dy.data(), 2, 8, 0, 0, 1e-6f);
  p.x_rows = drows.data();
  p.x_row_bound = 0;
  Status s = rmsnorm_cuda(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("x_row_bound = 0"), std::string::npos) << s.to_string();
  p.x_row_bound = 4;
  p.y = dx.data() + 8;  // y over the gathered x
  s = rmsnorm_cuda(p);
  EXPECT_NE(s.message().find("y overlaps"), std::string::npos) << s.to_string();
  p.y = dy.data();
  p.x_copy = dy.data();  // x_copy over y
  s = rmsnorm_cuda(p);
  EXPECT_NE(s.message().find("x_copy overlaps"), std::string::npos) << s.to_string();
  p.x_rows = nullptr;  // x_copy without x_rows
  s = rmsnorm_cuda(p);
  EXPECT_NE(s.message().find("x_copy is set without x_rows"), std::string::npos) << s.to_string();
  EXPECT_TRUE(testing::is_poison(host(dy)[0])) << "written by a refused call";
}

// ---- rmsnorm_pair: two norms, one launch ----

// The pair's GPU run: norm a (source xa) into y's first half, norm b (source xb, off_b elements
// into its allocation) into the second, y = [T, 2D] poisoned first. `alone`: the two rmsnorm_cuda
// launches instead of rmsnorm_pair_cuda.
struct PairCase {
  int32_t tokens, dim, bound_a, bound_b;
  size_t off_b;  // 1: norm b's source off 16-byte alignment (the scalar path: two launches)
  std::string what() const {
    return "T=" + std::to_string(tokens) + " D=" + std::to_string(dim) +
           " bounds=" + std::to_string(bound_a) + "," + std::to_string(bound_b) +
           " off_b=" + std::to_string(off_b);
  }
};

struct PairInputs {
  std::vector<bf16> xa, xb, wa, wb;
  std::vector<int32_t> ra, rb;
};

// The pair's two norms over buffers laid out as PairInputs (host or device copies): norm a from
// xa into y's first half, norm b (skip_minus_one) from xb + off_b into the second, y [T, 2D].
struct PairParams {
  RmsNormParams a, b;
};
PairParams pair_params(const PairCase& c, const bf16* xa, const bf16* xb, const bf16* wa,
                       const bf16* wb, const int32_t* ra, const int32_t* rb, bf16* y) {
  const int64_t ys = 2 * int64_t{c.dim};
  PairParams p{params(xa, wa, y, c.tokens, c.dim, 0, ys, 1e-6f),
               params(xb + c.off_b, wb, y + c.dim, c.tokens, c.dim, 0, ys, 1e-6f)};
  p.a.x_rows = ra;
  p.a.x_row_bound = c.bound_a;
  p.b.x_rows = rb;
  p.b.x_row_bound = c.bound_b;
  p.b.skip_minus_one = true;
  return p;
}

// PairInputs in device memory, y poisoned.
struct PairOnDevice {
  cuda::DeviceBuffer<bf16> xa, xb, wa, wb, y;
  cuda::DeviceBuffer<int32_t> ra, rb;
  PairParams p;
  PairOnDevice(const PairInputs& in, const PairCase& c)
      : xa(dev(in.xa)),
        xb(dev(in.xb)),
        wa(dev(in.wa)),
        wb(dev(in.wb)),
        y(testing::poisoned<bf16>(std::max<size_t>(size_t(c.tokens) * 2 * size_t(c.dim), 1))),
        ra(dev(in.ra, 1)),
        rb(dev(in.rb, 1)),
        p(pair_params(c, xa.data(), xb.data(), wa.data(), wb.data(), ra.data(), rb.data(),
                      y.data())) {}
};

std::vector<bf16> run_pair_norms(const PairInputs& in, const PairCase& c, bool alone,
                                 Status* status = nullptr) {
  const PairOnDevice d(in, c);
  Status st = alone ? rmsnorm_cuda(d.p.a) : rmsnorm_pair_cuda(d.p.a, d.p.b);
  if (alone && st.ok()) st = rmsnorm_cuda(d.p.b);
  if (status != nullptr) {
    *status = st;
  } else {
    EXPECT_TRUE(st.ok()) << c.what() << (alone ? " alone" : " pair") << ": " << st.to_string();
  }
  std::vector<bf16> y = host(d.y);
  y.resize(size_t(c.tokens) * 2 * size_t(c.dim));
  return y;
}

PairInputs pair_inputs(Rng& rng, const PairCase& c) {
  PairInputs in;
  in.xa = random_rows(rng, c.bound_a, c.dim);
  in.xb = random_rows(rng, 1, int64_t(c.off_b));
  const std::vector<bf16> rows = random_rows(rng, c.bound_b, c.dim);
  in.xb.insert(in.xb.end(), rows.begin(), rows.end());
  in.wa = rng.bf16_vector(size_t(c.dim), 0.5f);
  in.wb = rng.bf16_vector(size_t(c.dim), 0.5f);
  in.ra = gather_entries(rng, c.tokens, c.bound_a);
  in.rb = gather_entries(rng, c.tokens, c.bound_b);
  return in;
}

// The MTP layer's form (the tiny model's 256 over a 6144-row embedding, V3.2's 7168) with -1,
// repeated and out-of-range entries (zero rows, unchecked), T = 1 to 130, and a pair whose norms
// take different paths (two launches): every half bit-identical to rmsnorm_cuda of that norm
// alone, and the whole row within 1 bf16 ulp of rmsnorm_pair_ref.
TEST(RmsNormPairCuda, EachHalfBitIdenticalToItsNormAlone) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  const uint64_t seed = testing::test_seed();
  const PairCase cases[] = {{1, 256, 6144, 16, 0},   {4, 256, 300, 16, 0}, {37, 7168, 50, 40, 0},
                            {130, 512, 200, 140, 0}, {5, 100, 9, 9, 0},    {6, 256, 9, 9, 1},
                            {0, 256, 4, 4, 0}};
  int i = 0;
  for (const PairCase& c : cases) {
    Rng rng(seed + uint64_t(i++));
    const PairInputs in = pair_inputs(rng, c);
    const std::vector<bf16> pair = run_pair_norms(in, c, false);
    const std::vector<bf16> alone = run_pair_norms(in, c, true);
    EXPECT_EQ(testing::first_bit_difference(pair, alone), "") << c.what();
    const int64_t ys = 2 * int64_t{c.dim};
    std::vector<bf16> ref(size_t(c.tokens) * ys, testing::poison_value<bf16>());
    const PairParams host = pair_params(c, in.xa.data(), in.xb.data(), in.wa.data(), in.wb.data(),
                                        in.ra.data(), in.rb.data(), ref.data());
    const Status st = rmsnorm_pair_ref(host.a, host.b);
    ASSERT_TRUE(st.ok()) << c.what() << ": " << st.to_string();
    expect_close(pair, ref, c.tokens, int32_t(ys), ys, c.what().c_str());
  }
}

// The pair is one launch where both norms are gathered on the vector path, two otherwise: the
// kernels the call puts in a captured graph.
TEST(RmsNormPairCuda, OneLaunchOnTheVectorPath) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed() + 11);
  for (const PairCase& c : {PairCase{4, 256, 300, 16, 0}, PairCase{4, 256, 9, 9, 1}}) {
    const PairOnDevice d(pair_inputs(rng, c), c);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    const cudaStream_t previous = cuda::current_stream();
    cuda::set_current_stream(stream);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const Status st = rmsnorm_pair_cuda(d.p.a, d.p.b);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    cuda::set_current_stream(previous);
    EXPECT_TRUE(st.ok()) << c.what() << ": " << st.to_string();
    size_t nodes = 0;
    ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
    EXPECT_EQ(nodes, c.off_b == 0 ? 1u : 2u) << c.what();
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// Checked mode: a bad entry in either norm is OutOfRange through the error word (the word cleared
// after it), a good pair is OK; host checks refuse mismatched shapes before any launch.
TEST(RmsNormPairCuda, CheckedModeAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const PairCase c{4, 256, 6, 6, 0};
  PairInputs in = pair_inputs(rng, c);
  ScopedCheckedMode checked(true);
  in.ra = {0, 5, 3, 1};
  in.rb = {2, -1, 4, 0};  // -1 is skipped in norm b
  Status st;
  run_pair_norms(in, c, false, &st);
  EXPECT_TRUE(st.ok()) << st.to_string();
  for (const bool in_b : {false, true}) {
    PairInputs bad = in;
    (in_b ? bad.rb : bad.ra)[2] = 6;  // = bound
    run_pair_norms(bad, c, false, &st);
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << (in_b ? "b: " : "a: ") << st.to_string();
    EXPECT_NE(st.message().find("index 2 (value 6)"), std::string::npos) << st.to_string();
    run_pair_norms(in, c, false, &st);
    EXPECT_TRUE(st.ok()) << "the error word was left set: " << st.to_string();
  }
  auto dx = dev(std::vector<bf16>(8 * 256, float_to_bf16(1.f)));
  auto dw = dev(std::vector<bf16>(256));
  auto dy = testing::poisoned<bf16>(8 * 256);
  const RmsNormParams a = params(dx.data(), dw.data(), dy.data(), 2, 256, 0, 0, 1e-6f);
  RmsNormParams b = params(dx.data(), dw.data(), dy.data() + 512, 3, 256, 0, 0, 1e-6f);
  st = rmsnorm_pair_cuda(a, b);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("num_tokens 2 and 3"), std::string::npos) << st.to_string();
  EXPECT_TRUE(testing::is_poison(host(dy)[0])) << "written by a refused call";
}

// ---- residual add: bit-exact ----

void check_residual(int32_t tokens, int32_t dim, size_t offset, uint64_t seed) {
  Rng rng(seed);
  const size_t n = size_t(tokens) * dim;
  std::vector<bf16> h(n + offset), x(n + offset);
  for (size_t i = 0; i < n + offset; ++i) {
    h[i] = float_to_bf16(rng.normal() * std::ldexp(1.f, int(rng.randint(-10, 10))));
    x[i] = float_to_bf16(rng.normal() * std::ldexp(1.f, int(rng.randint(-10, 10))));
  }
  auto dh = dev(h), dx = dev(x);
  ResidualAddParams p{dh.data() + offset, dx.data() + offset, tokens, dim};
  ASSERT_TRUE(residual_add_cuda(p).ok());
  auto got = host(dh);
  std::vector<bf16> want = h;
  ASSERT_TRUE(residual_add_ref({want.data() + offset, x.data() + offset, tokens, dim}).ok());
  for (size_t i = 0; i < n + offset; ++i)
    ASSERT_EQ(got[i].bits, want[i].bits)
        << "T=" << tokens << " D=" << dim << " offset " << offset << " at " << i;
}

TEST(ResidualAddCuda, BitExactWithReference) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  check_residual(19, 256, 0, seed);       // vector path
  check_residual(64, 7168, 0, seed + 1);  // V3.2 hidden
  check_residual(3, 7, 0, seed + 2);      // n % 8 != 0: scalar path
  check_residual(5, 64, 1, seed + 3);     // unaligned pointers: scalar path
  check_residual(4096, 7168, 0, seed + 4);
}

TEST(ResidualAddCuda, HandComputedTiesAndCheckEntry) {
  DSA_SKIP_WITHOUT_GPU();
  std::vector<bf16> h = {float_to_bf16(1.f), float_to_bf16(1.f + 0x1p-7f), float_to_bf16(3.f)};
  std::vector<bf16> x = {float_to_bf16(0x1p-8f), float_to_bf16(0x1p-8f), float_to_bf16(-1.5f)};
  auto dh = dev(h), dx = dev(x);
  ASSERT_TRUE(residual_add_cuda({dh.data(), dx.data(), 1, 3}).ok());
  auto got = host(dh);
  EXPECT_EQ(bf16_to_float(got[0]), 1.f);
  EXPECT_EQ(bf16_to_float(got[1]), 1.f + 0x1p-6f);
  EXPECT_EQ(bf16_to_float(got[2]), 1.5f);
  EXPECT_TRUE(residual_add_cuda({nullptr, nullptr, 0, 4}).ok());
  EXPECT_EQ(residual_add_cuda({nullptr, dx.data(), 1, 3}).code(), StatusCode::kInvalidArgument);
}

// ---- add_rmsnorm: bit-identical to residual_add_cuda then rmsnorm_cuda ----

struct AddShape {
  int32_t tokens, dim;
  int64_t ys;
  // Elements before h / add in their buffers (1: not 16-byte aligned).
  size_t h_off = 0, add_off = 0;
};

std::string describe(const AddShape& s) {
  return "T=" + std::to_string(s.tokens) + " D=" + std::to_string(s.dim) +
         " ys=" + std::to_string(s.ys) + " h_off=" + std::to_string(s.h_off) +
         " add_off=" + std::to_string(s.add_off);
}

struct AddInputs {
  std::vector<bf16> h, add, w;  // h and add with their offsets in front
};

AddInputs random_add_inputs(Rng& rng, const AddShape& s) {
  AddInputs in;
  const size_t n = size_t(s.tokens) * s.dim;
  in.h = random_rows(rng, 1, int64_t(s.h_off));
  const std::vector<bf16> rows = random_rows(rng, s.tokens, s.dim);
  in.h.insert(in.h.end(), rows.begin(), rows.end());
  in.add.resize(s.add_off + n);
  // Adds of magnitude 2^-8..2^2 against rows scaled 2^-6..2^6: the fp32 add rounds to bf16 in
  // many places, and some rows are dominated by the add.
  for (bf16& a : in.add) a = float_to_bf16(rng.normal() * std::ldexp(1.f, int(rng.randint(-8, 2))));
  in.w = rng.bf16_vector(size_t(s.dim), 0.5f);
  return in;
}

struct AddOut {
  std::vector<bf16> h, y;  // the whole h buffer (offset included) and the poisoned [T, ys] y
};

// add_rmsnorm_cuda, or with `pair` residual_add_cuda then rmsnorm_cuda (x = the updated h).
AddOut run_add_gpu(const AddInputs& in, const AddShape& s, bool pair) {
  auto dh = dev(in.h, 1), dadd = dev(in.add, 1), dw = dev(in.w);
  auto dy = testing::poisoned<bf16>(std::max<size_t>(size_t(s.tokens) * s.ys, 1));
  bf16* h = dh.data() + s.h_off;
  const bf16* add = dadd.data() + s.add_off;
  if (pair) {
    Status st = residual_add_cuda({h, add, s.tokens, s.dim});
    EXPECT_TRUE(st.ok()) << st.to_string();
    st = rmsnorm_cuda(params(h, dw.data(), dy.data(), s.tokens, s.dim, 0, s.ys, 1e-6f));
    EXPECT_TRUE(st.ok()) << st.to_string();
  } else {
    AddRmsNormParams p;
    p.h = h;
    p.add = add;
    p.weight = dw.data();
    p.y = dy.data();
    p.num_tokens = s.tokens;
    p.dim = s.dim;
    p.y_stride = s.ys;
    Status st = add_rmsnorm_cuda(p);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  AddOut out{host(dh), host(dy)};
  out.h.resize(in.h.size());  // drop the one-element floor of an empty buffer
  out.y.resize(size_t(s.tokens) * s.ys);
  return out;
}

AddOut run_add_ref(const AddInputs& in, const AddShape& s) {
  AddOut out{in.h, std::vector<bf16>(size_t(s.tokens) * s.ys, testing::poison_value<bf16>())};
  AddRmsNormParams p;
  p.h = out.h.data() + s.h_off;
  p.add = in.add.data() + s.add_off;
  p.weight = in.w.data();
  p.y = out.y.data();
  p.num_tokens = s.tokens;
  p.dim = s.dim;
  p.y_stride = s.ys;
  Status st = add_rmsnorm_ref(p);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

// Every kernel path and every cached-vector count: vector with 1 (D = 512, 1536), 2 (4096 on 256
// threads, 16384 on 1024), 4 (7168) and 8 (65536) vectors per thread; scalar for D % 8 != 0, an
// odd y stride, an unaligned h, D > 65536. An unaligned add keeps the vector path (the pair's
// rmsnorm does not see add). Many blocks (T = 2048 at 7168), T = 1, T = 0.
TEST(AddRmsNormCuda, BitIdenticalToResidualAddThenRmsNorm) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  const AddShape shapes[] = {
      {1, 7168, 7168},   {64, 7168, 7168},  {2048, 7168, 7168},    {1000, 512, 512},
      {5, 1536, 1536},   {6, 1536, 1544},   {33, 4096, 4096},      {2, 16384, 16384},
      {2, 65536, 65536}, {130, 256, 256},   {4, 96, 112},          {3, 7, 7},
      {1, 7, 7},         {5, 100, 100},     {17, 7168, 7171},      {1, 70000, 70000},
      {5, 64, 64, 1, 0}, {5, 64, 64, 0, 1}, {9, 7168, 7168, 0, 1}, {0, 64, 64}};
  int i = 0;
  for (const AddShape& s : shapes) {
    const std::string what = describe(s);
    Rng rng(seed + uint64_t(i++));
    const AddInputs in = random_add_inputs(rng, s);
    const AddOut fused = run_add_gpu(in, s, false), pair = run_add_gpu(in, s, true);
    const AddOut ref = run_add_ref(in, s);
    EXPECT_EQ(testing::first_bit_difference(fused.h, pair.h), "") << what << ": h vs pair";
    EXPECT_EQ(testing::first_bit_difference(fused.y, pair.y), "") << what << ": y vs pair";
    EXPECT_EQ(testing::first_bit_difference(fused.h, ref.h), "") << what << ": h vs reference";
    expect_close(fused.y, ref.y, s.tokens, s.dim, s.ys, what.c_str());
  }
}

// Two runs are bit-identical (h included: each run starts from the same inputs).
TEST(AddRmsNormCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  for (const AddShape& s : {AddShape{19, 7168, 7168}, AddShape{19, 7, 7}}) {
    const AddInputs in = random_add_inputs(rng, s);
    const AddOut a = run_add_gpu(in, s, false), b = run_add_gpu(in, s, false);
    ASSERT_EQ(testing::first_bit_difference(a.h, b.h), "") << describe(s);
    ASSERT_EQ(testing::first_bit_difference(a.y, b.y), "") << describe(s);
  }
}

// The check entry (exact sums, independent long-double norm) through a host-pointer adapter.
Status add_rmsnorm_cuda_on_host_buffers(const AddRmsNormParams& hp) {
  DSA_RETURN_IF_ERROR(validate(hp));
  const int64_t ys = hp.y_stride ? hp.y_stride : hp.dim;
  const size_t n = size_t(hp.num_tokens) * hp.dim;
  const size_t yn = size_t(hp.num_tokens - 1) * ys + hp.dim;
  using P = AddRmsNormParams;
  // y is uploaded too, so the gaps between its rows come back still poisoned unless written.
  return testing::run_on_host_buffers(
      hp, add_rmsnorm_cuda, testing::InOut<&P::h>{n}, testing::In<&P::add>{n},
      testing::In<&P::weight>{size_t(hp.dim)}, testing::InOut<&P::y>{yn});
}

TEST(AddRmsNormCuda, MatchesIndependentFormulation) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, dim] : {std::pair{37, 512}, {3, 7}, {8, 7168}, {9, 100}}) {
    Status s = check_add_rmsnorm(add_rmsnorm_cuda_on_host_buffers, tokens, dim, seed + dim);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " D=" << dim << ": " << s.to_string();
  }
}

TEST(AddRmsNormCuda, ZeroTokensAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  AddRmsNormParams p;
  p.dim = 16;
  EXPECT_TRUE(add_rmsnorm_cuda(p).ok());
  auto dh = dev(std::vector<bf16>(32, float_to_bf16(1.f))), dw = dev(std::vector<bf16>(16));
  p.num_tokens = 2;
  p.h = dh.data();
  p.add = dh.data();
  p.weight = dw.data();
  p.y = dh.data();  // y over h: refused before any launch
  Status s = add_rmsnorm_cuda(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("overlaps h"), std::string::npos) << s.to_string();
  p.y = nullptr;
  s = add_rmsnorm_cuda(p);
  EXPECT_NE(s.message().find("y is null"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace dsa::kernels
