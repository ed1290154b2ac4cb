// GPU tests of latent_write_cuda against the CPU reference (SPEC.md §2.3, §2.4, §4.7; class E:
// every pool byte identical, including the poisoned bytes of slots that must not be written).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/latent_write/latent_write.h"
#include "dsa/kernels/latent_write/latent_write_check.h"
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

constexpr LatentFormat kFormats[] = {LatentFormat::kFp8_656, LatentFormat::kBf16};

int64_t row_bytes(LatentFormat f) { return latent_bytes_per_token(f); }

// A pool image whose pages other than page 0 hold random bytes.
std::vector<uint8_t> poisoned_pool(Rng& rng, int32_t num_pages, LatentFormat f) {
  return testing::random_pool_image(rng, size_t(num_pages) * kPageSize * size_t(row_bytes(f)),
                                    size_t(kPageSize * row_bytes(f)));
}

// Rows whose 4 c tiles each take one stressing kind (ordinary magnitudes over many binades,
// random finite bit patterns, zeros, tiny blocks under the 1e-4 floor, amax exactly 448 2^k,
// huge values next to subnormals); k_pe is random finite bits (copied verbatim).
std::vector<bf16> stress_rows(Rng& rng, int32_t tokens) {
  std::vector<bf16> kv(size_t(tokens) * kQkDim);
  for (int32_t t = 0; t < tokens; ++t) {
    bf16* row = &kv[size_t(t) * kQkDim];
    for (int tile = 0; tile < kLatentDim / kLatentTile; ++tile) {
      bf16* x = row + tile * kLatentTile;
      const int kind = int(rng.randint(0, testing::kStressKinds - 1));
      const float p2 = std::exp2(float(rng.randint(-20, 20)));
      testing::fill_stress_block(rng, x, kLatentTile, kind, p2);
      if (kind == 4) x[rng.randint(0, kLatentTile - 1)] = float_to_bf16(-448.f * p2);
    }
    for (int d = kLatentDim; d < kQkDim; ++d) row[d] = testing::random_finite_bf16(rng);
  }
  return kv;
}

LatentWriteParams params(const bf16* kv, const int32_t* slot, int32_t tokens, uint8_t* pool,
                         int32_t num_pages, LatentFormat f) {
  LatentWriteParams p;
  p.kv = kv;
  p.slot = slot;
  p.num_tokens = tokens;
  p.pool.data = pool;
  p.pool.format = f;
  p.pool.num_pages = num_pages;
  return p;
}

PoolWrite run_ref(const std::vector<bf16>& kv, const std::vector<int32_t>& slot, int32_t num_pages,
                  LatentFormat f, std::vector<uint8_t> bytes) {
  return testing::write_on_host<&LatentWriteParams::kv>(
      latent_write_ref, params(nullptr, nullptr, 0, nullptr, num_pages, f), kv, slot,
      std::move(bytes));
}

PoolWrite run_gpu(const std::vector<bf16>& kv, const std::vector<int32_t>& slot, int32_t num_pages,
                  LatentFormat f, const std::vector<uint8_t>& bytes) {
  return testing::write_on_device<&LatentWriteParams::kv>(
      latent_write_cuda, params(nullptr, nullptr, 0, nullptr, num_pages, f), kv, slot, bytes);
}

std::string first_diff(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                       LatentFormat f) {
  return testing::first_difference(got, want, [&](size_t i) {
    return "slot " + std::to_string(int64_t(i) / row_bytes(f)) + " byte " +
           std::to_string(int64_t(i) % row_bytes(f)) + ": got " + std::to_string(got[i]) +
           " want " + std::to_string(want[i]);
  });
}

void expect_gpu_matches_ref(const std::vector<bf16>& kv, const std::vector<int32_t>& slot,
                            int32_t num_pages, LatentFormat f,
                            const std::vector<uint8_t>& initial) {
  const PoolWrite ref = run_ref(kv, slot, num_pages, f, initial);
  testing::expect_same_write(
      run_gpu(kv, slot, num_pages, f, initial), ref,
      [f](const auto& got, const auto& want) { return first_diff(got, want, f); },
      "T = " + std::to_string(slot.size()) + (f == LatentFormat::kBf16 ? " bf16" : " FP8-656"));
}

// Random rows to shuffled distinct slots, every 5th token a padded row, both formats.
TEST(LatentWriteCuda, RandomScatterBitExact) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  for (LatentFormat f : kFormats) {
    for (int32_t tokens : {1, 9, 150, 1024, 4096}) {
      const int32_t num_pages = tokens / kPageSize + 3;
      std::vector<bf16> kv = stress_rows(rng, tokens);
      std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
      std::vector<int32_t> slot(static_cast<size_t>(tokens));
      for (int32_t t = 0; t < tokens; ++t) slot[size_t(t)] = t % 5 == 4 ? -1 : perm[size_t(t)];
      expect_gpu_matches_ref(kv, slot, num_pages, f, poisoned_pool(rng, num_pages, f));
    }
  }
}

