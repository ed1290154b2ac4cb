// GPU tests of indexer_write_cuda against the CPU reference (SPEC.md §3a, class E: every pool
// byte identical, including the poisoned bytes of slots that must not be written).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/indexer_write/indexer_write.h"
#include "dsa/kernels/indexer_write/indexer_write_check.h"
#include "dsa/testing/bf16_values.h"
#include "dsa/testing/cache_write.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::bf16_from_bits;
using testing::PoolWrite;
using testing::Rng;

int64_t pool_bytes(int32_t num_pages) {
  return int64_t{num_pages} * indexer_page_bytes(kPageSize, kIndexHeadDim);
}

// A pool image whose pages other than page 0 hold random bytes (unwritten slots are garbage).
std::vector<uint8_t> poisoned_pool(Rng& rng, int32_t num_pages) {
  return testing::random_pool_image(rng, size_t(pool_bytes(num_pages)),
                                    size_t(indexer_page_bytes(kPageSize, kIndexHeadDim)));
}

// Keys that stress every branch of §2.1: ordinary magnitudes over many binades, random finite bit
// patterns (subnormals, huge values, signed zeros), all-zero and tiny blocks (the 1e-4 floor),
// amax exactly 448 2^k (v a power of two), and huge values next to bf16 subnormals.
std::vector<bf16> stress_keys(Rng& rng, int32_t tokens) {
  std::vector<bf16> k(size_t(tokens) * kIndexHeadDim);
  for (int32_t t = 0; t < tokens; ++t) {
    bf16* row = &k[size_t(t) * kIndexHeadDim];
    const int kind = int(rng.randint(0, testing::kStressKinds - 1));
    testing::fill_stress_block(rng, row, kIndexHeadDim, kind, std::exp2(float(t % 40 - 20)));
    if (kind == 4)
      row[rng.randint(0, kIndexHeadDim - 1)] = float_to_bf16(448.f * std::exp2(float(t % 40 - 20)));
  }
  return k;
}

// The pool layout of a write; the harness fills in the keys, slots and pool pointers.
IndexerWriteParams layout(int32_t num_pages) {
  IndexerWriteParams p;
  p.pool.num_pages = num_pages;
  return p;
}

PoolWrite run_ref(const std::vector<bf16>& k, const std::vector<int32_t>& slot, int32_t num_pages,
                  std::vector<uint8_t> bytes) {
  return testing::write_on_host<&IndexerWriteParams::k>(indexer_write_ref, layout(num_pages), k,
                                                        slot, std::move(bytes));
}

PoolWrite run_gpu(const std::vector<bf16>& k, const std::vector<int32_t>& slot, int32_t num_pages,
                  const std::vector<uint8_t>& bytes) {
  return testing::write_on_device<&IndexerWriteParams::k>(indexer_write_cuda, layout(num_pages), k,
                                                          slot, bytes);
}

// First differing byte, with its page / token / role, or "" when identical.
std::string first_diff(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  const int64_t page = indexer_page_bytes(kPageSize, kIndexHeadDim);
  return testing::first_difference(got, want, [&](size_t i) {
    const int64_t in_page = int64_t(i) % page;
    const bool scale = in_page >= kPageSize * kIndexHeadDim;
    const int64_t o = scale ? (in_page - kPageSize * kIndexHeadDim) / 4 : in_page / kIndexHeadDim;
    return "byte " + std::to_string(i) + " (page " + std::to_string(int64_t(i) / page) +
           ", token " + std::to_string(o) + (scale ? ", scale" : ", value") + "): got " +
           std::to_string(got[i]) + " want " + std::to_string(want[i]);
  });
}

void expect_gpu_matches_ref(const std::vector<bf16>& k, const std::vector<int32_t>& slot,
                            int32_t num_pages, const std::vector<uint8_t>& initial) {
  const PoolWrite ref = run_ref(k, slot, num_pages, initial);
  testing::expect_same_write(run_gpu(k, slot, num_pages, initial), ref, first_diff,
                             "T = " + std::to_string(slot.size()));
}

