// GPU tests of ragged_logits_cuda (SPEC.md §3d) against the CPU reference: fresh random
// EXTEND-like inputs (requests of causal rows over gathered keys), outputs poisoned (NaN bytes)
// before every launch, every defined column within 2^-8 M[t, j] (ragged_logits_bounds), columns
// past each row untouched, bit-identical reruns, the checked-mode error word (OutOfRange) and the
// unchecked clamping of ks / ke.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/error_word.h"
#include "dsa/cuda/launch.h"
#include "dsa/kernels/ragged_logits/ragged_logits.h"
#include "dsa/kernels/ragged_logits/ragged_logits_launch.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::is_poison;
using testing::Rng;

struct Case {
  int32_t T, S, heads;
  int64_t ld;
  std::vector<uint8_t> q, k8;
  std::vector<float> w, kscale, logits;
  std::vector<int32_t> ks, ke;
  Case(int32_t T, int32_t S, int32_t heads, int64_t ld, Rng& rng)
      : T(T),
        S(S),
        heads(heads),
        ld(ld),
        q(rng.e4m3_vector(size_t(T) * heads * 128)),
        k8(rng.e4m3_vector(size_t(S) * 128)),
        w(size_t(T) * heads),
        kscale(static_cast<size_t>(S)),
        logits(size_t(T) * ld),
        ks(static_cast<size_t>(T), 0),
        ke(static_cast<size_t>(T), 0) {
    for (auto& v : w) v = rng.normal(0.f, 0.1f);
    for (auto& v : kscale) v = std::ldexp(1.f, int(rng.randint(-10, 1)));
  }
  RaggedLogitsParams params() {
    return {q.data(), w.data(), k8.data(), kscale.data(), ks.data(), ke.data(),          T,
            S,        heads,    128,       logits.data(), ld,        int64_t{T} * ld * 4};
  }
  // EXTEND-like: requests of `rows` query rows over `prefix` cached keys; row i of a request
  // sees prefix + i + 1 keys from ks = cu_kv[b]. Rows beyond the requests stay empty (ks = ke).
  void extend(const std::vector<std::pair<int32_t, int32_t>>& requests) {
    int32_t t = 0, cu = 0;
    for (auto [rows, prefix] : requests) {
      for (int32_t i = 0; i < rows && t < T; ++i, ++t) {
        ks[size_t(t)] = cu;
        ke[size_t(t)] = cu + prefix + i + 1;
      }
      cu += prefix + rows;
    }
    for (; t < T; ++t) ks[size_t(t)] = ke[size_t(t)] = std::min(cu, S);
  }
};

struct DeviceCase {
  DeviceBuffer<uint8_t> q, k8;
  DeviceBuffer<float> w, kscale, logits;
  DeviceBuffer<int32_t> ks, ke;
  RaggedLogitsParams p;
  explicit DeviceCase(Case& c)
      : q(dev(c.q, 1)),
        k8(dev(c.k8, 1)),
        w(dev(c.w, 1)),
        kscale(dev(c.kscale, 1)),
        logits(dev(c.logits, 1)),
        ks(dev(c.ks, 1)),
        ke(dev(c.ke, 1)),
        p(c.params()) {
    p.q = q.data(), p.w = w.data(), p.k8 = k8.data(), p.kscale = kscale.data();
    p.ks = ks.data(), p.ke = ke.data(), p.logits = logits.data();
  }
  Status run(std::vector<float>* out) {
    return testing::run_poisoned(
        logits, [&] { return ragged_logits_cuda(p); }, out);
  }
};

// Row t's defined columns after the unchecked clamp (the identity on in-contract rows).
int64_t row_length(const Case& c, int32_t t) {
  const int32_t ks = std::clamp(c.ks[size_t(t)], 0, c.S);
  const int64_t hi = std::min<int64_t>(c.S, ks + c.ld);
  return std::clamp<int64_t>(c.ke[size_t(t)], ks, hi) - ks;
}

