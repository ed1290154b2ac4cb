// GPU tests of grouped_linear_cuda with FP8 block-scaled weights (SPEC.md §8.6, §8.8) against
// grouped_linear_ref: within the class-T bound of the dense FP8 linear's GPU test
// (linear_tolerance_bounds: 2^-8 M + 2^-7 |ref| per output, M from the dequantised operands), at
// the V3.2 expert shapes (7168 -> 2048 and 2048 -> 7168, 256 groups with 0 / 1 / odd / 64 / 65 /
// more pairs) and small ones that take every tile width N (8..64) and short blocks; rows no pair
// writes still poison; deterministic; the checked error word (misaligned or null weights, null
// scales, non-finite x or scales) and the unchecked neutralisation; the scratch rule; and a CUDA
// graph capture replayed on new offsets, rows and x, bit-identical to eager.
#include "dsa/kernels/moe_dispatch/grouped_linear_fp8_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/linear/linear.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch.h"
#include "dsa/kernels/moe_dispatch/moe_dispatch_check.h"
#include "dsa/testing/compare.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/scoped_env.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::host;
using testing::is_poison;
using testing::Rng;

// The problem's device mirror: the distinct matrices once, the pointer tables aliasing them.
struct Fp8Device {
  DeviceBuffer<bf16> x, y;
  std::vector<DeviceBuffer<uint8_t>> w8;
  std::vector<DeviceBuffer<float>> sw;
  DeviceBuffer<const uint8_t*> weights_fp8;
  DeviceBuffer<const float*> weight_scales;
  DeviceBuffer<int32_t> offsets, x_row, y_row;
  DeviceBuffer<uint8_t> scratch;
  GroupedLinearParams params;

  explicit Fp8Device(Fp8GroupedProblem& pr) {
    x = dev(pr.x, 1);
    for (size_t m = 0; m < pr.w8.size(); ++m) {
      w8.push_back(dev(pr.w8[m]));
      sw.push_back(dev(pr.sw[m]));
    }
    std::vector<const uint8_t*> wt;
    std::vector<const float*> st;
    for (int32_t g = 0; g < pr.groups(); ++g) {
      wt.push_back(w8[size_t(pr.matrix_of(g))].data());
      st.push_back(sw[size_t(pr.matrix_of(g))].data());
    }
    weights_fp8 = dev(wt);
    weight_scales = dev(st);
    offsets = dev(pr.offsets);
    x_row = dev(pr.x_row, 1);
    y_row = dev(pr.y_row, 1);
    y = testing::poisoned<bf16>(std::max<size_t>(size_t(pr.y_rows) * pr.out, 1));
    params = pr.params(y.data());
    params.x = x.data();
    params.x_row = x_row.data();
    params.y_row = y_row.data();
    params.weights_fp8 = weights_fp8.data();
    params.weight_scales = weight_scales.data();
    params.offsets = offsets.data();
    params.scratch_bytes = grouped_linear_scratch_bytes(params);
    scratch = testing::dev_alloc<uint8_t>(std::max<size_t>(params.scratch_bytes, 256));
    params.scratch = scratch.data();
  }
  // Runs the op with y poisoned first; y comes back upcast to fp32.
  Status run(std::vector<bf16>* out) {
    EXPECT_TRUE(y.fill_bytes(testing::kPoisonByte).ok());
    const Status s = grouped_linear_cuda(params);
    EXPECT_EQ(cudaStreamSynchronize(cuda::current_stream()), cudaSuccess);
    *out = host(y);
    return s;
  }
  // The prefill form alone (no fallback to the tile path, which would pass the same checks), with
  // y poisoned first: fails the test unless the form ran.
  void run_prefill(std::vector<bf16>* out, const std::string& what) {
    ASSERT_TRUE(y.fill_bytes(testing::kPoisonByte).ok());
    if (params.y_b != nullptr) {
      ASSERT_EQ(cudaMemset(params.y_b, testing::kPoisonByte,
                           size_t(params.y_rows) * size_t(params.out_features) * sizeof(bf16)),
                cudaSuccess);
    }
    const StatusOr<bool> ran = grouped_fp8::launch_prefill(params);
    ASSERT_TRUE(ran.ok()) << what << ": " << ran.status().to_string();
    ASSERT_TRUE(*ran) << what << ": the prefill form did not run (no cuBLASLt algorithm?)";
    ASSERT_EQ(cudaStreamSynchronize(cuda::current_stream()), cudaSuccess);
    *out = host(y);
  }
};