// Random keys to shuffled distinct slots (pages out of order), every 7th token a padded row.
TEST(IndexerWriteCuda, RandomScatterBitExact) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  for (int32_t tokens : {1, 17, 150, 2048, 4096}) {
    const int32_t num_pages = tokens / kPageSize + 3;
    std::vector<bf16> k = stress_keys(rng, tokens);
    std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
    std::vector<int32_t> slot(static_cast<size_t>(tokens));
    for (int32_t t = 0; t < tokens; ++t) slot[size_t(t)] = t % 7 == 3 ? -1 : perm[size_t(t)];
    expect_gpu_matches_ref(k, slot, num_pages, poisoned_pool(rng, num_pages));
  }
}

// Hand-computed key of the reference test: [3, -1.5, 0...] -> codes 0x7C 0xF4, scale 2^-7.
TEST(IndexerWriteCuda, HandComputedKey) {
  DSA_SKIP_WITHOUT_GPU();
  std::vector<bf16> k(kIndexHeadDim, float_to_bf16(0.f));
  k[0] = float_to_bf16(3.f);
  k[1] = float_to_bf16(-1.5f);
  const int32_t s = 2 * kPageSize + 5;
  PoolWrite gpu = run_gpu(k, {s}, 3, std::vector<uint8_t>(size_t(pool_bytes(3)), 0));
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.to_string();
  EXPECT_EQ(gpu.bytes[2 * 8448 + 5 * 128], 0x7C);
  EXPECT_EQ(gpu.bytes[2 * 8448 + 5 * 128 + 1], 0xF4);
  float scale;
  std::memcpy(&scale, gpu.bytes.data() + 2 * 8448 + 8192 + 4 * 5, 4);
  EXPECT_EQ(scale, 0.0078125f);
}

// The first and last legal slots (P and num_pages P - 1), and every offset of one page.
TEST(IndexerWriteCuda, EdgeSlotsBothModes) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const int32_t num_pages = 4;
  std::vector<int32_t> slot = testing::edge_slots(num_pages);
  std::vector<bf16> k = stress_keys(rng, int32_t(slot.size()));
  for (bool checked : {true, false}) {
    ScopedCheckedMode mode(checked);
    expect_gpu_matches_ref(k, slot, num_pages, poisoned_pool(rng, num_pages));
  }
}

TEST(IndexerWriteCuda, ZeroTokensIsNoOp) {
  DSA_SKIP_WITHOUT_GPU();
  IndexerWriteParams p;
  p.num_tokens = 0;  // null pointers are legal when T = 0
  EXPECT_TRUE(indexer_write_cuda(p).ok());
}

TEST(IndexerWriteCuda, AllPaddedRowsWriteNothing) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const int32_t num_pages = 3;
  std::vector<uint8_t> initial = poisoned_pool(rng, num_pages);
  PoolWrite gpu = run_gpu(stress_keys(rng, 64), std::vector<int32_t>(64, -1), num_pages, initial);
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.to_string();
  EXPECT_EQ(first_diff(gpu.bytes, initial), "");
}

// Checked mode: each out-of-contract slot, and each non-finite key, is OutOfRange from the device
// error word (the reference agrees), and the word is cleared for the next call.
TEST(IndexerWriteCuda, CheckedModeErrorWord) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  Rng rng(testing::test_seed());
  const int32_t num_pages = 3, tokens = 40;
  std::vector<bf16> k = stress_keys(rng, tokens);
  std::vector<int32_t> good = testing::padded_consecutive_slots(tokens);
  const std::vector<uint8_t> initial = poisoned_pool(rng, num_pages);
  for (int32_t bad : {0, 5, kPageSize - 1, num_pages * kPageSize, INT32_MAX, -2, INT32_MIN}) {
    std::vector<int32_t> slot = good;
    slot[13] = bad;
    PoolWrite gpu = run_gpu(k, slot, num_pages, initial);
    EXPECT_EQ(gpu.status.code(), StatusCode::kOutOfRange) << bad << ": " << gpu.status.to_string();
    EXPECT_NE(gpu.status.message().find("indexer_write"), std::string::npos)
        << gpu.status.to_string();
    EXPECT_NE(gpu.status.message().find("index 13"), std::string::npos) << gpu.status.to_string();
    EXPECT_EQ(run_ref(k, slot, num_pages, initial).status.code(), StatusCode::kOutOfRange);
    expect_gpu_matches_ref(k, good, num_pages, initial);  // the word was cleared
  }
  for (uint32_t bits : {0x7F80u, 0xFF80u, 0x7FC0u, 0xFFC1u}) {
    std::vector<bf16> bad_k = k;
    bad_k[size_t(21) * kIndexHeadDim + 77] = bf16_from_bits(bits);
    PoolWrite gpu = run_gpu(bad_k, good, num_pages, initial);
    EXPECT_EQ(gpu.status.code(), StatusCode::kOutOfRange) << bits << ": " << gpu.status.to_string();
    EXPECT_NE(gpu.status.message().find("index 21"), std::string::npos) << gpu.status.to_string();
    EXPECT_EQ(run_ref(bad_k, good, num_pages, initial).status.code(), StatusCode::kOutOfRange);
  }
  expect_gpu_matches_ref(k, good, num_pages, initial);
}

