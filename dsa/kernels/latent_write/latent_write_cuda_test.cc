// GPU tests of latent_write_cuda against the CPU reference (SPEC.md §2.3, §2.4, §4.7; class E:
// every pool byte identical, including the poisoned bytes of slots that must not be written).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/latent_write/latent_write.h"
#include "dsa/kernels/latent_write/latent_write_check.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::Rng;

constexpr LatentFormat kFormats[] = {LatentFormat::kFp8_656, LatentFormat::kBf16};

template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  auto buf = host.empty() ? DeviceBuffer<T>::alloc(1)
                          : DeviceBuffer<T>::from_host(std::span<const T>(host));
  EXPECT_TRUE(buf.ok()) << buf.status().to_string();
  return std::move(buf).value();
}

int64_t row_bytes(LatentFormat f) { return latent_bytes_per_token(f); }

// A pool image whose pages other than page 0 hold random bytes.
std::vector<uint8_t> poisoned_pool(Rng& rng, int32_t num_pages, LatentFormat f) {
  std::vector<uint8_t> bytes(size_t(num_pages) * kPageSize * size_t(row_bytes(f)), 0);
  for (size_t i = size_t(kPageSize * row_bytes(f)); i < bytes.size(); ++i) {
    bytes[i] = uint8_t(rng.randint(0, 255));
  }
  return bytes;
}

bf16 bits_bf16(uint32_t b) { return bf16{uint16_t(b)}; }

// Rows whose 4 c tiles each take one stressing kind (ordinary magnitudes over many binades,
// random finite bit patterns, zeros, tiny blocks under the 1e-4 floor, amax exactly 448 2^k,
// huge values next to subnormals); k_pe is random finite bits (copied verbatim).
std::vector<bf16> stress_rows(Rng& rng, int32_t tokens) {
  std::vector<bf16> kv(size_t(tokens) * kQkDim);
  for (int32_t t = 0; t < tokens; ++t) {
    bf16* row = &kv[size_t(t) * kQkDim];
    for (int tile = 0; tile < kLatentDim / kLatentTile; ++tile) {
      bf16* x = row + tile * kLatentTile;
      const int kind = int(rng.randint(0, 5));
      const float p2 = std::exp2(float(rng.randint(-20, 20)));
      for (int d = 0; d < kLatentTile; ++d) {
        switch (kind) {
          case 0:
            x[d] = float_to_bf16(rng.normal(0.f, std::exp2(rng.uniform(-12.f, 12.f))));
            break;
          case 1: {
            uint32_t b = uint32_t(rng.randint(0, 0xFFFF));
            if ((b & 0x7F80u) == 0x7F80u) b &= 0xBFFFu;
            x[d] = bits_bf16(b);
            break;
          }
          case 2:
            x[d] = bits_bf16(rng.randint(0, 1) ? 0x8000u : 0u);
            break;
          case 3:
            x[d] = float_to_bf16(rng.normal(0.f, 1e-6f));
            break;
          case 4:
            x[d] = float_to_bf16(rng.uniform(-400.f, 400.f) * p2);
            break;
          default:
            x[d] = d % 2 ? bits_bf16(uint32_t(rng.randint(1, 0x7F)))
                         : float_to_bf16(rng.normal(0.f, 1e30f));
            break;
        }
      }
      if (kind == 4) x[rng.randint(0, kLatentTile - 1)] = float_to_bf16(-448.f * p2);
    }
    for (int d = kLatentDim; d < kQkDim; ++d) {
      uint32_t b = uint32_t(rng.randint(0, 0xFFFF));
      if ((b & 0x7F80u) == 0x7F80u) b &= 0xBFFFu;
      row[d] = bits_bf16(b);
    }
  }
  return kv;
}

struct Outcome {
  Status status;
  std::vector<uint8_t> bytes;
};

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

Outcome run_ref(const std::vector<bf16>& kv, const std::vector<int32_t>& slot, int32_t num_pages,
                LatentFormat f, std::vector<uint8_t> bytes) {
  Status st = latent_write_ref(
      params(kv.data(), slot.data(), int32_t(slot.size()), bytes.data(), num_pages, f));
  return {st, std::move(bytes)};
}

Outcome run_gpu(const std::vector<bf16>& kv, const std::vector<int32_t>& slot, int32_t num_pages,
                LatentFormat f, const std::vector<uint8_t>& bytes) {
  DeviceBuffer<bf16> dkv = to_device(kv);
  DeviceBuffer<int32_t> dslot = to_device(slot);
  DeviceBuffer<uint8_t> dpool = to_device(bytes);
  Status st = latent_write_cuda(
      params(dkv.data(), dslot.data(), int32_t(slot.size()), dpool.data(), num_pages, f));
  auto out = dpool.download();
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return {st, std::move(out).value()};
}

std::string first_diff(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                       LatentFormat f) {
  if (got.size() != want.size()) return "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return "slot " + std::to_string(int64_t(i) / row_bytes(f)) + " byte " +
             std::to_string(int64_t(i) % row_bytes(f)) + ": got " + std::to_string(got[i]) +
             " want " + std::to_string(want[i]);
    }
  }
  return "";
}

