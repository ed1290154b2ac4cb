// GPU tests of indexer_query_cuda (SPEC.md §8.5): bit-identical to the unfused CUDA sequence it
// replaces (the heads copied out of the projection's rows, rope_cuda, hadamard_cuda,
// indexer_q_quant_cuda) at V3.2 and tiny head counts, both rope styles, strided and unaligned q;
// against the CPU reference within what hadamard_cuda's 1 bf16 ulp allows (the check); the
// checked and unchecked rules for a position outside the table; no tokens.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/indexer_query/indexer_query.h"
#include "dsa/kernels/indexer_query/indexer_query_check.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"
#include "dsa/kernels/rope/rope.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/host_buffers.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::host;
using testing::Rng;

constexpr int32_t kPositions = 4096;

struct Tables {
  std::vector<float> cos = std::vector<float>(size_t(kPositions) * kRopePairs);
  std::vector<float> sin = std::vector<float>(size_t(kPositions) * kRopePairs);
  DeviceBuffer<float> dcos, dsin;
  Tables() {
    const Status s = rope_table_ref({RopeConfig{}, kPositions, cos.data(), sin.data()});
    EXPECT_TRUE(s.ok()) << s.to_string();
    dcos = dev(cos);
    dsin = dev(sin);
  }
};

// T tokens of H heads in rows of `before` + H * 128 + `after` values (the fused q_b + wq_b
// output: q_b's columns first), the buffers `offset` elements (q) and bytes (q8) into their
// allocations (offset 1: unaligned, the scalar loads and stores).
struct Case {
  int32_t tokens, heads;
  int64_t before, after;
  RopeStyle style;
  size_t offset = 0;

  int64_t row() const { return int64_t{heads} * kIndexHeadDim; }
  int64_t ld() const { return before + row() + after; }
  int64_t blocks() const { return int64_t{tokens} * heads; }
  std::string name() const {
    return "T=" + std::to_string(tokens) + " H=" + std::to_string(heads) +
           (style == RopeStyle::kInterleaved ? " interleaved" : " non-int.") +
           " ld=" + std::to_string(ld()) + " offset=" + std::to_string(offset);
  }
};

// The host inputs of a case and their device copies.
struct Inputs {
  std::vector<bf16> buf;  // [offset + T * ld]
  std::vector<int32_t> pos;
  std::vector<float> w;
  DeviceBuffer<bf16> dbuf;
  DeviceBuffer<int32_t> dpos;
};

Inputs random_inputs(const Case& c, Rng& rng) {
  Inputs in;
  in.buf.resize(c.offset + size_t(c.tokens) * size_t(c.ld()));
  for (auto& v : in.buf) v = float_to_bf16(rng.normal() * 4096.f);  // sentinels around the heads
  for (int64_t b = 0; b < c.blocks(); ++b) {
    const bool zero = b == c.blocks() / 2;  // one all-zero head
    const float scale = zero ? 0.f : std::ldexp(1.f, int(rng.randint(-8, 8)));
    bf16* x = &in.buf[c.offset + size_t(b / c.heads) * size_t(c.ld()) + size_t(c.before) +
                      size_t(b % c.heads) * kIndexHeadDim];
    for (int32_t k = 0; k < kIndexHeadDim; ++k) x[k] = float_to_bf16(rng.normal() * scale);
  }
  in.pos.resize(size_t(c.tokens));
  for (auto& p : in.pos) p = int32_t(rng.randint(0, kPositions - 1));
  in.pos[0] = 0;
  if (c.tokens > 1) in.pos.back() = kPositions - 1;  // both ends of the table
  in.w = rng.normal_vector(size_t(c.blocks()));
  in.dbuf = dev(in.buf);
  in.dpos = dev(in.pos);
  return in;
}

