// GPU tests of linear_cuda against linear_ref (SPEC.md §8.8): bf16 weights (cuBLASLt) and FP8
// weights (the few-token wgmma kernel at every N and split-K, cuBLASLt's block-scaled GEMM with
// the wgmma kernel taking the last T % 4 tokens, the simple fused kernel in checked mode and for
// in % 16 != 0), bf16 and fp32 outputs, tiny and V3.2 shapes, within linear_tolerance_bounds
// (2^-12 M + 2^-7 |ref| for bf16 weights, 2^-8 M + 2^-7 |ref| for FP8), the checked error word
// (FP8: non-finite x or scale), determinism, graph replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/graph.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/linear/linear.h"
#include "dsa/kernels/linear/linear_fp8_cuda.h"
#include "dsa/testing/bf16_values.h"
#include "dsa/testing/compare.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/scoped_env.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::bf16s;
using testing::dev;
using testing::host;
using testing::Rng;

struct Problem {
  int32_t tokens, in, out;
  bool fp8;
  std::vector<bf16> x, w;
  std::vector<uint8_t> w8;
  std::vector<float> sw;

  // p with host or device pointers for x and the weight; outputs unset.
  LinearParams params(const bf16* xp, const bf16* wp, const uint8_t* w8p, const float* swp) const {
    LinearParams p;
    p.x = xp;
    p.weight = fp8 ? nullptr : wp;
    p.weight_fp8 = fp8 ? w8p : nullptr;
    p.weight_scale_inv = fp8 ? swp : nullptr;
    p.num_tokens = tokens;
    p.in_features = in;
    p.out_features = out;
    return p;
  }
};

// Like the check's inputs: per-token scales 2^-6..2^6; bf16 weights ~N(0, 0.05); FP8 codes of
// N(0, 100) with non-power-of-two block scales ~2^-9.
Problem make_problem(Rng& rng, int32_t tokens, int32_t in, int32_t out, bool fp8) {
  Problem pr{tokens, in, out, fp8, std::vector<bf16>(size_t(tokens) * in), {}, {}, {}};
  for (int32_t t = 0; t < tokens; ++t) {
    const float scale = std::ldexp(1.f, int(rng.randint(-6, 6)));
    for (int32_t j = 0; j < in; ++j) pr.x[size_t(t) * in + j] = float_to_bf16(rng.normal() * scale);
  }
  const size_t wn = size_t(out) * in;
  if (fp8) {
    pr.w8 = rng.e4m3_vector(wn, 100.f);
    pr.sw.resize(size_t((out + 127) / 128) * ((in + 127) / 128));
    for (auto& s : pr.sw) s = rng.uniform(0.5f, 2.f) * 0x1p-9f;
  } else {
    pr.w = rng.bf16_vector(wn, 0.05f);
  }
  return pr;
}

// An empty vector gives an empty buffer (null pointer) without touching the device.
template <typename T>
DeviceBuffer<T> dev_or_empty(const std::vector<T>& h) {
  return h.empty() ? DeviceBuffer<T>() : dev(h);
}

struct Device {
  DeviceBuffer<bf16> x, w;
  DeviceBuffer<uint8_t> w8;
  DeviceBuffer<float> sw;
  explicit Device(const Problem& pr)
      : x(dev_or_empty(pr.x)),
        w(dev_or_empty(pr.w)),
        w8(dev_or_empty(pr.w8)),
        sw(dev_or_empty(pr.sw)) {}
  LinearParams params(const Problem& pr) const {
    return pr.params(x.data(), w.data(), w8.data(), sw.data());
  }
};

// GPU output as fp32 (bf16 outputs upcast), outputs poisoned; Status through `s`.
std::vector<float> run_gpu(const Problem& pr, const Device& d, bool f32_out, Status* s) {
  const size_t n = size_t(pr.tokens) * pr.out;
  LinearParams p = d.params(pr);
  std::vector<float> out(n);
  if (f32_out) {
    auto y = testing::poisoned<float>(n);
    p.y_f32 = y.data();
    *s = linear_cuda(p);
    out = host(y);
  } else {
    auto y = testing::poisoned<bf16>(n);
    p.y = y.data();
    *s = linear_cuda(p);
    auto hy = host(y);
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(hy[i]);
  }
  return out;
}