// The reference and its class-T bounds per y row, from the host problem: each group's pairs
// through linear_ref and linear_tolerance_bounds (the dense FP8 linear's GPU-test bound).
struct Expected {
  std::vector<float> ref, bound;
  std::vector<bool> written;
};
Expected expected(const Fp8GroupedProblem& pr) {
  const size_t in = size_t(pr.in), out = size_t(pr.out);
  Expected e;
  e.ref.assign(size_t(pr.y_rows) * out, 0.f);
  e.bound.assign(e.ref.size(), 0.f);
  e.written.assign(size_t(pr.y_rows), false);
  for (int32_t g = 0; g < pr.groups(); ++g) {
    const int32_t lo = pr.offsets[g], n = pr.offsets[g + 1] - lo;
    if (n == 0) continue;
    std::vector<bf16> xs, ys(size_t(n) * out);
    for (int32_t i = lo; i < lo + n; ++i) {
      const bf16* row = &pr.x[size_t(pr.x_row[size_t(i)]) * in];
      xs.insert(xs.end(), row, row + in);
    }
    LinearParams lp;
    lp.x = xs.data();
    lp.weight_fp8 = pr.weights_fp8[size_t(g)];
    lp.weight_scale_inv = pr.weight_scales[size_t(g)];
    lp.y = ys.data();
    lp.num_tokens = n;
    lp.in_features = pr.in;
    lp.out_features = pr.out;
    EXPECT_TRUE(linear_ref(lp).ok());
    std::vector<float> ref(ys.size()), bound(ys.size());
    for (size_t k = 0; k < ys.size(); ++k) ref[k] = bf16_to_float(ys[k]);
    EXPECT_TRUE(linear_tolerance_bounds(lp, ref.data(), bound.data()).ok());
    for (int32_t r = 0; r < n; ++r) {
      const size_t yr = size_t(pr.y_row[size_t(lo + r)]);
      std::copy_n(&ref[size_t(r) * out], out, &e.ref[yr * out]);
      std::copy_n(&bound[size_t(r) * out], out, &e.bound[yr * out]);
      e.written[yr] = true;
    }
  }
  return e;
}

void expect_matches(const Fp8GroupedProblem& pr, const std::vector<bf16>& got,
                    const std::string& what) {
  const Expected e = expected(pr);
  const size_t out = size_t(pr.out);
  std::vector<float> g, r, b;
  for (int32_t y = 0; y < pr.y_rows; ++y) {
    for (size_t o = 0; o < out; ++o) {
      const size_t k = size_t(y) * out + o;
      if (!e.written[size_t(y)]) {
        ASSERT_TRUE(is_poison(got[k])) << what << ": y row " << y << " was written";
        continue;
      }
      g.push_back(bf16_to_float(got[k]));
      r.push_back(e.ref[k]);
      b.push_back(e.bound[k]);
    }
  }
  const auto res = testing::within_bound(g, r, b);
  EXPECT_TRUE(res.ok) << what << ": " << res.message;
}

void run_case(const std::vector<int32_t>& counts, int32_t in, int32_t out, int32_t x_rows,
              int32_t spare, int32_t distinct, uint64_t seed, const std::string& what) {
  Rng rng(seed);
  Fp8GroupedProblem pr = make_fp8_grouped_problem(rng, counts, in, out, x_rows, spare, distinct);
  Fp8Device d(pr);
  std::vector<bf16> got;
  const Status s = d.run(&got);
  ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
  expect_matches(pr, got, what);
}

// 256 groups: the listed counts first, then 0..2 pairs each (decode-like).
std::vector<int32_t> v32_counts(Rng& rng) {
  std::vector<int32_t> c = {0, 1, 3, 64, 65, 130, 7, 0};
  while (c.size() < 256) c.push_back(int32_t(rng.randint(0, 2)));
  return c;
}

TEST(GroupedLinearFp8Cuda, V32GateShape) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  run_case(v32_counts(rng), 7168, 2048, 64, 3, 4, testing::test_seed() + 1, "7168 -> 2048");
}

TEST(GroupedLinearFp8Cuda, V32DownShape) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed() + 2);
  run_case(v32_counts(rng), 2048, 7168, 600, 0, 4, testing::test_seed() + 3, "2048 -> 7168");
}

// Tile widths: N = the power of two >= 4 ceil(capacity / G) in [8, 64] (capacity = pairs + 2),
// so these take N = 8, 16, 32, 64; short last K block (in = 272) and a partial
// output tile (out = 200); every group empty; a single pair.
TEST(GroupedLinearFp8Cuda, EveryTileWidthAndShortBlocks) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  const uint64_t seed = testing::test_seed();
  struct Case {
    std::vector<int32_t> counts;
    int32_t in, out;
  } cases[] = {
      {{1, 0, 2, 1}, 272, 200},                  // N = 8
      {{17, 0, 1, 0, 0, 0, 0, 0}, 512, 200},     // N = 16, a group of two tiles
      {{33, 2, 0, 0, 0, 0, 0, 5}, 272, 384},     // N = 32, a group of two tiles
      {{0, 1, 3, 64, 65, 130, 7, 2}, 256, 136},  // N = 64
      {{0, 0, 0}, 128, 64},                      // nothing dispatched
      {{0, 1}, 16, 8},                           // one block of 16
      {std::vector<int32_t>(40, 1), 1024, 128},  // more groups than pairs per group
  };
  int n = 0;
  for (const Case& c : cases) {
    run_case(c.counts, c.in, c.out, 37, 2, 3, seed + n, "case " + std::to_string(n));
    ++n;
  }
}