// The hand-computed FP8-656 row of the reference test (one tile per rule of §2.1).
TEST(LatentWriteCuda, HandComputedFp8Row) {
  DSA_SKIP_WITHOUT_GPU();
  std::vector<bf16> kv(kQkDim, float_to_bf16(0.f));
  kv[0] = float_to_bf16(3.f);
  kv[1] = float_to_bf16(-1.5f);
  kv[256] = float_to_bf16(448.f);
  kv[257] = float_to_bf16(0.5f);
  kv[384] = float_to_bf16(std::ldexp(1.f, -10));
  kv[385] = float_to_bf16(-std::ldexp(1.f, -20));
  kv[512] = float_to_bf16(1.25f);
  kv[575] = float_to_bf16(-2.f);
  const int32_t s = 2 * kPageSize + 5;
  PoolWrite gpu = run_gpu(kv, {s}, 3, LatentFormat::kFp8_656,
                          std::vector<uint8_t>(size_t(3 * kPageSize * 656), 0xA5));
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.to_string();
  const uint8_t* row = gpu.bytes.data() + int64_t{s} * 656;
  EXPECT_EQ(row[0], 0x7C);
  EXPECT_EQ(row[1], 0xF4);
  EXPECT_EQ(row[256], 0x7E);
  EXPECT_EQ(row[257], 0x30);
  EXPECT_EQ(row[384], 0x78);
  EXPECT_EQ(row[385], 0xA8);
  float scales[4];
  std::memcpy(scales, row + 512, 16);
  EXPECT_EQ(scales[0], 0.0078125f);
  EXPECT_EQ(scales[1], std::ldexp(1.f, -22));
  EXPECT_EQ(scales[2], 1.f);
  EXPECT_EQ(scales[3], std::ldexp(1.f, -18));
  EXPECT_EQ(row[528], 0xA0);
  EXPECT_EQ(row[529], 0x3F);
  EXPECT_EQ(row[655], 0xC0);
  EXPECT_EQ(row[-1], 0xA5);
  EXPECT_EQ(row[656], 0xA5);
}

// First and last legal slots and every offset of one page, both modes and formats.
TEST(LatentWriteCuda, EdgeSlotsBothModes) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const int32_t num_pages = 4;
  std::vector<int32_t> slot = testing::edge_slots(num_pages);
  std::vector<bf16> kv = stress_rows(rng, int32_t(slot.size()));
  for (LatentFormat f : kFormats) {
    for (bool checked : {true, false}) {
      ScopedCheckedMode mode(checked);
      expect_gpu_matches_ref(kv, slot, num_pages, f, poisoned_pool(rng, num_pages, f));
    }
  }
}

TEST(LatentWriteCuda, ZeroTokensAndPaddedRowsWriteNothing) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  LatentWriteParams p;
  p.num_tokens = 0;
  EXPECT_TRUE(latent_write_cuda(p).ok());
  for (LatentFormat f : kFormats) {
    const std::vector<uint8_t> initial = poisoned_pool(rng, 3, f);
    PoolWrite gpu = run_gpu(stress_rows(rng, 40), std::vector<int32_t>(40, -1), 3, f, initial);
    ASSERT_TRUE(gpu.status.ok()) << gpu.status.to_string();
    EXPECT_EQ(first_diff(gpu.bytes, initial, f), "");
  }
}

// Checked mode: out-of-contract slots and non-finite values (in c and in k_pe) are OutOfRange
// through the device error word, agreeing with the reference; the word is cleared afterwards.
TEST(LatentWriteCuda, CheckedModeErrorWord) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  Rng rng(testing::test_seed());
  const int32_t num_pages = 3, tokens = 40;
  std::vector<bf16> kv = stress_rows(rng, tokens);
  std::vector<int32_t> good = testing::padded_consecutive_slots(tokens);
  for (LatentFormat f : kFormats) {
    const std::vector<uint8_t> initial = poisoned_pool(rng, num_pages, f);
    for (int32_t bad : {0, kPageSize - 1, num_pages * kPageSize, INT32_MAX, -2, INT32_MIN}) {
      std::vector<int32_t> slot = good;
      slot[13] = bad;
      PoolWrite gpu = run_gpu(kv, slot, num_pages, f, initial);
      EXPECT_EQ(gpu.status.code(), StatusCode::kOutOfRange)
          << bad << ": " << gpu.status.to_string();
      EXPECT_NE(gpu.status.message().find("latent_write"), std::string::npos)
          << gpu.status.to_string();
      EXPECT_NE(gpu.status.message().find("index 13"), std::string::npos) << gpu.status.to_string();
      EXPECT_EQ(run_ref(kv, slot, num_pages, f, initial).status.code(), StatusCode::kOutOfRange);
    }
    for (int dim : {0, 130, 300, 511, 530, 575}) {
      for (uint32_t bits : {0x7F80u, 0xFFC1u}) {
        std::vector<bf16> bad_kv = kv;
        bad_kv[size_t(21) * kQkDim + size_t(dim)] = bf16_from_bits(bits);
        PoolWrite gpu = run_gpu(bad_kv, good, num_pages, f, initial);
        EXPECT_EQ(gpu.status.code(), StatusCode::kOutOfRange)
            << dim << ": " << gpu.status.to_string();
        EXPECT_NE(gpu.status.message().find("index 21"), std::string::npos)
            << gpu.status.to_string();
        EXPECT_EQ(run_ref(bad_kv, good, num_pages, f, initial).status.code(),
                  StatusCode::kOutOfRange);
      }
    }
    expect_gpu_matches_ref(kv, good, num_pages, f, initial);
  }
}