void expect_within_tolerance(const Problem& pr, uint64_t run_id) {
  Device d(pr);
  const std::string what = std::string(pr.fp8 ? "fp8" : "bf16") +
                           " T=" + std::to_string(pr.tokens) + " in=" + std::to_string(pr.in) +
                           " out=" + std::to_string(pr.out);
  for (bool f32_out : {false, true}) {
    const size_t n = size_t(pr.tokens) * pr.out;
    LinearParams hp = pr.params(pr.x.data(), pr.w.data(), pr.w8.data(), pr.sw.data());
    std::vector<float> ref(n, NAN), bound(n, NAN);
    std::vector<bf16> ref16(n);
    if (f32_out) {
      hp.y_f32 = ref.data();
    } else {
      hp.y = ref16.data();
    }
    ASSERT_TRUE(linear_ref(hp).ok());
    if (!f32_out)
      for (size_t i = 0; i < n; ++i) ref[i] = bf16_to_float(ref16[i]);
    ASSERT_TRUE(linear_tolerance_bounds(hp, ref.data(), bound.data()).ok());
    Status s;
    std::vector<float> got = run_gpu(pr, d, f32_out, &s);
    ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
    auto r = testing::within_bound(got, ref, bound);
    EXPECT_TRUE(r.ok) << what << (f32_out ? " fp32 out" : " bf16 out") << " (run " << run_id
                      << "): " << r.message;
  }
}

TEST(LinearCuda, Bf16WeightWithinTolerance) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t t, in, out;
  } shapes[] = {{3, 256, 6144},  {5, 300, 200},        {1, 1, 1},        {2, 7, 130},
                {1, 7168, 1536}, {32, 7168, 1536},     {2, 7168, 18432}, {300, 512, 576},
                {33, 1536, 576}, {7, 128, 129280 / 64}};
  uint64_t n = 0;
  for (const Shape& s : shapes) {
    Rng rng(seed + n);
    expect_within_tolerance(make_problem(rng, s.t, s.in, s.out, false), n++);
  }
}

// T <= 8 with in % 8 == 0 runs the few-token kernel (linear_few_tokens.h): every token count it
// templates on (1, 2, 4, 8 and the counts between, whose last tokens it masks), out not a multiple
// of its 4 rows per CTA, in shorter than one step of its CTA (2048 columns) and not a multiple of
// it, and V3.2's LM-head-sized rows; in % 8 != 0 falls back to cuBLASLt.
TEST(LinearCuda, Bf16FewTokensWithinTolerance) {
  DSA_SKIP_WITHOUT_GPU();
  // The kernel is opt-in (few_token_gemv.cuh); on for this test's calls only.
  const testing::ScopedEnv few_tokens("DSA_LINEAR_FEW_TOKENS", "1");
  const uint64_t seed = testing::test_seed() + 1000;
  struct Shape {
    int32_t t, in, out;
  } shapes[] = {{1, 256, 512},  {2, 8, 1},       {3, 2056, 7},    {4, 7168, 576},
                {5, 512, 130},  {6, 64, 33},     {7, 1536, 4099}, {8, 2048, 1792},
                {8, 7168, 129}, {1, 16384, 257}, {2, 12, 40},     {1, 7168, 129280 / 16}};
  uint64_t n = 0;
  for (const Shape& s : shapes) {
    Rng rng(seed + n);
    expect_within_tolerance(make_problem(rng, s.t, s.in, s.out, false), n++);
  }
}

// DSA_LINEAR_FEW_TOKENS=narrow takes the few-token kernel for products of at most 256 outputs only:
// those give the bits of =1 (the same kernel), wider ones the bits of the default (cuBLASLt). The
// two kernels sum in different orders, so over 1024+ fp32 products their bits differ: the test
// sees which one ran. Narrow's outputs are within the bf16 class's tolerance too.
TEST(LinearCuda, Bf16FewTokensNarrowTakesOnlyNarrowProducts) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed() + 2000;
  struct Shape {
    int32_t t, in, out;
  } shapes[] = {{1, 7168, 64}, {4, 7168, 256}, {2, 2048, 8}, {1, 7168, 257}, {3, 1024, 1536}};
  uint64_t n = 0;
  for (const Shape& s : shapes) {
    Rng rng(seed + n++);
    const Problem pr = make_problem(rng, s.t, s.in, s.out, false);
    const Device d(pr);
    auto run = [&](const char* mode) {
      const testing::ScopedEnv env("DSA_LINEAR_FEW_TOKENS", mode);
      Status st;
      std::vector<float> y = run_gpu(pr, d, true, &st);
      EXPECT_TRUE(st.ok()) << st.to_string();
      return y;
    };
    const std::vector<float> narrow = run("narrow"), all = run("1"), none = run("0");
    const std::string what = "t " + std::to_string(s.t) + " in " + std::to_string(s.in) + " out " +
                             std::to_string(s.out);
    ASSERT_NE(all, none) << what << ": the two kernels gave the same bits";
    EXPECT_EQ(narrow, s.out <= 256 ? all : none) << what;
    const testing::ScopedEnv env("DSA_LINEAR_FEW_TOKENS", "narrow");
    expect_within_tolerance(pr, 3000 + n);
  }
}

