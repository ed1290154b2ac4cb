#include "dsa/kernels/latent_write/latent_write.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/latent_write/latent_write_check.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels {
namespace {

using testing::LatentPoolBuffer;
using testing::Rng;

struct Case {
  std::vector<bf16> kv;
  std::vector<int32_t> slot;
  LatentPoolBuffer pool;
  Case(int32_t num_pages, LatentFormat f) : pool(num_pages, f) {}
  LatentWriteParams params() {
    LatentWriteParams p;
    p.kv = kv.data();
    p.slot = slot.data();
    p.num_tokens = static_cast<int32_t>(slot.size());
    p.pool = pool.pool();
    return p;
  }
  void poison() {
    auto& b = pool.bytes();
    int64_t page0 = int64_t{kPageSize} * latent_bytes_per_token(pool.pool().format);
    std::fill(b.begin() + page0, b.end(), uint8_t{0xA5});
  }
};

float read_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// Hand-computed FP8-656 row, one tile per rule of §2.1:
//  tile 0: amax 3 -> v = 3/448 = 1.71 * 2^-8 -> s = 2^-7; 3 -> 384 = 0x7C, -1.5 -> -192 = 0xF4.
//  tile 1: all zero -> amax floored at 1e-4 -> v = 2.23e-7 = 1.87 * 2^-23 -> s = 2^-22; codes 0.
//  tile 2: amax 448 -> v = 1 exactly (f == 1) -> s = 1; 448 = 0x7E, 0.5 = 0x30.
//  tile 3: amax 2^-10 -> v = 1.14 * 2^-19 -> s = 2^-18; 2^-10 -> 256 = 0x78, -2^-20 -> -0.25 =
//  0xA8. k_pe: 1.25 = bf16 0x3FA0 at bytes [528, 530), -2 = 0xC000 at [654, 656).
TEST(LatentWrite, HandComputedFp8Row) {
  Case c(3, LatentFormat::kFp8_656);
  c.poison();
  c.kv.assign(kQkDim, float_to_bf16(0.f));
  c.kv[0] = float_to_bf16(3.f);
  c.kv[1] = float_to_bf16(-1.5f);
  c.kv[256] = float_to_bf16(448.f);
  c.kv[257] = float_to_bf16(0.5f);
  c.kv[384] = float_to_bf16(std::ldexp(1.f, -10));
  c.kv[385] = float_to_bf16(-std::ldexp(1.f, -20));
  c.kv[512] = float_to_bf16(1.25f);
  c.kv[575] = float_to_bf16(-2.f);
  const int32_t s = 2 * kPageSize + 5;
  c.slot = {s};
  ASSERT_TRUE(latent_write_ref(c.params()).ok());
  const uint8_t* row = c.pool.bytes().data() + 133 * 656;  // token-major, 656 B per token
  std::vector<uint8_t> codes(512, 0);
  codes[0] = 0x7C, codes[1] = 0xF4, codes[256] = 0x7E, codes[257] = 0x30, codes[384] = 0x78,
  codes[385] = 0xA8;
  for (int i = 0; i < 512; ++i) EXPECT_EQ(row[i], codes[i]) << "code " << i;
  EXPECT_EQ(read_f32(row + 512), 0.0078125f);
  EXPECT_EQ(read_f32(row + 516), std::ldexp(1.f, -22));
  EXPECT_EQ(read_f32(row + 520), 1.f);
  EXPECT_EQ(read_f32(row + 524), std::ldexp(1.f, -18));
  EXPECT_EQ(row[528], 0xA0);
  EXPECT_EQ(row[529], 0x3F);
  for (int i = 530; i < 654; ++i) EXPECT_EQ(row[i], 0) << i;
  EXPECT_EQ(row[654], 0x00);
  EXPECT_EQ(row[655], 0xC0);
  EXPECT_EQ(row[-1], 0xA5) << "previous slot touched";
  EXPECT_EQ(row[656], 0xA5) << "next slot touched";
}

// bf16 row: 1152 bytes, little-endian halves: 1.0 = 0x3F80, -0.5 = 0xBF00.
TEST(LatentWrite, HandComputedBf16Row) {
  Case c(2, LatentFormat::kBf16);
  c.poison();
  for (int t = 0; t < kQkDim; ++t) c.kv.push_back(float_to_bf16(t == 0 ? 1.f : -0.5f));
  c.slot = {kPageSize + 63};
  ASSERT_TRUE(latent_write_ref(c.params()).ok());
  const uint8_t* row = c.pool.bytes().data() + 127 * 1152;
  EXPECT_EQ(row[0], 0x80);
  EXPECT_EQ(row[1], 0x3F);
  for (int t = 1; t < kQkDim; ++t) {
    ASSERT_EQ(row[2 * t], 0x00) << t;
    ASSERT_EQ(row[2 * t + 1], 0xBF) << t;
  }
  EXPECT_EQ(row[-1], 0xA5);
  EXPECT_EQ(c.pool.bytes().size(), size_t(128 * 1152)) << "the write ran past the pool";
}

// Dequantised c equals e4m3(x / s) * s with s recomputed independently (frexp), within the e4m3
// rounding of x; k_pe round-trips exactly.
TEST(LatentWrite, Fp8RoundTripWithinQuantisation) {
  Rng rng(testing::test_seed());
  const int32_t tokens = 40;
  Case c(2, LatentFormat::kFp8_656);
  std::vector<int32_t> slots = rng.permutation(kPageSize, 2 * kPageSize);
  for (int32_t t = 0; t < tokens; ++t) {
    auto row = rng.bf16_vector(kQkDim, rng.uniform(1e-3f, 100.f));
    c.kv.insert(c.kv.end(), row.begin(), row.end());
    c.slot.push_back(slots[t]);
  }
  ASSERT_TRUE(latent_write_ref(c.params()).ok());
  for (int32_t t = 0; t < tokens; ++t) {
    std::vector<float> got = c.pool.row(c.slot[t]);
    const bf16* x = c.kv.data() + t * kQkDim;
    for (int tile = 0; tile < 4; ++tile) {
      float amax = 1e-4f;
      for (int i = 0; i < 128; ++i)
        amax = std::max(amax, std::fabs(bf16_to_float(x[tile * 128 + i])));
      float s = std::exp2(std::ceil(std::log2(double{amax / 448.f})));
      for (int i = tile * 128; i < tile * 128 + 128; ++i) {
        float xi = bf16_to_float(x[i]);
        float want = e4m3_to_float(float_to_e4m3(xi / s)) * s;
        ASSERT_EQ(got[i], want) << "token " << t << " dim " << i;
        // e4m3 keeps 3 mantissa bits (relative error <= 2^-4); subnormals step by 2^-9 * s.
        ASSERT_LE(std::fabs(got[i] - xi), std::ldexp(std::fabs(xi), -4) + std::ldexp(s, -10));
      }
    }
    for (int i = kLatentDim; i < kQkDim; ++i) ASSERT_EQ(got[i], bf16_to_float(x[i])) << i;
  }
}

// Random scatter with padded rows into a poisoned pool, every byte compared (both formats).
TEST(LatentWrite, RandomScatterBytesBothFormats) {
  EXPECT_TRUE(
      check_latent_write(latent_write_ref, 150, LatentFormat::kFp8_656, testing::test_seed()).ok());
  EXPECT_TRUE(
      check_latent_write(latent_write_ref, 150, LatentFormat::kBf16, testing::test_seed() + 1)
          .ok());
}

// Every row stride the check can draw, in both formats (the fused projection's 2240 included).
TEST(LatentWrite, RandomScatterEveryRowStride) {
  for (uint64_t s = 0; s < 16; ++s) {
    for (LatentFormat f : {LatentFormat::kFp8_656, LatentFormat::kBf16}) {
      Status st = check_latent_write(latent_write_ref, 37, f, testing::test_seed() + 7 * s);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
  }
}

TEST(LatentWrite, ZeroTokensAndSkippedSlotsWriteNothing) {
  Rng rng(testing::test_seed());
  Case c(2, LatentFormat::kFp8_656);
  c.poison();
  auto before = c.pool.bytes();
  ASSERT_TRUE(latent_write_ref(c.params()).ok());
  c.kv = rng.bf16_vector(3 * kQkDim);
  c.slot = {-1, -1, -1};
  ASSERT_TRUE(latent_write_ref(c.params()).ok());
  EXPECT_TRUE(c.pool.bytes() == before);
}

class LatentWriteRejects : public ::testing::Test {
 protected:
  LatentWriteRejects() : c(3, LatentFormat::kFp8_656) {
    Rng rng(testing::test_seed());
    c.kv = rng.bf16_vector(2 * kQkDim);
    c.slot = {kPageSize, kPageSize + 1};
  }
  void expect(StatusCode code, const LatentWriteParams& p, const std::string& needle) {
    auto before = c.pool.bytes();
    Status s = latent_write_ref(p);
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
    EXPECT_TRUE(c.pool.bytes() == before) << "a rejected call must not write";
  }
  Case c;
};

TEST_F(LatentWriteRejects, NegativeTokenCount) {
  auto p = c.params();
  p.num_tokens = -3;
  expect(StatusCode::kInvalidArgument, p, "num_tokens = -3");
}
TEST_F(LatentWriteRejects, NullKv) {
  auto p = c.params();
  p.kv = nullptr;
  expect(StatusCode::kInvalidArgument, p, "kv is null");
}
TEST_F(LatentWriteRejects, NullSlot) {
  auto p = c.params();
  p.slot = nullptr;
  expect(StatusCode::kInvalidArgument, p, "slot is null");
}
TEST_F(LatentWriteRejects, NullPool) {
  auto p = c.params();
  p.pool.data = nullptr;
  expect(StatusCode::kInvalidArgument, p, "pool.data is null");
}
TEST_F(LatentWriteRejects, UnknownFormat) {
  auto p = c.params();
  p.pool.format = static_cast<LatentFormat>(7);
  expect(StatusCode::kInvalidArgument, p, "pool.format = 7");
}
TEST_F(LatentWriteRejects, WrongPageSize) {
  auto p = c.params();
  p.pool.page_size = 32;
  expect(StatusCode::kInvalidArgument, p, "pool.page_size = 32");
}
TEST_F(LatentWriteRejects, RowStrideBelowARow) {
  auto p = c.params();
  p.kv_stride = 575;
  expect(StatusCode::kInvalidArgument, p, "kv_stride = 575");
}
TEST_F(LatentWriteRejects, RowStrideNotWholeVectors) {
  auto p = c.params();
  p.kv_stride = 580;
  expect(StatusCode::kInvalidArgument, p, "kv_stride = 580");
}
TEST_F(LatentWriteRejects, NegativeRowStride) {
  auto p = c.params();
  p.kv_stride = -576;
  expect(StatusCode::kInvalidArgument, p, "kv_stride = -576");
}
TEST_F(LatentWriteRejects, NoPages) {
  auto p = c.params();
  p.pool.num_pages = 0;
  expect(StatusCode::kInvalidArgument, p, "pool.num_pages = 0");
}
TEST_F(LatentWriteRejects, SlotInReservedPage) {
  c.slot[1] = 63;
  expect(StatusCode::kOutOfRange, c.params(), "slot[1] = 63");
}
TEST_F(LatentWriteRejects, SlotBeyondPool) {
  c.slot[0] = 3 * kPageSize;
  expect(StatusCode::kOutOfRange, c.params(), "slot[0] = 192");
}
TEST_F(LatentWriteRejects, NegativeSlotOtherThanMinusOne) {
  c.slot[1] = -2;
  expect(StatusCode::kOutOfRange, c.params(), "slot[1] = -2");
}
TEST_F(LatentWriteRejects, RepeatedSlot) {
  c.slot[1] = c.slot[0];
  expect(StatusCode::kOutOfRange, c.params(), "slot[1] = 64: repeats");
}
TEST_F(LatentWriteRejects, NonFiniteLatent) {
  c.kv[kQkDim + 530] = float_to_bf16(NAN);
  expect(StatusCode::kOutOfRange, c.params(), "kv[1][530] = nan");
}

// Unchecked mode neutralises: out-of-pool slots are skipped, the valid one is written.
TEST(LatentWrite, UncheckedSkipsOutOfPoolSlots) {
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  Case c(2, LatentFormat::kBf16);
  c.kv = rng.bf16_vector(4 * kQkDim);
  c.slot = {5, 2 * kPageSize, -7, kPageSize + 9};
  auto before = c.pool.bytes();
  ASSERT_TRUE(latent_write_ref(c.params()).ok());
  EXPECT_EQ(std::memcmp(c.pool.bytes().data(), before.data(), kPageSize * 1152), 0)
      << "page 0 written";
  std::vector<float> row = c.pool.row(kPageSize + 9);
  for (int t = 0; t < kQkDim; ++t) ASSERT_EQ(row[t], bf16_to_float(c.kv[3 * kQkDim + t])) << t;
}

}  // namespace
}  // namespace dsa::kernels