void expect_matches_reference(Case& c, const std::vector<float>& got) {
  ASSERT_TRUE(ragged_logits_ref(c.params()).ok());
  std::vector<float> bound(c.logits.size());
  ASSERT_TRUE(ragged_logits_bounds(c.params(), bound.data()).ok());
  testing::expect_rows_within_bound(got, c.logits, bound, c.T, c.ld,
                                    [&](int64_t t) { return row_length(c, int32_t(t)); });
}

TEST(RaggedLogitsCuda, HandComputedCompressedColumns) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(1);
  Case c(2, 4, 16, 4, rng);
  std::fill(c.q.begin(), c.q.end(), 0);
  std::fill(c.w.begin(), c.w.end(), 0.f);
  std::fill(c.k8.begin(), c.k8.end(), 0);
  c.k8[128 + 0] = 0x30, c.k8[128 + 1] = 0x3C, c.kscale[1] = 0.25f;
  c.k8[256 + 0] = 0xC0, c.k8[256 + 1] = 0x28, c.kscale[2] = 4.f;
  c.k8[0] = 0x48, c.kscale[0] = 1.f;
  c.q[0] = 0x38, c.q[1] = 0x40, c.q[128 + 1] = 0x38;
  c.w[0] = 2.f, c.w[1] = -0.5f;
  c.ks = {1, 2};
  c.ke = {3, 2};
  DeviceCase d(c);
  std::vector<float> got;
  ASSERT_TRUE(d.run(&got).ok());
  EXPECT_EQ(got[0], 1.5625f);
  EXPECT_EQ(got[1], -0.5f);
  EXPECT_TRUE(is_poison(got[2]));
  for (int j = 0; j < 4; ++j) EXPECT_TRUE(is_poison(got[size_t(4 + j)])) << "empty row";
}

// Every head count (4, 8, 16 rows per block), blocks spanning several requests, empty rows,
// tiles partially outside every row, T not a multiple of the rows per block.
TEST(RaggedLogitsCuda, ExtendLikeMatchesReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  struct Shape {
    int32_t heads;
    std::vector<std::pair<int32_t, int32_t>> requests;  // (rows, prefix)
    int32_t extra_empty;
  };
  const std::vector<Shape> shapes = {
      {16, {{5, 0}, {3, 300}, {9, 17}}, 2},
      {32, {{1, 600}, {7, 255}, {2, 0}, {6, 513}}, 0},
      {64, {{6, 1000}, {3, 3}, {4, 256}}, 3},
      {64, {{2, 0}}, 1},
  };
  for (const Shape& s : shapes) {
    int32_t T = s.extra_empty, S = 0, max_len = 1;
    for (auto [rows, prefix] : s.requests) {
      T += rows, S += prefix + rows;
      max_len = std::max(max_len, prefix + rows);
    }
    Case c(T, S, s.heads, (max_len + 3) / 4 * 4 + 4, rng);
    c.extend(s.requests);
    DeviceCase d(c);
    std::vector<float> got;
    Status st = d.run(&got);
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_matches_reference(c, got);
  }
}

// V3.2 heads over one 1.1K-token request chunk: 128 rows after a 1000-token prefix.
TEST(RaggedLogitsCuda, V32ChunkMatchesReferenceAndIsDeterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 1);
  Case c(128, 1128, 64, 1128, rng);
  c.extend({{128, 1000}});
  DeviceCase d(c);
  std::vector<float> a, b;
  ASSERT_TRUE(d.run(&a).ok());
  ASSERT_TRUE(d.run(&b).ok());
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  expect_matches_reference(c, a);
}