// Params over the device copies (q8 and w the caller's device buffers).
IndexerQueryParams params(const Case& c, const Inputs& in, const Tables& tab, uint8_t* q8,
                          float* w) {
  IndexerQueryParams p;
  p.q = in.dbuf.data() + c.offset + c.before;
  p.q_token_stride = c.ld();
  p.q8 = q8;
  p.w = w;
  p.num_tokens = c.tokens;
  p.num_heads = c.heads;
  p.fold = static_cast<float>(1.0 / std::sqrt(double(c.heads) * kIndexHeadDim));
  p.style = c.style;
  p.positions = in.dpos.data();
  p.cos = tab.dcos.data();
  p.sin = tab.dsin.data();
  p.num_positions = kPositions;
  return p;
}

// copy_rows_2d's 2-D copy (the model's copy out of the fused projection's columns), on the stream.
Status copy_rows_device(bf16* dense, const bf16* rows, int64_t ld, int64_t width, int32_t count) {
  DSA_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dense, size_t(width) * sizeof(bf16), rows,
                                             size_t(ld) * sizeof(bf16),
                                             size_t(width) * sizeof(bf16), size_t(count),
                                             cudaMemcpyDeviceToDevice, cuda::current_stream()));
  return ok_status();
}

// The model's unfused CUDA sequence on device pointers (run_query_separately): the 2-D copy into
// a dense buffer, rope_cuda and hadamard_cuda in place, indexer_q_quant_cuda into q8 and w.
Status unfused_cuda(const IndexerQueryParams& p) {
  DSA_ASSIGN_OR_RETURN(auto q, DeviceBuffer<bf16>::alloc(size_t(p.num_tokens) *
                                                         size_t(p.num_heads) * kIndexHeadDim));
  DSA_RETURN_IF_ERROR(run_query_separately(
      p, q.data(), {copy_rows_device, rope_cuda, hadamard_cuda, indexer_q_quant_cuda}));
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cuda::current_stream()));  // before q is freed
  return ok_status();
}

struct Outputs {
  std::vector<uint8_t> q8;
  std::vector<float> w;
};

// Runs `op` (fused or unfused) on the case's device inputs: q8 poisoned (`poison`), w the
// case's weights; returns the outputs, with q8 without its offset.
Outputs run(Status (*op)(const IndexerQueryParams&), const Case& c, const Inputs& in,
            const Tables& tab, uint8_t poison) {
  auto dq8 = testing::poisoned<uint8_t>(c.offset + size_t(c.blocks()) * kIndexHeadDim, poison);
  auto dw = dev(in.w);
  const Status s = op(params(c, in, tab, dq8.data() + c.offset, dw.data()));
  EXPECT_TRUE(s.ok()) << c.name() << ": " << s.to_string();
  std::vector<uint8_t> q8 = host(dq8);
  q8.erase(q8.begin(), q8.begin() + long(c.offset));
  return {q8, host(dw)};
}

void expect_bit_identical_to_unfused(const Case& c, const Tables& tab, uint64_t seed) {
  Rng rng(seed);
  const Inputs in = random_inputs(c, rng);
  const Outputs got = run(indexer_query_cuda, c, in, tab, 0xEE);
  const Outputs want = run(unfused_cuda, c, in, tab, 0x11);
  EXPECT_EQ(testing::first_bit_difference(got.q8, want.q8), "") << c.name() << " (codes)";
  EXPECT_EQ(testing::first_bit_difference(got.w, want.w), "") << c.name() << " (weights)";
  EXPECT_EQ(testing::first_bit_difference(host(in.dbuf), in.buf), "") << c.name() << ": q written";
}

TEST(IndexerQueryCuda, BitIdenticalToUnfusedSequence) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  const uint64_t seed = testing::test_seed();
  const Tables tab;
  int n = 0;
  for (int32_t tokens : {1, 4, 33, 513})
    for (int32_t heads : {64, 16})
      for (RopeStyle style : {RopeStyle::kNonInterleaved, RopeStyle::kInterleaved}) {
        // Strided as the fused q_b + wq_b output lays the heads out (q_b's 192-wide heads first).
        expect_bit_identical_to_unfused({tokens, heads, int64_t{heads} * 192, 64, style}, tab,
                                        seed + n++);
        if (tokens == 33) {  // dense (wq_b's own output), and unaligned: the scalar path
          expect_bit_identical_to_unfused({tokens, heads, 0, 0, style}, tab, seed + n++);
          expect_bit_identical_to_unfused({tokens, heads, 192, 0, style, 1}, tab, seed + n++);
          expect_bit_identical_to_unfused({tokens, heads, 191, 3, style, 1}, tab, seed + n++);
        }
      }
}