TEST(LinearCuda, Fp8WeightWithinTolerance) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t t, in, out;
  } shapes[] = {{4, 1536, 576},  {3, 300, 200},   {2, 7, 130},    {1, 1, 1},
                {8, 7168, 1536}, {1, 7168, 4096}, {33, 512, 300}, {17, 2048, 7168 / 4}};
  uint64_t n = 100;
  for (const Shape& s : shapes) {
    Rng rng(seed + n);
    expect_within_tolerance(make_problem(rng, s.t, s.in, s.out, true), n++);
  }
}

// Every dispatch of the unchecked FP8 path: wgmma N = 8/16/32/64 (rows 1..64), several launches
// of 64 (65, 128, 131 tokens), split-K from 1 to many splits under both split rules (1536 -> 24576
// has 384 row tiles; 7168 -> 576 has 9), out not a multiple of 64, a last K block of 16 columns
// (1552), in / 128 odd (1664: cuBLASLt is not asked), and cuBLASLt for T - T % 4 tokens with the
// rest on the wgmma kernel (130, 257, 1027).
TEST(LinearCuda, Fp8FastPathsEveryDispatch) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t t, in, out;
  } shapes[] = {{1, 7168, 576},   {2, 1664, 200},   {9, 7168, 1536},   {31, 2048, 1792},
                {64, 1552, 300},  {65, 1536, 576},  {128, 512, 1024},  {130, 2048, 640},
                {131, 1664, 320}, {257, 7168, 576}, {1027, 1024, 512}, {1, 16384, 7168},
                {3, 1536, 24576}, {17, 128, 64}};
  // Both split-K rules (one wave, the default; at least a wave, DSA_FP8_SPLITS=fill).
  for (const char* rule : {"wave", "fill"}) {
    testing::ScopedEnv env("DSA_FP8_SPLITS", rule);
    uint64_t n = 200;
    for (const Shape& s : shapes) {
      Rng rng(seed + n);
      SCOPED_TRACE(rule);
      expect_within_tolerance(make_problem(rng, s.t, s.in, s.out, true), n++);
    }
  }
}

// The fused few-token kernel (it quantises its own tokens) gives the bytes of the quantiser +
// GEMM pair, split for split: every wgmma N (T 1, 8, 9, 16, 17, 31), a last K block of 16
// columns (1552), in / 128 odd (1664), out not a multiple of 64, 2 splits of 6 blocks (the most
// its token area takes at N = 8: 1536 -> 24576), 4 of 4 (2048 -> 7168) and 56 of 1 (7168 -> 576);
// the token rows past T and the columns past `in` must come out as zeros for this to hold.
// Shapes whose split leaves more blocks (o_proj's 16384 -> 7168) take the two-kernel form.
TEST(LinearCuda, Fp8FusedQuantiserEqualsTheTwoKernels) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t t, in, out;
  } shapes[] = {{1, 7168, 576},   {8, 7168, 1536},  {9, 1552, 300},   {16, 1664, 200},
                {17, 1536, 1024}, {31, 2048, 1792}, {1, 1536, 24576}, {5, 2048, 7168}};
  // The rule that gives 1536 -> 24576 at T = 1 two splits of 6 blocks (the wave rule gives it
  // one split of 12, the two-kernel form).
  testing::ScopedEnv fill("DSA_FP8_SPLITS", "fill");
  uint64_t n = 400;
  for (const Shape& sh : shapes) {
    Rng rng(seed + n++);
    const Problem pr = make_problem(rng, sh.t, sh.in, sh.out, true);
    const Device d(pr);
    // On this GPU's SM count too, the split leaves the fused form few enough blocks: it runs.
    ASSERT_TRUE(linear_fp8::fused_plan(d.params(pr), sh.t, linear_fp8::scratch_sizes()))
        << "T=" << sh.t << " in=" << sh.in << " out=" << sh.out;
    std::vector<bf16> got[2];
    for (int fused = 0; fused < 2; ++fused) {
      testing::ScopedEnv env("DSA_FP8_FUSED_QUANT", fused ? "1" : "0");
      auto y = testing::poisoned<bf16>(size_t(pr.tokens) * pr.out);
      LinearParams p = d.params(pr);
      p.y = y.data();
      ASSERT_TRUE(linear_cuda(p).ok());
      got[fused] = host(y);
    }
    for (size_t i = 0; i < got[0].size(); ++i) {
      ASSERT_EQ(got[0][i].bits, got[1][i].bits)
          << "T=" << sh.t << " in=" << sh.in << " out=" << sh.out << " at " << i;
    }
  }
}