// The paired form (the MoE's gate and up in one launch): y and y_b bit-identical to the two
// single-projection launches, each within class T of the reference, at V3.2's decode shape
// (8 experts, 1 pair each: batch 1, top-8), a mixed one (every tile width's slot search) and an
// N = 8 one with an odd tile count.
TEST(GroupedLinearFp8Cuda, PairedProjectionEqualsTwoLaunches) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  struct Case {
    std::vector<int32_t> counts;
    int32_t in, out, x_rows;
  } cases[] = {{std::vector<int32_t>(8, 1), 7168, 2048, 1},
               {{0, 1, 3, 64, 65, 0, 7, 2}, 272, 200, 37},
               {{1, 0, 2, 1}, 272, 300, 5}};
  uint64_t seed = testing::test_seed();
  for (const Case& c : cases) {
    Rng ra(seed++), rb(seed++);
    Fp8GroupedProblem pa = make_fp8_grouped_problem(ra, c.counts, c.in, c.out, c.x_rows, 2, 3);
    Fp8GroupedProblem pb = make_fp8_grouped_problem(rb, c.counts, c.in, c.out, c.x_rows, 2, 3);
    pb.x = pa.x;  // the same pairs, other weights
    pb.x_row = pa.x_row;
    pb.y_row = pa.y_row;
    Fp8Device da(pa), db(pb);
    std::vector<bf16> alone_a, alone_b;
    ASSERT_TRUE(da.run(&alone_a).ok());
    ASSERT_TRUE(db.run(&alone_b).ok());
    expect_matches(pa, alone_a, "first alone");
    expect_matches(pb, alone_b, "second alone");
    ASSERT_TRUE(db.y.fill_bytes(testing::kPoisonByte).ok());
    da.params.weights_fp8_b = db.weights_fp8.data();
    da.params.weight_scales_b = db.weight_scales.data();
    da.params.y_b = db.y.data();
    std::vector<bf16> paired_a;
    ASSERT_TRUE(da.run(&paired_a).ok());
    const std::vector<bf16> paired_b = host(db.y);
    const std::string what = "in " + std::to_string(c.in) + " out " + std::to_string(c.out);
    EXPECT_EQ(testing::first_bit_difference(paired_a, alone_a), "") << what << ": y";
    EXPECT_EQ(testing::first_bit_difference(paired_b, alone_b), "") << what << ": y_b";
    // Two row tiles per CTA (the N = 8 decode tile; the N = 64 case ignores the switch): each
    // projection still owns its half of the grid (32 tiles each at out 2048; 5 at out 300, so each
    // half's last CTA has one tile).
    testing::ScopedEnv two("DSA_GROUPED_FP8_ROW_TILES", "2");
    ASSERT_TRUE(da.y.fill_bytes(testing::kPoisonByte).ok());
    ASSERT_TRUE(db.y.fill_bytes(testing::kPoisonByte).ok());
    std::vector<bf16> two_a;
    ASSERT_TRUE(da.run(&two_a).ok());
    EXPECT_EQ(testing::first_bit_difference(two_a, alone_a), "") << what << ": y, 2 row tiles";
    EXPECT_EQ(testing::first_bit_difference(host(db.y), alone_b), "")
        << what << ": y_b, 2 row tiles";
  }
}

// The decode tile's two ring depths (DSA_GROUPED_FP8_DECODE_STAGES 4 and 6) give the
// same bits, within class T of the reference: V3.2's decode with the shared expert as a ninth
// group (9 groups of one pair, 576 CTAs) and a mixed N = 8 case with short K blocks.
TEST(GroupedLinearFp8Cuda, DecodeRingDepthsAgree) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  struct Case {
    std::vector<int32_t> counts;
    int32_t in, out, x_rows;
  } cases[] = {{std::vector<int32_t>(9, 1), 7168, 2048, 1}, {{1, 0, 2, 1}, 272, 200, 5}};
  uint64_t seed = testing::test_seed();
  for (const Case& c : cases) {
    Rng rng(seed++);
    Fp8GroupedProblem pr = make_fp8_grouped_problem(rng, c.counts, c.in, c.out, c.x_rows, 1, 2);
    Fp8Device d(pr);
    std::vector<bf16> six, four;
    setenv("DSA_GROUPED_FP8_DECODE_STAGES", "6", 1);
    ASSERT_TRUE(d.run(&six).ok());
    setenv("DSA_GROUPED_FP8_DECODE_STAGES", "4", 1);
    ASSERT_TRUE(d.y.fill_bytes(testing::kPoisonByte).ok());
    const Status st = d.run(&four);
    setenv("DSA_GROUPED_FP8_DECODE_STAGES", "5", 1);
    std::vector<bf16> unused;
    const Status bad = d.run(&unused);
    unsetenv("DSA_GROUPED_FP8_DECODE_STAGES");
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.to_string();
    EXPECT_NE(bad.message().find("DSA_GROUPED_FP8_DECODE_STAGES = 5"), std::string::npos)
        << bad.to_string();
    const std::string what = "in " + std::to_string(c.in) + " out " + std::to_string(c.out);
    expect_matches(pr, four, what + ", 4 stages");
    EXPECT_EQ(testing::first_bit_difference(four, six), "") << what;
  }
}

