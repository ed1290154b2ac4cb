// GPU tests of embedding_cuda against embedding_ref: bit-exact rows at tiny and V3.2 widths
// (vector and scalar paths), the checked error word (OutOfRange naming the token and the id) and
// the unchecked zero row, determinism.
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
#include "dsa/kernels/embedding/embedding.h"
#include "dsa/kernels/embedding/embedding_check.h"
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

// Runs the GPU op; output poisoned with 0xFF. Returns the rows and the Status.
std::pair<std::vector<bf16>, Status> run_gpu(const std::vector<int32_t>& ids,
                                             const DeviceBuffer<bf16>& table, int32_t vocab,
                                             int32_t dim) {
  auto dids = dev(ids);
  auto dy = testing::poisoned<bf16>(ids.size() * size_t(dim));
  Status s =
      embedding_cuda({dids.data(), table.data(), dy.data(), int32_t(ids.size()), vocab, dim});
  return {host(dy), s};
}

TEST(EmbeddingCuda, RandomMatchesReferenceBitExact) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  struct Shape {
    int32_t tokens, vocab, dim;
  } shapes[] = {{37, 6144, 256}, {3, 5, 7}, {1, 1, 1}, {300, 129280, 7168}, {64, 1000, 100}};
  for (const Shape& s : shapes) {
    Rng rng(seed + s.vocab + s.dim);
    // A table of 129280 x 7168 is 1.85 GB: fill it on the device with random bytes of a smaller
    // pattern instead (rows repeat every 64, distinct within a row), and read back the used rows.
    const int32_t pattern_rows = std::min(s.vocab, 64);
    auto pattern = rng.bf16_vector(size_t(pattern_rows) * s.dim);
    auto table = testing::dev_alloc<bf16>(size_t(s.vocab) * s.dim);
    for (int32_t r0 = 0; r0 < s.vocab; r0 += pattern_rows) {
      const int32_t n = std::min(pattern_rows, s.vocab - r0);
      ASSERT_EQ(cudaMemcpy(table.data() + size_t(r0) * s.dim, pattern.data(),
                           size_t(n) * s.dim * sizeof(bf16), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    // Mark each row with its id in element 0 so a wrong row cannot pass.
    std::vector<int32_t> ids(static_cast<size_t>(s.tokens));
    for (int32_t t = 0; t < s.tokens; ++t)
      ids[t] = t == 0 ? 0 : (t == 1 ? s.vocab - 1 : int32_t(rng.randint(0, s.vocab - 1)));
    if (s.tokens > 2) ids[s.tokens - 1] = ids[2];
    for (int32_t id : ids) {
      const bf16 mark[2] = {bf16{static_cast<uint16_t>(id & 0x7FFF)},
                            bf16{static_cast<uint16_t>(id >> 15)}};
      ASSERT_EQ(cudaMemcpy(table.data() + size_t(id) * s.dim, mark,
                           sizeof(bf16) * std::min(s.dim, 2), cudaMemcpyHostToDevice),
                cudaSuccess);
    }
    auto [y, st] = run_gpu(ids, table, s.vocab, s.dim);
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (int32_t t = 0; t < s.tokens; ++t) {
      std::vector<bf16> want(static_cast<size_t>(s.dim));
      ASSERT_EQ(cudaMemcpy(want.data(), table.data() + size_t(ids[t]) * s.dim,
                           size_t(s.dim) * sizeof(bf16), cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int32_t d = 0; d < s.dim; ++d)
        ASSERT_EQ(y[size_t(t) * s.dim + d].bits, want[d].bits)
            << "V=" << s.vocab << " D=" << s.dim << " y[" << t << "][" << d << "] id " << ids[t];
    }
  }
}

Status embedding_cuda_on_host_buffers(const EmbeddingParams& hp) {
  DSA_RETURN_IF_ERROR(validate(hp));
  using P = EmbeddingParams;
  return testing::run_on_host_buffers(hp, embedding_cuda,
                                      testing::In<&P::ids>{size_t(hp.num_tokens)},
                                      testing::In<&P::table>{size_t(hp.vocab_size) * hp.dim},
                                      testing::InOut<&P::y>{size_t(hp.num_tokens) * hp.dim});
}

TEST(EmbeddingCuda, MatchesElementwiseLookup) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (auto [t, v, d] : {std::tuple{37, 6144, 256}, {3, 5, 7}, {1, 1, 1}, {16, 2000, 7168}}) {
    Status s = check_embedding(embedding_cuda_on_host_buffers, t, v, d, seed + v);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
}

// Checked: an id outside [0, V) is OutOfRange naming the token and the id; the word is cleared.
TEST(EmbeddingCuda, CheckedIdOutOfVocabIsOutOfRange) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  auto table = dev(std::vector<bf16>(4 * 8, float_to_bf16(1.f)));
  for (int32_t bad : {4, -1, INT32_MIN}) {
    auto [y, s] = run_gpu({1, 2, bad}, table, 4, 8);
    EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
    EXPECT_NE(s.message().find("index 2 (value " + std::to_string(bad) + ")"), std::string::npos)
        << s.to_string();
    auto [y2, s2] = run_gpu({1, 2, 3}, table, 4, 8);
    EXPECT_TRUE(s2.ok()) << s2.to_string();
  }
}

// Unchecked: that token's row is +0.0 everywhere (vector and scalar paths); nothing reported.
TEST(EmbeddingCuda, UncheckedIdOutOfVocabGivesZeroRow) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  for (int32_t dim : {8, 3}) {
    auto table = dev(std::vector<bf16>(4 * size_t(dim), float_to_bf16(1.f)));
    auto [y, s] = run_gpu({1, 9, -5, INT32_MIN}, table, 4, dim);
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (int32_t d = 0; d < dim; ++d) EXPECT_EQ(bf16_to_float(y[d]), 1.f);
    for (size_t i = size_t(dim); i < y.size(); ++i) EXPECT_EQ(y[i].bits, 0) << i;
  }
  ScopedCheckedMode checked(true);
  auto table = dev(std::vector<bf16>(4 * 8, float_to_bf16(1.f)));
  auto [y, s] = run_gpu({0}, table, 4, 8);
  EXPECT_TRUE(s.ok()) << "an unchecked call left an error behind: " << s.to_string();
}

TEST(EmbeddingCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  auto table = dev(rng.bf16_vector(size_t(512) * 7168));
  std::vector<int32_t> ids(256);
  for (auto& id : ids) id = int32_t(rng.randint(0, 511));
  auto [a, s1] = run_gpu(ids, table, 512, 7168);
  auto [b, s2] = run_gpu(ids, table, 512, 7168);
  ASSERT_TRUE(s1.ok() && s2.ok());
  ASSERT_EQ(testing::first_bit_difference(a, b), "");
}

TEST(EmbeddingCuda, ZeroTokensAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  testing::expect_rejects(EmbeddingParams{nullptr, nullptr, nullptr, 0, 10, 4}, embedding_cuda,
                          {{"no tokens", [](auto&) {}, StatusCode::kOk},
                           {"vocab_size", [](auto& p) { p.num_tokens = 2, p.vocab_size = 0; },
                            StatusCode::kInvalidArgument, "vocab_size = 0"}});
}

}  // namespace
}  // namespace dsa::kernels