// A captured FP8 linear replays what eager computes, bit for bit, for inputs written after the
// capture (the split-K tickets are left zero by every launch, so replays do not drift).
TEST(LinearCuda, Fp8GraphReplayEqualsEager) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  ASSERT_TRUE(cuda::use_forward_stream().ok());
  Rng rng(testing::test_seed() + 7);
  for (int32_t tokens : {3, 40, 133}) {
    Problem pr = make_problem(rng, tokens, 7168, 576, true);
    Device d(pr);
    auto y = testing::poisoned<bf16>(size_t(tokens) * pr.out);
    LinearParams p = d.params(pr);
    p.y = y.data();
    ASSERT_TRUE(linear_cuda(p).ok());  // warm-up: scratch, plans, modules
    auto graph = cuda::Graph::capture([&] { return linear_cuda(p); });
    ASSERT_TRUE(graph.ok()) << graph.status().to_string();
    for (int rep = 0; rep < 3; ++rep) {
      Problem next = make_problem(rng, tokens, 7168, 576, true);
      ASSERT_EQ(cudaMemcpy(d.x.data(), next.x.data(), next.x.size() * sizeof(bf16),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_TRUE(graph->launch().ok());
      ASSERT_EQ(cudaStreamSynchronize(cuda::current_stream()), cudaSuccess);
      const auto replayed = host(y);
      ASSERT_TRUE(linear_cuda(p).ok());
      ASSERT_EQ(cudaStreamSynchronize(cuda::current_stream()), cudaSuccess);
      const auto eager = host(y);
      for (size_t i = 0; i < eager.size(); ++i)
        ASSERT_EQ(eager[i].bits, replayed[i].bits)
            << "T=" << tokens << " rep " << rep << " at " << i;
    }
  }
}

// The reference test's hand-computed cases.
TEST(LinearCuda, HandComputed) {
  DSA_SKIP_WITHOUT_GPU();
  Status s;
  {  // x = [1, 2], W = [[3, 4], [-1, 0.25]]: y = [11, -0.5]
    Problem pr{1, 2, 2, false, bf16s({1.f, 2.f}), bf16s({3.f, 4.f, -1.f, 0.25f}), {}, {}};
    Device d(pr);
    auto y = run_gpu(pr, d, false, &s);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(y, (std::vector<float>{11.f, -0.5f}));
  }
  {  // 1 + 2^-8: exact in fp32, a bf16 tie that rounds to the even 1.0
    Problem pr{1, 2, 1, false, bf16s({1.f, 1.f}), bf16s({1.f, 0x1p-8f}), {}, {}};
    Device d(pr);
    EXPECT_EQ(run_gpu(pr, d, false, &s)[0], 1.f);
    EXPECT_EQ(run_gpu(pr, d, true, &s)[0], 1.f + 0x1p-8f);
  }
  {  // FP8: x = [1, 0.3] quantises to [1, 0.3125]; rows 0 and 128 with scales 1 and 0.5
    Problem pr{1, 2, 129, true, bf16s({1.f, 0.3f}), {}, {}, {1.f, 0.5f}};
    pr.w8.assign(129 * 2, float_to_e4m3(0.f).bits);
    pr.w8[0] = pr.w8[1] = float_to_e4m3(1.f).bits;
    pr.w8[256] = float_to_e4m3(2.f).bits;
    pr.w8[257] = float_to_e4m3(-0.5f).bits;
    Device d(pr);
    auto y = run_gpu(pr, d, false, &s);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(y[0], 1.3125f);
    EXPECT_EQ(y[128], 0.921875f);
    EXPECT_EQ(y[5], 0.f);
  }
}

Problem fp8_case() {
  Problem pr{2, 2, 1, true, {}, {}, {}, {1.f}};
  for (float f : {1.f, 2.f, 3.f, 4.f}) pr.x.push_back(float_to_bf16(f));
  pr.w8.assign(2, float_to_e4m3(1.f).bits);
  return pr;
}

TEST(LinearCuda, CheckedFp8DataRules) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  Status s;
  Problem pr = fp8_case();
  pr.x[3] = float_to_bf16(INFINITY);
  {
    Device d(pr);
    run_gpu(pr, d, true, &s);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find("index 1 (value 1)"), std::string::npos) << s.to_string();
  }
  pr = fp8_case();
  pr.sw[0] = NAN;
  {
    Device d(pr);
    run_gpu(pr, d, true, &s);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  }
  pr = fp8_case();
  Device d(pr);
  auto y = run_gpu(pr, d, true, &s);
  ASSERT_TRUE(s.ok()) << "the word was not cleared: " << s.to_string();
  EXPECT_EQ(y, (std::vector<float>{3.f, 7.f}));
}

