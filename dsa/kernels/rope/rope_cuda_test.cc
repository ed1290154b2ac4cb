// GPU tests of rope_cuda against rope_ref (SPEC.md §8.3): both pairings, strided heads at V3.2
// shapes (MLA q_pe in q [T, 128, 192], k_pe in kv_a [T, 576], the indexer's q [T, 64, 128]),
// tables built on the host and uploaded, within 1 bf16 ulp (the kernel is in fact designed to be
// bit-identical), values outside the rope dims untouched, the checked error word and the unchecked
// neutralisation, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/rope/rope.h"
#include "dsa/kernels/rope/rope_check.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/host_buffers.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::host;
using testing::Rng;

struct Tables {
  int32_t num_positions;
  std::vector<float> cos, sin;
  DeviceBuffer<float> dcos, dsin;
};

Tables make_tables(int32_t num_positions) {
  Tables t{num_positions,
           std::vector<float>(size_t(num_positions) * kRopePairs),
           std::vector<float>(size_t(num_positions) * kRopePairs),
           {},
           {}};
  Status s = rope_table_ref({RopeConfig{}, num_positions, t.cos.data(), t.sin.data()});
  EXPECT_TRUE(s.ok()) << s.to_string();
  t.dcos = dev(t.cos);
  t.dsin = dev(t.sin);
  return t;
}

// The layout of one case: x starts `offset` elements into a [T, token_stride] buffer.
struct Layout {
  const char* name;
  int32_t tokens, heads;
  int64_t token_stride, head_stride, offset;
};

RopeParams params(const Layout& l, bf16* x, const int32_t* pos, const float* c, const float* s,
                  int32_t num_positions, RopeStyle style) {
  RopeParams p;
  p.x = x + l.offset;
  p.positions = pos;
  p.cos = c;
  p.sin = s;
  p.num_tokens = l.tokens;
  p.num_heads = l.heads;
  p.token_stride = l.token_stride;
  p.head_stride = l.head_stride;
  p.num_positions = num_positions;
  p.style = style;
  return p;
}

// Runs GPU and CPU on the same random buffer; every element within 1 bf16 ulp of the reference
// (elements outside the rope dims are unchanged in the reference, so they must be bit-exact).
void compare_layout(const Layout& l, Tables& tab, RopeStyle style, uint64_t seed) {
  Rng rng(seed);
  auto x = rng.bf16_vector(size_t(l.tokens) * l.token_stride, 2.f);
  std::vector<int32_t> pos(static_cast<size_t>(l.tokens));
  for (auto& v : pos) v = int32_t(rng.randint(0, tab.num_positions - 1));
  if (l.tokens > 1) pos[0] = 0, pos[1] = tab.num_positions - 1;  // both ends of the table
  auto dx = dev(x);
  auto dpos = dev(pos);
  Status s = rope_cuda(params(l, dx.data(), dpos.data(), tab.dcos.data(), tab.dsin.data(),
                              tab.num_positions, style));
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto got = host(dx);
  std::vector<bf16> want = x;
  s = rope_ref(
      params(l, want.data(), pos.data(), tab.cos.data(), tab.sin.data(), tab.num_positions, style));
  ASSERT_TRUE(s.ok()) << s.to_string();
  int bad = 0;
  int64_t not_identical = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool unchanged_in_ref = want[i].bits == x[i].bits;
    not_identical += got[i].bits != want[i].bits;
    if ((unchanged_in_ref && got[i].bits != want[i].bits) ||
        bf16_ulp_distance(got[i], want[i]) > 1) {
      if (bad++ < 5)
        ADD_FAILURE() << l.name << (style == RopeStyle::kInterleaved ? " interleaved" : " non-int.")
                      << " element " << i << ": " << bf16_to_float(got[i]) << ", reference "
                      << bf16_to_float(want[i]);
    }
  }
  EXPECT_EQ(bad, 0) << l.name;
  if (not_identical != 0)
    std::printf("note: %s: %lld values 1 ulp from the reference (expected 0)\n", l.name,
                static_cast<long long>(not_identical));
}

TEST(RopeCuda, RandomMatchesReferenceAtTinyAndV32Shapes) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  Tables tab = make_tables(163840 + 5 * 4);  // full V3.2 context plus lookahead
  const Layout layouts[] = {{"small strided", 33, 3, 3 * 88, 88, 16},
                            {"tiny q_pe [T,16,128]", 9, 16, 16 * 128, 128, 64},
                            {"one head", 1, 1, 64, 64, 0},
                            {"V3.2 q_pe [T,128,192]", 24, 128, 128 * 192, 192, 128},
                            {"V3.2 k_pe [T,576]", 300, 1, 576, 0, 512},
                            {"V3.2 indexer q [T,64,128]", 24, 64, 64 * 128, 128, 0},
                            {"V3.2 indexer k [T,128]", 300, 1, 128, 0, 0},
                            {"odd strides", 7, 5, 5 * 67 + 3, 67, 1}};
  int n = 0;
  for (const Layout& l : layouts)
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved})
      compare_layout(l, tab, style, seed + n++);
}