void expect_gpu_matches_ref(const std::vector<bf16>& kv, const std::vector<int32_t>& slot,
                            int32_t num_pages, LatentFormat f,
                            const std::vector<uint8_t>& initial) {
  Outcome ref = run_ref(kv, slot, num_pages, f, initial);
  Outcome gpu = run_gpu(kv, slot, num_pages, f, initial);
  ASSERT_TRUE(ref.status.ok()) << ref.status.to_string();
  ASSERT_TRUE(gpu.status.ok()) << gpu.status.to_string();
  EXPECT_EQ(first_diff(gpu.bytes, ref.bytes, f), "")
      << "T = " << slot.size() << (f == LatentFormat::kBf16 ? " bf16" : " FP8-656");
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
  Outcome gpu = run_gpu(kv, {s}, 3, LatentFormat::kFp8_656,
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
  std::vector<int32_t> slot = {kPageSize, num_pages * kPageSize - 1};
  for (int32_t o = 1; o < kPageSize - 1; ++o) slot.push_back(2 * kPageSize + o);
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
    Outcome gpu = run_gpu(stress_rows(rng, 40), std::vector<int32_t>(40, -1), 3, f, initial);
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
  std::vector<int32_t> good(static_cast<size_t>(tokens));
  for (int32_t t = 0; t < tokens; ++t) good[size_t(t)] = t % 5 == 0 ? -1 : kPageSize + t;
  for (LatentFormat f : kFormats) {
    const std::vector<uint8_t> initial = poisoned_pool(rng, num_pages, f);
    for (int32_t bad : {0, kPageSize - 1, num_pages * kPageSize, INT32_MAX, -2, INT32_MIN}) {
      std::vector<int32_t> slot = good;
      slot[13] = bad;
      Outcome gpu = run_gpu(kv, slot, num_pages, f, initial);
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
        bad_kv[size_t(21) * kQkDim + size_t(dim)] = bits_bf16(bits);
        Outcome gpu = run_gpu(bad_kv, good, num_pages, f, initial);
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
  const int32_t bad[] = {
      0,  7,   kPageSize - 1, num_pages * kPageSize, num_pages * kPageSize + 64, INT32_MAX,
      -2, -64, INT32_MIN};
  std::vector<int32_t> slot(static_cast<size_t>(tokens));
  for (int32_t t = 0; t < tokens; ++t) {
    slot[size_t(t)] = t % 4 == 1 ? bad[t % 9] : (t % 4 == 2 ? -1 : perm[size_t(t)]);
  }
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
    Outcome a = run_gpu(kv, slot, num_pages, f, initial);
    Outcome b = run_gpu(kv, slot, num_pages, f, initial);
    ASSERT_TRUE(a.status.ok() && b.status.ok());
    EXPECT_EQ(first_diff(a.bytes, b.bytes, f), "");
  }
}

TEST(LatentWriteCuda, HostRejects) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  DeviceBuffer<bf16> dkv = to_device(stress_rows(rng, 2));
  DeviceBuffer<int32_t> dslot = to_device(std::vector<int32_t>{kPageSize, kPageSize + 1});
  DeviceBuffer<uint8_t> dpool = to_device(std::vector<uint8_t>(size_t(2 * kPageSize * 1152), 0));
  LatentWriteParams p = params(dkv.data(), dslot.data(), 2, dpool.data(), 2, LatentFormat::kBf16);
  auto q = p;
  q.pool.format = static_cast<LatentFormat>(7);
  EXPECT_EQ(latent_write_cuda(q).code(), StatusCode::kInvalidArgument);
  q = p;
  q.pool.page_size = 32;
  EXPECT_EQ(latent_write_cuda(q).code(), StatusCode::kInvalidArgument);
  q = p;
  q.slot = nullptr;
  EXPECT_EQ(latent_write_cuda(q).code(), StatusCode::kInvalidArgument);
  q = p;
  q.kv = dkv.data() + 1;  // 2-byte offset
  q.num_tokens = 1;
  EXPECT_EQ(latent_write_cuda(q).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(latent_write_cuda(p).ok());
}

// The `dsa check` entry (an independently written expectation) run on the GPU kernel through an
// adapter that moves the host buffers to the device and back.
Status gpu_on_host_buffers(const LatentWriteParams& p) {
  const size_t tokens = size_t(std::max(p.num_tokens, 0));
  DeviceBuffer<bf16> dkv = to_device(std::vector<bf16>(p.kv, p.kv + tokens * kQkDim));
  DeviceBuffer<int32_t> dslot = to_device(std::vector<int32_t>(p.slot, p.slot + tokens));
  const size_t bytes =
      size_t(p.pool.num_pages) * kPageSize * size_t(latent_bytes_per_token(p.pool.format));
  DeviceBuffer<uint8_t> dpool = to_device(std::vector<uint8_t>(p.pool.data, p.pool.data + bytes));
  LatentWriteParams q = p;
  q.kv = dkv.data();
  q.slot = dslot.data();
  q.pool.data = dpool.data();
  DSA_RETURN_IF_ERROR(latent_write_cuda(q));
  DSA_ASSIGN_OR_RETURN(std::vector<uint8_t> out, dpool.download());
  std::copy(out.begin(), out.begin() + int64_t(bytes), p.pool.data);
  return ok_status();
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