// One or two row tiles per CTA of the decode tile (DSA_GROUPED_FP8_ROW_TILES) give the same bits,
// at both ring depths, within class T of the reference: V3.2's down projection with the shared
// expert as a ninth group (9 x 112 tiles, which the launcher runs at two per CTA:
// DecodeRowTilesChosenByTheWave), an odd tile count (out 300: the last CTA has one tile) and a
// single tile (out 8). A bad value is InvalidArgument naming it.
TEST(GroupedLinearFp8Cuda, DecodeRowTilesAgree) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  struct Case {
    std::vector<int32_t> counts;
    int32_t in, out, x_rows;
  } cases[] = {{std::vector<int32_t>(9, 1), 2048, 7168, 9},
               {{1, 0, 2, 1}, 272, 300, 5},
               {{2, 1}, 384, 8, 3}};
  uint64_t seed = testing::test_seed();
  for (const Case& c : cases) {
    Rng rng(seed++);
    Fp8GroupedProblem pr = make_fp8_grouped_problem(rng, c.counts, c.in, c.out, c.x_rows, 1, 2);
    Fp8Device d(pr);
    std::vector<bf16> one, two[2];
    Status st[2], bad;
    {
      testing::ScopedEnv env("DSA_GROUPED_FP8_ROW_TILES", "1");
      ASSERT_TRUE(d.run(&one).ok());
    }
    for (int r = 0; r < 2; ++r) {  // both ring depths: production takes 4 where 5 CTAs fit an SM
      testing::ScopedEnv env("DSA_GROUPED_FP8_ROW_TILES", "2");
      testing::ScopedEnv stages("DSA_GROUPED_FP8_DECODE_STAGES", r == 0 ? "6" : "4");
      ASSERT_TRUE(d.y.fill_bytes(testing::kPoisonByte).ok());
      st[r] = d.run(&two[r]);
    }
    {
      testing::ScopedEnv env("DSA_GROUPED_FP8_ROW_TILES", "3");
      std::vector<bf16> unused;
      bad = d.run(&unused);
    }
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.to_string();
    EXPECT_NE(bad.message().find("DSA_GROUPED_FP8_ROW_TILES = 3"), std::string::npos)
        << bad.to_string();
    const std::string what = "in " + std::to_string(c.in) + " out " + std::to_string(c.out);
    for (int r = 0; r < 2; ++r) {
      const std::string form = what + (r == 0 ? ", 6 stages" : ", 4 stages");
      ASSERT_TRUE(st[r].ok()) << form << ": " << st[r].to_string();
      expect_matches(pr, two[r], form + ", 2 row tiles");
      EXPECT_EQ(testing::first_bit_difference(two[r], one), "") << form;
    }
  }
}

// The launcher's choice of row tiles (V3.2's decode, 132-SM Hopper parts: five 4-stage CTAs per
// SM make a wave of 660): the down projection with the shared expert as a ninth group, 9 x 112
// CTAs, takes two tiles (9 x 56 fits), also at 4 rows (12 slots, 9 of them busy); the paired
// gate/up, 9 x 64, fits at one; a grid of
// several waves either way (64 slots x 112 tiles) keeps one; the switch overrides.
TEST(GroupedLinearFp8Cuda, DecodeRowTilesChosenByTheWave) {
  DSA_SKIP_WITHOUT_GPU();
  const int sms = testing::or_die(cuda::sm_count());
  if (5 * sms < 9 * 64 || 5 * sms >= 9 * 112) GTEST_SKIP() << sms << " SMs: not the case measured";
  GroupedLinearParams down;
  down.num_groups = down.capacity = 9;
  down.out_features = 7168;
  EXPECT_EQ(testing::or_die(grouped_fp8::decode_row_tiles(down)), 2);
  GroupedLinearParams verify = down;  // 4 rows x 9: 12 slots, of which 9 can have pairs
  verify.capacity = 36;
  EXPECT_EQ(testing::or_die(grouped_fp8::decode_row_tiles(verify)), 2);
  GroupedLinearParams gate_up = down;
  gate_up.out_features = 2048;
  static bf16 y_b;  // only its presence counts (the paired form)
  gate_up.y_b = &y_b;
  EXPECT_EQ(testing::or_die(grouped_fp8::decode_row_tiles(gate_up)), 1);
  GroupedLinearParams waves = down;
  waves.num_groups = 256;
  waves.capacity = 64;
  EXPECT_EQ(testing::or_die(grouped_fp8::decode_row_tiles(waves)), 1);
  testing::ScopedEnv one("DSA_GROUPED_FP8_ROW_TILES", "1");
  EXPECT_EQ(testing::or_die(grouped_fp8::decode_row_tiles(down)), 1);
}

// The tile width: a MoE of few rows per group takes the decode tile (N = 8) whatever its mean
// (the decode-equivalent V3.2's 4-row verify: 9 groups of 4 pairs, 16 by the mean alone); without
// the bound, or with a wide one, the mean rule decides. Host arithmetic: runs without a GPU.
TEST(GroupedLinearFp8Cuda, TilePairsFromMaxGroupPairs) {
  GroupedLinearParams verify;
  verify.num_groups = 9;
  verify.capacity = 36;
  EXPECT_EQ(grouped_fp8::tile_pairs(verify), 16);
  verify.max_group_pairs = 4;
  EXPECT_EQ(grouped_fp8::tile_pairs(verify), 8);
  GroupedLinearParams prefill = verify;  // 128 rows: 9 x 128 pairs
  prefill.capacity = 9 * 128;
  prefill.max_group_pairs = 128;
  EXPECT_EQ(grouped_fp8::tile_pairs(prefill), 64);
  prefill.max_group_pairs = 20;
  EXPECT_EQ(grouped_fp8::tile_pairs(prefill), 32);
}