// Out of place at the fused-projection layout: q_pe read from [T, 32768] rows (heads of 192, the
// rope dims at 128) and written into the absorbed query [T, 128, 576] at 512; bit-identical to the
// reference, x untouched, y's other elements untouched, a token outside the table copied unrotated.
TEST(RopeCuda, OutOfPlaceMatchesReference) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  Tables tab = make_tables(4096);
  const int32_t T = 6, H = 128;
  const int64_t ld = 32768, y_ld = int64_t{H} * 576;
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved}) {
    const std::vector<bf16> x = rng.bf16_vector(size_t(T) * ld, 2.f);
    std::vector<int32_t> pos = {0, 4095, 17, 5000, 2, 999};  // 5000: outside the table
    const std::vector<bf16> y0(size_t(T) * y_ld, float_to_bf16(-7.f));
    auto dx = dev(x);
    auto dy = dev(y0);
    auto dpos = dev(pos);
    RopeParams p;
    p.positions = dpos.data();
    p.cos = tab.dcos.data();
    p.sin = tab.dsin.data();
    p.num_tokens = T;
    p.num_heads = H;
    p.head_stride = 192;
    p.token_stride = ld;
    p.num_positions = tab.num_positions;
    p.style = style;
    p.y_head_stride = 576;
    p.y_token_stride = y_ld;
    p.x = dx.data() + 128;
    p.y = dy.data() + 512;
    ASSERT_TRUE(rope_cuda(p).ok());
    std::vector<bf16> want = y0, xr = x;
    p.x = xr.data() + 128;
    p.y = want.data() + 512;
    p.positions = pos.data();
    p.cos = tab.cos.data();
    p.sin = tab.sin.data();
    ASSERT_TRUE(rope_ref(p).ok());
    EXPECT_EQ(testing::first_bit_difference(host(dy), want), "");
    EXPECT_EQ(testing::first_bit_difference(host(dx), x), "") << "x must not be written";
  }
}

Status rope_cuda_on_host_buffers(const RopeParams& hp) {
  DSA_RETURN_IF_ERROR(validate(hp));
  const size_t xn = size_t(hp.num_tokens - 1) * hp.token_stride +
                    size_t(hp.num_heads - 1) * hp.head_stride + 2 * kRopePairs;
  const size_t tn = size_t(hp.num_positions) * kRopePairs;
  using P = RopeParams;
  return testing::run_on_host_buffers(hp, rope_cuda, testing::InOut<&P::x>{xn},
                                      testing::In<&P::positions>{size_t(hp.num_tokens)},
                                      testing::In<&P::cos>{tn}, testing::In<&P::sin>{tn});
}

TEST(RopeCuda, MatchesIndependentFormulation) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, heads] : {std::pair{33, 3}, {4, 16}, {1, 1}, {8, 128}}) {
    Status s = check_rope(rope_cuda_on_host_buffers, tokens, heads, seed + heads);
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " H=" << heads << ": " << s.to_string();
  }
}

// A table whose row 1 is the 3-4-5 rotation (cos 0.6, sin 0.8): (1, 2) -> (-1, 2).
struct HandCase {
  std::vector<float> cos = std::vector<float>(2 * kRopePairs, 1.f);
  std::vector<float> sin = std::vector<float>(2 * kRopePairs, 0.f);
  HandCase() {
    for (int32_t i = 0; i < kRopePairs; ++i) cos[kRopePairs + i] = 0.6f, sin[kRopePairs + i] = 0.8f;
  }
  // Rotates x ([T, 64] rows) at `pos` on the GPU; returns the rows and the Status.
  std::pair<std::vector<bf16>, Status> run(std::vector<bf16> x, std::vector<int32_t> pos,
                                           RopeStyle style) {
    auto dx = dev(x);
    auto dpos = dev(pos);
    auto dc = dev(cos), ds = dev(sin);
    const Layout l{"hand", static_cast<int32_t>(pos.size()), 1, 64, 64, 0};
    Status s = rope_cuda(params(l, dx.data(), dpos.data(), dc.data(), ds.data(), 2, style));
    return {host(dx), s};
  }
};