// The GPU against the CPU reference on the same data: at most 0.1% of the (token, head) blocks may
// differ at all (hadamard_cuda's rare 1-ulp roundings; the check bounds how far), and how many is
// printed.
TEST(IndexerQueryCuda, MatchesCpuReference) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  const Tables tab;
  int64_t blocks = 0, differing = 0;
  int n = 0;
  for (int32_t tokens : {4, 513})
    for (RopeStyle style : {RopeStyle::kNonInterleaved, RopeStyle::kInterleaved}) {
      const Case c{tokens, 64, 64 * 192, 64, style};
      Rng rng(seed + n++);
      const Inputs in = random_inputs(c, rng);
      const Outputs got = run(indexer_query_cuda, c, in, tab, 0xEE);
      std::vector<uint8_t> q8(size_t(c.blocks()) * kIndexHeadDim, 0x11);
      std::vector<float> w = in.w;
      IndexerQueryParams p = params(c, in, tab, q8.data(), w.data());
      p.q = in.buf.data() + c.before;
      p.positions = in.pos.data();
      p.cos = tab.cos.data();
      p.sin = tab.sin.data();
      ASSERT_TRUE(indexer_query_ref(p).ok());
      for (int64_t b = 0; b < c.blocks(); ++b) {
        bool same = got.w[size_t(b)] == w[size_t(b)];
        for (int32_t k = 0; k < kIndexHeadDim; ++k)
          same = same && got.q8[size_t(b * kIndexHeadDim + k)] == q8[size_t(b * kIndexHeadDim + k)];
        differing += !same;
      }
      blocks += c.blocks();
    }
  std::printf("note: %lld of %lld (token, head) blocks not bit-identical to the CPU reference\n",
              static_cast<long long>(differing), static_cast<long long>(blocks));
  // Only where hadamard_cuda rounds 1 bf16 ulp from hadamard_ref (0-2 blocks in 66,176 on the
  // H100); a wrong rotation, pair or scale would move nearly every block.
  EXPECT_LE(differing * 1000, blocks) << "more than 0.1% of the blocks differ";
}

Status indexer_query_cuda_on_host_buffers(const IndexerQueryParams& hp) {
  DSA_RETURN_IF_ERROR(validate(hp));
  const size_t qn =
      size_t(hp.num_tokens - 1) * size_t(hp.q_token_stride) + size_t(hp.num_heads) * kIndexHeadDim;
  const size_t blocks = size_t(hp.num_tokens) * size_t(hp.num_heads);
  const size_t tn = size_t(hp.num_positions) * kRopePairs;
  using P = IndexerQueryParams;
  return testing::run_on_host_buffers(
      hp, indexer_query_cuda, testing::In<&P::q>{qn}, testing::InOut<&P::q8>{blocks * 128},
      testing::InOut<&P::w>{blocks}, testing::In<&P::positions>{size_t(hp.num_tokens)},
      testing::In<&P::cos>{tn}, testing::In<&P::sin>{tn});
}

TEST(IndexerQueryCuda, MatchesCompositionOfReferencesWithinCheck) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (auto [tokens, heads] : {std::pair{1, 64}, {33, 16}, {513, 64}, {7, 1}}) {
    const Status s = check_indexer_query(indexer_query_cuda_on_host_buffers, tokens, heads,
                                         seed + uint64_t(tokens));
    EXPECT_TRUE(s.ok()) << "T=" << tokens << " H=" << heads << ": " << s.to_string();
  }
}