// Unchecked: a non-finite activation spoils only its own token.
TEST(LinearCuda, UncheckedNonFiniteActivationStaysInItsRow) {
  DSA_SKIP_WITHOUT_GPU();
  Status s;
  {
    ScopedCheckedMode unchecked(false);
    Problem pr = fp8_case();
    pr.x[3] = float_to_bf16(NAN);
    Device d(pr);
    auto y = run_gpu(pr, d, true, &s);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(y[0], 3.f);
  }
  ScopedCheckedMode checked(true);
  Problem pr = fp8_case();
  Device d(pr);
  run_gpu(pr, d, true, &s);
  EXPECT_TRUE(s.ok()) << "an unchecked call left an error behind: " << s.to_string();
}

// Two runs at V3.2 shapes are bit-identical (cuBLASLt without in-place split-K reductions; the
// FP8 kernel has a fixed order).
TEST(LinearCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  for (bool fp8 : {false, true}) {
    for (int32_t tokens : {1, 5, 64, 131, 512}) {
      Problem pr = make_problem(rng, tokens, 7168, 1536, fp8);
      Device d(pr);
      for (bool f32_out : {false, true}) {
        Status s1, s2;
        auto a = run_gpu(pr, d, f32_out, &s1), b = run_gpu(pr, d, f32_out, &s2);
        ASSERT_TRUE(s1.ok() && s2.ok()) << s1.to_string() << s2.to_string();
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_EQ(float_bits(a[i]), float_bits(b[i]))
              << (fp8 ? "fp8" : "bf16") << " T=" << tokens << " at " << i;
      }
    }
  }
}

TEST(LinearCuda, ZeroTokensAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  auto w = dev(std::vector<bf16>{float_to_bf16(1.f)});
  auto y = testing::dev_alloc<float>(1);
  LinearParams p;
  p.weight = w.data();
  p.y_f32 = y.data();
  p.in_features = p.out_features = 1;
  EXPECT_TRUE(linear_cuda(p).ok());
  p.num_tokens = 1;
  Status s = linear_cuda(p);  // x is null
  EXPECT_NE(s.message().find("x is null"), std::string::npos) << s.to_string();
  p.y = reinterpret_cast<bf16*>(y.data());
  s = linear_cuda(p);
  EXPECT_NE(s.message().find("y and y_f32 are both set"), std::string::npos) << s.to_string();
}

// A split rule that is neither wave nor fill is InvalidArgument naming the value, on the fused
// form's shapes (1536 -> 24576 at T = 1) and the two-kernel form's (o_proj), not a silent default.
TEST(LinearCuda, Fp8BadSplitRuleIsInvalid) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed() + 11);
  for (const auto [in, out] : {std::pair{1536, 24576}, std::pair{16384, 7168}}) {
    const Problem pr = make_problem(rng, 1, in, out, true);
    const Device d(pr);
    auto y = testing::poisoned<bf16>(size_t(out));
    LinearParams p = d.params(pr);
    p.y = y.data();
    testing::ScopedEnv env("DSA_FP8_SPLITS", "half");
    const Status s = linear_cuda(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("DSA_FP8_SPLITS = half"), std::string::npos) << s.to_string();
  }
}

}  // namespace
}  // namespace dsa::kernels