TEST(RopeCuda, HandComputedBothStyles) {
  DSA_SKIP_WITHOUT_GPU();
  HandCase c;
  std::vector<bf16> x(64, float_to_bf16(0.f));
  x[0] = float_to_bf16(1.f), x[1] = float_to_bf16(2.f), x[32] = float_to_bf16(4.f);
  auto [y, s] = c.run(x, {1}, RopeStyle::kInterleaved);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(bf16_to_float(y[0]), -1.f);
  EXPECT_EQ(bf16_to_float(y[1]), 2.f);
  EXPECT_EQ(bf16_to_float(y[32]), round_to_bf16(2.4f));
  EXPECT_EQ(bf16_to_float(y[33]), round_to_bf16(3.2f));
  x.assign(64, float_to_bf16(0.f));
  x[0] = float_to_bf16(1.f), x[32] = float_to_bf16(2.f), x[1] = float_to_bf16(4.f);
  std::tie(y, s) = c.run(x, {1}, RopeStyle::kNonInterleaved);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(bf16_to_float(y[0]), -1.f);
  EXPECT_EQ(bf16_to_float(y[32]), 2.f);
  EXPECT_EQ(bf16_to_float(y[1]), round_to_bf16(2.4f));
  EXPECT_EQ(bf16_to_float(y[33]), round_to_bf16(3.2f));
}

TEST(RopeCuda, PositionZeroIsIdentity) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Tables tab = make_tables(4);
  auto x = rng.bf16_vector(128, 3.f);
  std::vector<int32_t> pos = {0, 0};
  auto dx = dev(x);
  auto dpos = dev(pos);
  const Layout l{"identity", 2, 1, 64, 64, 0};
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved})
    ASSERT_TRUE(
        rope_cuda(params(l, dx.data(), dpos.data(), tab.dcos.data(), tab.dsin.data(), 4, style))
            .ok());
  auto y = host(dx);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i].bits, x[i].bits) << i;
}

// Checked: a position outside [0, T_rope) is OutOfRange through the device error word, naming
// the token and the position; the table is never read out of bounds.
TEST(RopeCuda, CheckedPositionOutOfTableIsOutOfRange) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  for (int32_t bad : {2, -1, INT32_MIN}) {
    HandCase c;
    auto [y, s] =
        c.run(std::vector<bf16>(128, float_to_bf16(1.f)), {1, bad}, RopeStyle::kInterleaved);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find("index 1 (value " + std::to_string(bad) + ")"), std::string::npos)
        << s.to_string();
    // The word was cleared: a following good call succeeds.
    auto [y2, s2] = c.run(std::vector<bf16>(64, float_to_bf16(1.f)), {1}, RopeStyle::kInterleaved);
    EXPECT_TRUE(s2.ok()) << s2.to_string();
  }
}

// Unchecked: the token with a bad position is left unrotated, the others are rotated.
TEST(RopeCuda, UncheckedPositionOutOfTableLeavesRowUnrotated) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  HandCase c;
  for (int32_t bad : {7, -4, INT32_MIN}) {
    auto [y, s] =
        c.run(std::vector<bf16>(128, float_to_bf16(1.f)), {1, bad}, RopeStyle::kInterleaved);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(bf16_to_float(y[0]), round_to_bf16(0.6f - 0.8f));
    for (int32_t j = 64; j < 128; ++j) EXPECT_EQ(bf16_to_float(y[j]), 1.f) << j;
  }
  // The unchecked call left no error behind for the next checked call.
  ScopedCheckedMode checked(true);
  auto [y, s] = c.run(std::vector<bf16>(64, float_to_bf16(1.f)), {1}, RopeStyle::kInterleaved);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(RopeCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Tables tab = make_tables(8192);
  const Layout l{"q_pe", 64, 128, 128 * 192, 192, 128};
  auto x = rng.bf16_vector(size_t(l.tokens) * l.token_stride, 2.f);
  std::vector<int32_t> pos(static_cast<size_t>(l.tokens));
  for (auto& v : pos) v = int32_t(rng.randint(0, 8191));
  auto dpos = dev(pos);
  std::vector<bf16> first;
  for (int run = 0; run < 2; ++run) {
    auto dx = dev(x);
    ASSERT_TRUE(rope_cuda(params(l, dx.data(), dpos.data(), tab.dcos.data(), tab.dsin.data(), 8192,
                                 RopeStyle::kInterleaved))
                    .ok());
    auto y = host(dx);
    if (run == 0) first = y;
    ASSERT_EQ(testing::first_bit_difference(y, first), "");
  }
}

TEST(RopeCuda, ZeroTokensAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  testing::expect_rejects(
      RopeParams{}, rope_cuda,
      {{"no tokens", [](auto&) {}, StatusCode::kOk},
       {"head_stride", [](auto& p) { p.num_tokens = 2, p.num_heads = 2, p.head_stride = 63; },
        StatusCode::kInvalidArgument, "head_stride = 63"}});
}

}  // namespace
}  // namespace dsa::kernels