// Unchecked mode: out-of-pool slots are skipped, never dereferenced; nothing is reported.
TEST(LatentWriteCuda, UncheckedSkipsOutOfPoolSlots) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  const int32_t num_pages = 5, tokens = 200;
  std::vector<bf16> kv = stress_rows(rng, tokens);
  std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
  std::vector<int32_t> slot = testing::slots_with_out_of_pool(perm, tokens, num_pages);
  for (LatentFormat f : kFormats) {
    expect_gpu_matches_ref(kv, slot, num_pages, f, poisoned_pool(rng, num_pages, f));
  }
  Status word = cuda::take_device_error("test");
  EXPECT_TRUE(word.ok()) << "unchecked mode must not report: " << word.to_string();
}

TEST(LatentWriteCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  const int32_t tokens = 2000, num_pages = tokens / kPageSize + 2;
  std::vector<bf16> kv = stress_rows(rng, tokens);
  std::vector<int32_t> perm = rng.permutation(kPageSize, num_pages * kPageSize);
  std::vector<int32_t> slot(perm.begin(), perm.begin() + tokens);
  for (LatentFormat f : kFormats) {
    const std::vector<uint8_t> initial = poisoned_pool(rng, num_pages, f);
    PoolWrite a = run_gpu(kv, slot, num_pages, f, initial);
    PoolWrite b = run_gpu(kv, slot, num_pages, f, initial);
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    EXPECT_EQ(first_diff(a.bytes, b.bytes, f), "");
  }
}

TEST(LatentWriteCuda, HostRejects) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  DeviceBuffer<bf16> dkv = testing::dev(stress_rows(rng, 2), 1);
  DeviceBuffer<int32_t> dslot = testing::dev(std::vector<int32_t>{kPageSize, kPageSize + 1}, 1);
  DeviceBuffer<uint8_t> dpool =
      testing::dev(std::vector<uint8_t>(size_t(2 * kPageSize * 1152), 0), 1);
  LatentWriteParams p = params(dkv.data(), dslot.data(), 2, dpool.data(), 2, LatentFormat::kBf16);
  const auto misaligned_kv = [&](LatentWriteParams& q) {
    q.kv = dkv.data() + 1;  // 2-byte offset
    q.num_tokens = 1;
  };
  testing::expect_rejects(
      p, latent_write_cuda,
      {{"pool.format", [](auto& q) { q.pool.format = static_cast<LatentFormat>(7); },
        StatusCode::kInvalidArgument},
       {"pool.page_size", [](auto& q) { q.pool.page_size = 32; }, StatusCode::kInvalidArgument},
       {"slot", [](auto& q) { q.slot = nullptr; }, StatusCode::kInvalidArgument},
       {"kv alignment", misaligned_kv, StatusCode::kInvalidArgument}});
  EXPECT_TRUE(latent_write_cuda(p).ok());
}

// The `dsa check` entry (an independently written expectation) run on the GPU kernel through an
// adapter that moves the host buffers to the device and back.
Status gpu_on_host_buffers(const LatentWriteParams& p) {
  const size_t bytes =
      size_t(p.pool.num_pages) * kPageSize * size_t(latent_bytes_per_token(p.pool.format));
  return testing::write_on_host_buffers<&LatentWriteParams::kv>(p, size_t(kv_row_stride(p)), bytes,
                                                                latent_write_cuda);
}

TEST(LatentWriteCuda, CheckEntryPasses) {
  DSA_SKIP_WITHOUT_GPU();
  for (LatentFormat f : kFormats) {
    for (int32_t tokens : {1, 150, 2048}) {
      Status st = check_latent_write(gpu_on_host_buffers, tokens, f, testing::test_seed() + tokens);
      EXPECT_TRUE(st.ok()) << tokens << ": " << st.to_string();
    }
  }
}

}  // namespace
}  // namespace dsa::kernels