// Few query rows over long key ranges: the launch slices each row group's keys over several CTAs
// (asserted through ragged_logits_grid), with ranges that start and end off the 256-key splits,
// S not a multiple of the 64-key tile (the tail is zero-filled), and rows of several requests in
// one row group (splits between requests skipped).
TEST(RaggedLogitsCuda, SlicedKeyRangesMatchReference) {
  DSA_SKIP_WITHOUT_GPU();
  auto sms = cuda::sm_count();
  ASSERT_TRUE(sms.ok());
  Rng rng(testing::test_seed() + 5);
  struct Shape {
    int32_t heads;
    std::vector<std::pair<int32_t, int32_t>> requests;  // (rows, prefix)
  };
  const std::vector<Shape> shapes = {
      {64, {{3, 17000}}},
      {64, {{2, 5000}, {1, 9001}, {5, 3333}}},
      {16, {{7, 12345}, {9, 4099}}},
      {32, {{1, 0}, {4, 30001}}},
  };
  for (const Shape& s : shapes) {
    int32_t T = 0, S = 0, max_len = 1;
    for (auto [rows, prefix] : s.requests) {
      T += rows, S += prefix + rows;
      max_len = std::max(max_len, prefix + rows);
    }
    const RaggedLogitsGrid g = ragged_logits_grid(T, S, s.heads, *sms);
    EXPECT_GT(g.slices, 1) << "T " << T << " S " << S;
    Case c(T, S, s.heads, (max_len + 3) / 4 * 4, rng);
    c.extend(s.requests);
    DeviceCase d(c);
    std::vector<float> got;
    Status st = d.run(&got);
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_matches_reference(c, got);
  }
}

// The copy engine reads the key scales in 256-byte boxes: a scale array off 16 bytes is refused,
// naming it, before anything runs.
TEST(RaggedLogitsCuda, MisalignedScalesAreRefused) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(3);
  Case c(4, 100, 16, 100, rng);
  c.extend({{4, 90}});
  DeviceCase d(c);
  d.p.kscale = d.kscale.data() + 1;
  const Status st = ragged_logits_cuda(d.p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.to_string().find("kscale"), std::string::npos) << st.to_string();
}

TEST(RaggedLogitsCuda, ZeroTokensIsNoOp) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(2);
  Case c(0, 3, 16, 4, rng);
  DeviceCase d(c);
  EXPECT_TRUE(ragged_logits_cuda(d.p).ok());
}

// S = 0 (no key maps are built): every row is empty, nothing is written, checked mode is clean.
TEST(RaggedLogitsCuda, NoKeysWritesNothing) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(4);
  Case c(6, 0, 64, 8, rng);
  DeviceCase d(c);
  std::vector<float> got;
  ASSERT_TRUE(d.run(&got).ok());
  for (float v : got) EXPECT_TRUE(is_poison(v));
}

// Unchecked: ks clamped into [0, S], ke into [ks, min(S, ks + ld)], no error reported.
TEST(RaggedLogitsCuda, UncheckedClampsLikeReference) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed() + 3);
  Case c(5, 10, 16, 4, rng);
  c.ks = {-3, 8, 2, 12, 4};
  c.ke = {2, 15, 9, 13, 1};
  DeviceCase d(c);
  std::vector<float> got;
  ASSERT_TRUE(d.run(&got).ok());
  expect_matches_reference(c, got);
  EXPECT_TRUE(cuda::take_device_error("test").ok());
}

// Checked: each broken rule alone gives the reference's code (OutOfRange); the word is cleared.
TEST(RaggedLogitsCuda, CheckedModeErrorsMatchReference) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed() + 4);
  const std::vector<std::pair<int32_t, int32_t>> bad = {{-1, 2}, {0, 11}, {5, 4}, {0, 9}};
  for (auto [ks, ke] : bad) {
    Case c(3, 10, 16, 8, rng);
    c.ks = {0, 0, 4};
    c.ke = {1, 4, 6};
    c.ks[1] = ks, c.ke[1] = ke;
    const Status ref = ragged_logits_ref(c.params());
    ASSERT_EQ(ref.code(), StatusCode::kOutOfRange) << ks << "," << ke;
    DeviceCase d(c);
    std::vector<float> got;
    Status st = d.run(&got);
    EXPECT_EQ(st.code(), ref.code()) << "gpu: " << st.to_string() << " ref: " << ref.to_string();
    EXPECT_TRUE(cuda::take_device_error("test").ok());
  }
}

}  // namespace
}  // namespace dsa::kernels