// The hint changes the tile width only: exact (9 groups of 4 pairs, N = 8) and understated (groups
// of up to 37 pairs with max_group_pairs = 1: N = 8 where the mean rule takes 64, so groups span
// several tiles), both within class T of the reference.
TEST(GroupedLinearFp8Cuda, TilePairsBoundedByMaxGroupPairs) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  Fp8GroupedProblem pr =
      make_fp8_grouped_problem(rng, std::vector<int32_t>(9, 4), 2048, 7168, 36, 0, 2);
  Fp8Device d(pr);
  d.params.max_group_pairs = 4;
  std::vector<bf16> got;
  const Status s = d.run(&got);
  ASSERT_TRUE(s.ok()) << s.to_string();
  expect_matches(pr, got, "9 groups of 4 pairs, N = 8");

  Fp8GroupedProblem wide = make_fp8_grouped_problem(rng, {37, 0, 20, 9, 1, 33}, 272, 200, 40, 3, 2);
  Fp8Device dw(wide);
  ASSERT_EQ(grouped_fp8::tile_pairs(dw.params), 64);
  dw.params.max_group_pairs = 1;  // wrong: the groups hold up to 37
  ASSERT_EQ(grouped_fp8::tile_pairs(dw.params), 8);
  const Status sw = dw.run(&got);
  ASSERT_TRUE(sw.ok()) << sw.to_string();
  expect_matches(wide, got, "groups of up to 37 pairs, max_group_pairs 1, N = 8");
}

TEST(GroupedLinearFp8Cuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  Fp8GroupedProblem pr = make_fp8_grouped_problem(rng, {3, 70, 0, 9}, 1024, 512, 20, 0, 4);
  Fp8Device d(pr);
  std::vector<bf16> a, b;
  ASSERT_TRUE(d.run(&a).ok());
  ASSERT_TRUE(d.run(&b).ok());
  EXPECT_EQ(testing::first_bit_difference(a, b), "");
}

// The unchecked neutralisation both forms must show: four groups of n pairs with the offsets
// outside [0, capacity] at the ends (eff = {0, n, 2n, 3n, 4n}), pair 1's x row past x_rows, pair
// 2's y row -1, group 2's weights misaligned and group 3's scales null. Only the pairs of groups 0
// and 1 but pairs 1 and 2 are written, each within the reference's bound.
struct Neutralised {
  Fp8GroupedProblem pr;
  int32_t n = 0, lost = 0;
  std::unique_ptr<Fp8Device> d;
  Neutralised(uint64_t seed, int32_t pairs, int32_t in, int32_t x_rows) : n(pairs) {
    Rng rng(seed);
    pr = make_fp8_grouped_problem(rng, {n, n, n, n}, in, 128, x_rows, 0, 4);
    pr.offsets = {-5, n, 2 * n, 3 * n, 99};
    pr.x_row[1] = x_rows;
    lost = pr.y_row[2];
    pr.y_row[2] = -1;
    d = std::make_unique<Fp8Device>(pr);
    std::vector<const uint8_t*> wt = host(d->weights_fp8);
    std::vector<const float*> st = host(d->weight_scales);
    wt[2] = wt[2] + 1;  // misaligned
    st[3] = nullptr;
    d->weights_fp8 = dev(wt);
    d->weight_scales = dev(st);
    d->params.weights_fp8 = d->weights_fp8.data();
    d->params.weight_scales = d->weight_scales.data();
  }
  void check(const std::vector<bf16>& got) const {
    // The reference's view: the same clamping, pairs 1 and 2 and groups 2, 3 skipped.
    Fp8GroupedProblem want = pr;
    want.offsets = {0, n, 2 * n, 2 * n, 2 * n};
    want.x_row[1] = 0;  // pairs 1 and 2 are compared as skipped below, whatever they compute
    want.y_row[2] = lost;
    const Expected e = expected(want);
    const size_t out = size_t(pr.out);
    for (size_t o = 0; o < out; ++o) {
      ASSERT_TRUE(is_poison(got[size_t(lost) * out + o])) << "pair 2's row written";
    }
    for (int32_t i = 0; i < 4 * n; ++i) {
      const int32_t yr = pr.y_row[size_t(i)];
      if (yr < 0) continue;
      const bool live = i < 2 * n && i != 1 && i != 2;
      for (size_t o = 0; o < out; ++o) {
        const bf16 v = got[size_t(yr) * out + o];
        if (!live) {
          ASSERT_TRUE(is_poison(v)) << "pair " << i << " written";
          continue;
        }
        const size_t k = size_t(yr) * out + o;
        ASSERT_LE(std::fabs(bf16_to_float(v) - e.ref[k]), e.bound[k]) << "pair " << i << " o " << o;
      }
    }
  }
};

// Unchecked: offsets clamped, bad rows and misaligned / null weights or scales skip their pairs.
TEST(GroupedLinearFp8Cuda, UncheckedNeutralises) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  const Neutralised c(testing::test_seed(), 2, 256, 6);
  std::vector<bf16> got;
  ASSERT_TRUE(c.d->run(&got).ok());
  c.check(got);
}