// Checked: a position outside [0, T_rope) is OutOfRange through the device error word, naming the
// token and the position; the word is cleared for the next call.
TEST(IndexerQueryCuda, CheckedPositionOutsideTableIsOutOfRange) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  Rng rng(testing::test_seed());
  const Tables tab;
  const Case c{5, 16, 64, 0, RopeStyle::kNonInterleaved};
  for (int32_t bad : {kPositions, -1, INT32_MIN}) {
    Inputs in = random_inputs(c, rng);
    in.pos[3] = bad;
    in.dpos = dev(in.pos);
    auto dq8 = testing::poisoned<uint8_t>(size_t(c.blocks()) * kIndexHeadDim);
    auto dw = dev(in.w);
    const Status s = indexer_query_cuda(params(c, in, tab, dq8.data(), dw.data()));
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find("index 3 (value " + std::to_string(bad) + ")"), std::string::npos)
        << s.to_string();
    in.pos[3] = 7;
    in.dpos = dev(in.pos);
    const Status s2 = indexer_query_cuda(params(c, in, tab, dq8.data(), dw.data()));
    EXPECT_TRUE(s2.ok()) << s2.to_string();
  }
}

// Unchecked: the token with a bad position keeps its heads unrotated, through the Hadamard and
// the quantisation, exactly as the unfused path (rope_cuda leaves it) does; the other tokens are
// rotated. Both styles.
TEST(IndexerQueryCuda, UncheckedPositionOutsideTableMatchesUnfused) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  const Tables tab;
  for (RopeStyle style : {RopeStyle::kNonInterleaved, RopeStyle::kInterleaved}) {
    const Case c{6, 64, 64 * 192, 64, style};
    for (int32_t bad : {kPositions, -4, INT32_MIN}) {
      Inputs in = random_inputs(c, rng);
      in.pos[1] = bad;
      in.dpos = dev(in.pos);
      const Outputs got = run(indexer_query_cuda, c, in, tab, 0xEE);
      const Outputs want = run(unfused_cuda, c, in, tab, 0x11);
      EXPECT_EQ(testing::first_bit_difference(got.q8, want.q8), "") << bad;
      EXPECT_EQ(testing::first_bit_difference(got.w, want.w), "") << bad;
      in.pos[1] = 1;  // rotated, the token's codes differ: the case can fail
      in.dpos = dev(in.pos);
      const Outputs rotated = run(indexer_query_cuda, c, in, tab, 0xEE);
      EXPECT_NE(testing::first_bit_difference(got.q8, rotated.q8), "") << bad;
    }
  }
  // The unchecked call left no error behind for the next checked call.
  ScopedCheckedMode checked(true);
  const Case c{2, 16, 0, 0, RopeStyle::kInterleaved};
  Rng rng2(testing::test_seed() + 1);
  const Inputs in = random_inputs(c, rng2);
  auto dq8 = testing::poisoned<uint8_t>(size_t(c.blocks()) * kIndexHeadDim);
  auto dw = dev(in.w);
  const Status s = indexer_query_cuda(params(c, in, tab, dq8.data(), dw.data()));
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(IndexerQueryCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const Tables tab;
  const Case c{300, 64, 64 * 192, 64, RopeStyle::kNonInterleaved};
  const Inputs in = random_inputs(c, rng);
  const Outputs a = run(indexer_query_cuda, c, in, tab, 0xEE);
  const Outputs b = run(indexer_query_cuda, c, in, tab, 0x11);
  EXPECT_EQ(testing::first_bit_difference(a.q8, b.q8), "");
  EXPECT_EQ(testing::first_bit_difference(a.w, b.w), "");
}

TEST(IndexerQueryCuda, ZeroTokensAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  IndexerQueryParams none;  // every pointer null
  none.num_heads = 64;
  none.q_token_stride = 64 * kIndexHeadDim;
  none.fold = 0.01f;
  testing::expect_rejects(
      none, indexer_query_cuda,
      {{"no tokens", [](auto&) {}, StatusCode::kOk},
       {"q", [](auto& p) { p.num_tokens = 1, p.num_positions = 1; }, StatusCode::kInvalidArgument,
        "indexer_query: q is null"},
       {"fold", [](auto& p) { p.fold = 0.f; }, StatusCode::kInvalidArgument, "fold = 0"}});
}

}  // namespace
}  // namespace dsa::kernels