// Unchecked mode neutralises: slots in page 0, past the pool, or negative other than -1 are
// skipped (never dereferenced), the others written exactly as the reference writes them.
TEST(IndexerWriteCuda, UncheckedSkipsOutOfPoolSlots) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  const int32_t num_pages = 5, tokens = 200;
  std::vector<bf16> k = stress_keys(rng, tokens);
  std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
  std::vector<int32_t> slot = testing::slots_with_out_of_pool(perm, tokens, num_pages);
  expect_gpu_matches_ref(k, slot, num_pages, poisoned_pool(rng, num_pages));
  auto word = cuda::take_device_error("test");
  EXPECT_TRUE(word.ok()) << "unchecked mode must not report: " << word.to_string();
}

TEST(IndexerWriteCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const int32_t tokens = 3000, num_pages = tokens / kPageSize + 2;
  std::vector<bf16> k = stress_keys(rng, tokens);
  std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
  std::vector<int32_t> slot(perm.begin(), perm.begin() + tokens);
  const std::vector<uint8_t> initial = poisoned_pool(rng, num_pages);
  PoolWrite a = run_gpu(k, slot, num_pages, initial);
  PoolWrite b = run_gpu(k, slot, num_pages, initial);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(first_diff(a.bytes, b.bytes), "");
}

// Host checks are the reference's (InvalidArgument, before any launch), plus the alignment the
// vector accesses need.
TEST(IndexerWriteCuda, HostRejects) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  std::vector<bf16> k = stress_keys(rng, 2);
  DeviceBuffer<bf16> dk = testing::dev(k, 1);
  DeviceBuffer<int32_t> dslot = testing::dev(std::vector<int32_t>{kPageSize, kPageSize + 1}, 1);
  DeviceBuffer<uint8_t> dpool = testing::dev(std::vector<uint8_t>(size_t(pool_bytes(2)), 0), 1);
  IndexerWriteParams p;
  p.k = dk.data();
  p.slot = dslot.data();
  p.num_tokens = 2;
  p.pool.data = dpool.data();
  p.pool.num_pages = 2;
  const auto misaligned_k = [&](IndexerWriteParams& q) {
    q.k = reinterpret_cast<const bf16*>(reinterpret_cast<const uint8_t*>(dk.data()) + 2);
    q.num_tokens = 1;
  };
  testing::expect_rejects(
      p, indexer_write_cuda,
      {{"pool.head_dim", [](auto& q) { q.pool.head_dim = 64; }, StatusCode::kInvalidArgument},
       {"pool.page_stride_bytes", [](auto& q) { q.pool.page_stride_bytes = 8192; },
        StatusCode::kInvalidArgument},
       {"num_tokens", [](auto& q) { q.num_tokens = -1; }, StatusCode::kInvalidArgument},
       {"k alignment", misaligned_k, StatusCode::kInvalidArgument}});
  EXPECT_TRUE(indexer_write_cuda(p).ok());
}

// The `dsa check` entry (an independent frexp-based formulation) run on the GPU kernel through an
// adapter that moves the host buffers to the device and back.
Status gpu_on_host_buffers(const IndexerWriteParams& p) {
  const size_t bytes = size_t(p.pool.num_pages) * size_t(p.pool.page_stride_bytes);
  return testing::write_on_host_buffers<&IndexerWriteParams::k>(p, kIndexHeadDim, bytes,
                                                                indexer_write_cuda);
}

TEST(IndexerWriteCuda, CheckEntryPasses) {
  DSA_SKIP_WITHOUT_GPU();
  for (int32_t tokens : {1, 150, 4096}) {
    Status st = check_indexer_write(gpu_on_host_buffers, tokens, testing::test_seed() + tokens);
    EXPECT_TRUE(st.ok()) << tokens << ": " << st.to_string();
  }
}

}  // namespace
}  // namespace dsa::kernels