// Checked mode: the device error word, naming index and value.
struct Fp8CheckedCuda : ::testing::Test {
  Rng rng{testing::test_seed()};
  Fp8GroupedProblem pr = make_fp8_grouped_problem(rng, {2, 1, 3}, 256, 128, 5, 1, 3);
  ScopedCheckedMode checked{true};
  void expect_out_of_range(Fp8Device& d, const std::string& text) {
    std::vector<bf16> got;
    const Status s = d.run(&got);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find(text), std::string::npos) << s.to_string();
  }
};

TEST_F(Fp8CheckedCuda, ValidInputsPass) {
  DSA_SKIP_WITHOUT_GPU();
  Fp8Device d(pr);
  std::vector<bf16> got;
  const Status s = d.run(&got);
  ASSERT_TRUE(s.ok()) << s.to_string();
  expect_matches(pr, got, "checked");
}
TEST_F(Fp8CheckedCuda, XRowOutOfRange) {
  DSA_SKIP_WITHOUT_GPU();
  pr.x_row[4] = 5;
  Fp8Device d(pr);
  expect_out_of_range(d, "x_row[index] = value");
}
TEST_F(Fp8CheckedCuda, MisalignedWeight) {
  DSA_SKIP_WITHOUT_GPU();
  Fp8Device d(pr);
  std::vector<const uint8_t*> wt = host(d.weights_fp8);
  wt[1] = wt[1] + 4;
  d.weights_fp8 = dev(wt);
  d.params.weights_fp8 = d.weights_fp8.data();
  expect_out_of_range(d, "index 1 (value 4)");
}
TEST_F(Fp8CheckedCuda, NullScales) {
  DSA_SKIP_WITHOUT_GPU();
  Fp8Device d(pr);
  std::vector<const float*> st = host(d.weight_scales);
  st[2] = nullptr;
  d.weight_scales = dev(st);
  d.params.weight_scales = d.weight_scales.data();
  expect_out_of_range(d, "index 2 (value -2)");
}
TEST_F(Fp8CheckedCuda, NonFiniteX) {
  DSA_SKIP_WITHOUT_GPU();
  const int32_t xr = pr.x_row[0];
  pr.x[size_t(xr) * pr.in + 33] = float_to_bf16(NAN);
  Fp8Device d(pr);
  expect_out_of_range(d, "index " + std::to_string(xr) + " (value 33)");
}
TEST_F(Fp8CheckedCuda, NonFiniteScale) {
  DSA_SKIP_WITHOUT_GPU();
  pr.sw[1][1] = INFINITY;  // matrix 1: group 1
  Fp8Device d(pr);
  expect_out_of_range(d, "index 1 (value 1)");
}

TEST(GroupedLinearFp8Cuda, ScratchTooSmallIsInvalid) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Fp8GroupedProblem pr = make_fp8_grouped_problem(rng, {1, 1}, 256, 64, 3, 0, 2);
  Fp8Device d(pr);
  d.params.scratch_bytes -= 1;
  Status s = grouped_linear_cuda(d.params);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("grouped_linear_scratch_bytes"), std::string::npos) << s.to_string();
  d.params.scratch = nullptr;
  s = grouped_linear_cuda(d.params);
  EXPECT_NE(s.message().find("scratch is null"), std::string::npos) << s.to_string();
}

// A graph captured once replays new offsets, rows and x (same capacity) exactly as eager
// computes them, and within the bound of the reference.
TEST(GroupedLinearFp8Cuda, GraphReplayMatchesEager) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);  // checked mode synchronises: not capturable
  Rng rng(testing::test_seed());
  const int32_t groups = 32, capacity = 96, x_rows = 12;
  auto counts_for = [&](Rng& r) {  // `capacity` pairs split unevenly, empty groups included
    std::vector<int32_t> c(size_t(groups), 0);
    for (int32_t i = 0; i < capacity - 4; ++i) ++c[size_t(r.randint(0, groups / 2))];
    return c;
  };
  Fp8GroupedProblem pr = make_fp8_grouped_problem(rng, counts_for(rng), 2048, 384, x_rows, 4, 4);
  Fp8Device d(pr);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::set_current_stream(stream);
  ASSERT_TRUE(grouped_linear_cuda(d.params).ok());  // warm-up: modules load lazily
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status captured = grouped_linear_cuda(d.params);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.to_string();
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  for (int replay = 0; replay < 3; ++replay) {
    Rng next(testing::test_seed() + 100 + replay);
    Fp8GroupedProblem np =
        make_fp8_grouped_problem(next, counts_for(next), 2048, 384, x_rows, 4, 4);
    np.w8 = pr.w8;  // the weights stay (the graph holds their tables)
    np.sw = pr.sw;
    for (int32_t g = 0; g < groups; ++g) {
      np.weights_fp8[size_t(g)] = np.w8[size_t(np.matrix_of(g))].data();
      np.weight_scales[size_t(g)] = np.sw[size_t(np.matrix_of(g))].data();
    }
    ASSERT_TRUE(d.x.upload(np.x).ok());
    ASSERT_TRUE(d.offsets.upload(np.offsets).ok());
    ASSERT_TRUE(d.x_row.upload(np.x_row).ok());
    ASSERT_TRUE(d.y_row.upload(np.y_row).ok());
    ASSERT_TRUE(d.y.fill_bytes(testing::kPoisonByte).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::vector<bf16> replayed = host(d.y);
    std::vector<bf16> eager;
    ASSERT_TRUE(d.run(&eager).ok());
    ASSERT_EQ(testing::first_bit_difference(replayed, eager), "") << "replay " << replay;
    expect_matches(np, replayed, "replay " + std::to_string(replay));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cuda::set_current_stream(nullptr);
  cudaStreamDestroy(stream);
}

// ---- The prefill form (grouped_linear_fp8_lt.cu): gathered rows, one grouped GEMM ----

// The prefill form's two GEMMs (DSA_GROUPED_FP8_PREFILL_GEMM): the grouped wgmma kernel (the
// default) and one cuBLASLt GEMM a group.
constexpr const char* kPrefillGemms[] = {"wgmma", "lt"};

// DSA_GROUPED_FP8_PREFILL=lt forces it wherever the shape allows: V3.2's gate and down shapes
// with 0 / 1 / odd / 64 / 65 / 130 pairs a group, a group of more pairs than one scratch chunk
// (4096 rows: split over chunks) beside small ones, and a shape it refuses (in 272: the tile path).
// Each within class T of the reference, rows no pair writes still poison.
TEST(GroupedLinearFp8Cuda, PrefillFormMatchesTheReference) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  testing::ScopedEnv lt("DSA_GROUPED_FP8_PREFILL", "lt");
  Rng rng(testing::test_seed() + 40);
  struct Case {
    std::vector<int32_t> counts;
    int32_t in, out, x_rows;
    bool prefill;
  } cases[] = {{v32_counts(rng), 7168, 2048, 64, true},
               {v32_counts(rng), 2048, 7168, 600, true},
               {{4100, 0, 3, 17, 1}, 512, 64, 300, true},
               {{1, 0, 2, 1}, 272, 200, 37, false}};
  uint64_t seed = testing::test_seed() + 41;
  for (const char* gemm : kPrefillGemms) {
    testing::ScopedEnv engine("DSA_GROUPED_FP8_PREFILL_GEMM", gemm);
    for (const Case& c : cases) {
      Rng r(seed++);
      Fp8GroupedProblem pr = make_fp8_grouped_problem(r, c.counts, c.in, c.out, c.x_rows, 3, 4);
      Fp8Device d(pr);
      const std::string what =
          std::string(gemm) + " GEMM, in " + std::to_string(c.in) + " out " + std::to_string(c.out);
      EXPECT_EQ(testing::or_die(grouped_fp8::takes_prefill_form(d.params)), c.prefill) << what;
      std::vector<bf16> got;
      if (c.prefill) {
        d.run_prefill(&got, what);
        expect_matches(pr, got, what + ", prefill form");
      }
      const Status s = d.run(&got);  // through the op's dispatch
      ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
      expect_matches(pr, got, what);
    }
  }
}

// The chunk buffers' reuse: on a stream of its own (blocking, as the forwards' stream), a small
// call grows the scratch, then a call of four chunks (three groups larger than a chunk) runs
// twice: within class T, and bit-identical the second time (a buffer reused too early, before
// its scatter or GEMMs, would show).
TEST(GroupedLinearFp8Cuda, PrefillFormReusesItsChunkBuffers) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::set_current_stream(stream);
  {
    Rng small_rng(testing::test_seed() + 45);
    Fp8GroupedProblem small = make_fp8_grouped_problem(small_rng, {40, 0, 33}, 512, 64, 50, 1, 2);
    Fp8Device ds(small);
    std::vector<bf16> got;
    ds.run_prefill(&got, "small");
    expect_matches(small, got, "small");
    Rng rng(testing::test_seed() + 46);
    Fp8GroupedProblem pr =
        make_fp8_grouped_problem(rng, {4100, 4100, 0, 4100, 5}, 512, 64, 300, 2, 3);
    Fp8Device d(pr);
    std::vector<bf16> first, second;
    d.run_prefill(&first, "four chunks");
    expect_matches(pr, first, "four chunks");
    d.run_prefill(&second, "four chunks, again");
    EXPECT_EQ(testing::first_bit_difference(first, second), "");
  }
  cuda::set_current_stream(nullptr);
  cudaStreamDestroy(stream);
}

// The auto rule: at least 32 pairs a group on average (a prefill chunk); never while capturing;
// the switch's bad value is refused.
TEST(GroupedLinearFp8Cuda, PrefillFormChosenByPairsPerGroup) {
  DSA_SKIP_WITHOUT_GPU();
  GroupedLinearParams p;
  p.num_groups = 256;
  p.in_features = 7168;
  p.out_features = 2048;
  p.x_rows = 4096;
  auto y = testing::dev_alloc<bf16>(8);
  p.y = y.data();
  p.capacity = 4096 * 8;  // V3.2's prefill chunk: 128 pairs a group
  EXPECT_TRUE(testing::or_die(grouped_fp8::takes_prefill_form(p)));
  p.capacity = 256 * 31;
  EXPECT_FALSE(testing::or_die(grouped_fp8::takes_prefill_form(p)));
  {
    testing::ScopedEnv lt("DSA_GROUPED_FP8_PREFILL", "lt");
    EXPECT_TRUE(testing::or_die(grouped_fp8::takes_prefill_form(p)));
  }
  {
    testing::ScopedEnv kernel("DSA_GROUPED_FP8_PREFILL", "kernel");
    p.capacity = 4096 * 8;
    EXPECT_FALSE(testing::or_die(grouped_fp8::takes_prefill_form(p)));
  }
  {
    testing::ScopedEnv bad("DSA_GROUPED_FP8_PREFILL", "fast");
    const StatusOr<bool> r = grouped_fp8::takes_prefill_form(p);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("DSA_GROUPED_FP8_PREFILL"), std::string::npos)
        << r.status().to_string();
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::set_current_stream(stream);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const StatusOr<bool> capturing = grouped_fp8::takes_prefill_form(p);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  cuda::set_current_stream(nullptr);
  cudaStreamDestroy(stream);
  EXPECT_FALSE(testing::or_die(capturing));
}

// The paired form (gate and up over x quantised once) on the prefill form: y and y_b
// bit-identical to two single launches of the form (cuBLASLt's plans are deterministic).
class PrefillGemm : public ::testing::TestWithParam<const char*> {};

TEST_P(PrefillGemm, PairedEqualsTwoLaunches) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  testing::ScopedEnv lt("DSA_GROUPED_FP8_PREFILL", "lt");
  testing::ScopedEnv engine("DSA_GROUPED_FP8_PREFILL_GEMM", GetParam());
  const std::vector<int32_t> counts = {0, 40, 3, 64, 65, 0, 7, 130};
  uint64_t seed = testing::test_seed() + 50;
  Rng ra(seed++), rb(seed++);
  Fp8GroupedProblem pa = make_fp8_grouped_problem(ra, counts, 1024, 384, 90, 2, 3);
  Fp8GroupedProblem pb = make_fp8_grouped_problem(rb, counts, 1024, 384, 90, 2, 3);
  pb.x = pa.x;
  pb.x_row = pa.x_row;
  pb.y_row = pa.y_row;
  Fp8Device da(pa), db(pb);
  std::vector<bf16> alone_a, alone_b;
  da.run_prefill(&alone_a, "first alone");
  db.run_prefill(&alone_b, "second alone");
  expect_matches(pa, alone_a, "first alone");
  expect_matches(pb, alone_b, "second alone");
  da.params.weights_fp8_b = db.weights_fp8.data();
  da.params.weight_scales_b = db.weight_scales.data();
  da.params.y_b = db.y.data();
  std::vector<bf16> paired_a;
  da.run_prefill(&paired_a, "paired");
  EXPECT_EQ(testing::first_bit_difference(paired_a, alone_a), "") << "y";
  EXPECT_EQ(testing::first_bit_difference(host(db.y), alone_b), "") << "y_b";
  // Only one projection usable in a group (the other's scales null): that group's rows of that
  // projection are never written, the rest as before.
  std::vector<const float*> scales_b = host(db.weight_scales);
  scales_b[3] = nullptr;  // group 3: 64 pairs
  DeviceBuffer<const float*> masked = dev(scales_b);
  da.params.weight_scales_b = masked.data();
  da.run_prefill(&paired_a, "paired, group 3's second projection skipped");
  EXPECT_EQ(testing::first_bit_difference(paired_a, alone_a), "") << "y, one side skipped";
  const std::vector<bf16> got_b = host(db.y);
  const size_t out = size_t(pb.out);
  for (int32_t i = 0; i < int32_t(pb.y_row.size()); ++i) {
    const bool in_group_3 = i >= pb.offsets[3] && i < pb.offsets[4];
    const size_t yr = size_t(pb.y_row[size_t(i)]);
    for (size_t o = 0; o < out; ++o) {
      const bf16 v = got_b[yr * out + o];
      if (in_group_3) {
        ASSERT_TRUE(is_poison(v)) << "pair " << i << " of the skipped group written";
      } else if (i < pb.offsets.back()) {
        ASSERT_EQ(v.bits, alone_b[yr * out + o].bits) << "pair " << i << " o " << o;
      }
    }
  }
}

// Unchecked on the prefill form, as on the tile path: offsets clamped, a pair with a bad x or
// y row skipped, a group with misaligned weights or null scales skipped (its rows never written).
TEST_P(PrefillGemm, Neutralises) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  testing::ScopedEnv lt("DSA_GROUPED_FP8_PREFILL", "lt");
  testing::ScopedEnv engine("DSA_GROUPED_FP8_PREFILL_GEMM", GetParam());
  const Neutralised c(testing::test_seed() + 60, 20, 512, 30);
  ASSERT_TRUE(testing::or_die(grouped_fp8::takes_prefill_form(c.d->params)));
  std::vector<bf16> got;
  c.d->run_prefill(&got, "neutralised");
  c.check(got);
}

INSTANTIATE_TEST_SUITE_P(GroupedLinearFp8Cuda, PrefillGemm, ::testing::ValuesIn(kPrefillGemms),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

}  // namespace
}  // namespace dsa::kernels
