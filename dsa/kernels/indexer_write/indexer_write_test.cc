#include "dsa/kernels/indexer_write/indexer_write.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels {
namespace {

using testing::IndexerPoolBuffer;
using testing::Rng;

struct Case {
  std::vector<bf16> k;
  std::vector<int32_t> slot;
  IndexerPoolBuffer pool;
  explicit Case(int32_t num_pages) : pool(num_pages) {}
  IndexerWriteParams params() {
    IndexerWriteParams p;
    p.k = k.data();
    p.slot = slot.data();
    p.num_tokens = static_cast<int32_t>(slot.size());
    p.pool = pool.pool();
    return p;
  }
};

// Hand-computed: key = [3, -1.5, 0, ..., 0]. amax 3 -> v = 3/448 = 0.0066964 = 1.714 * 2^-8,
// so e = -7, scale 2^-7 = 0.0078125; q = [3 * 128 = 384, -192, 0...]: codes 0x7C (1.5 * 2^8)
// and 0xF4 (-1.5 * 2^7).
TEST(IndexerWrite, HandComputedKey) {
  Case c(3);
  c.k.assign(kIndexHeadDim, float_to_bf16(0.f));
  c.k[0] = float_to_bf16(3.f);
  c.k[1] = float_to_bf16(-1.5f);
  c.slot = {2 * kPageSize + 5};
  ASSERT_TRUE(indexer_write_ref(c.params()).ok());
  const uint8_t* q = c.pool.values(2 * kPageSize + 5);
  EXPECT_EQ(q[0], 0x7C);
  EXPECT_EQ(q[1], 0xF4);
  for (int d = 2; d < kIndexHeadDim; ++d) EXPECT_EQ(q[d], 0) << d;
  EXPECT_EQ(c.pool.scale(2 * kPageSize + 5), 0.0078125f);
  // Byte layout of §2.2: values at page*8448 + o*128, scale at page*8448 + 8192 + 4*o.
  EXPECT_EQ(c.pool.bytes()[2 * 8448 + 5 * 128], 0x7C);
  float s;
  std::memcpy(&s, c.pool.bytes().data() + 2 * 8448 + 8192 + 4 * 5, 4);
  EXPECT_EQ(s, 0.0078125f);
}

// Random keys scattered to random distinct slots in shuffled pages; -1 slots write nothing, and
// every byte outside the written slots keeps its poison.
TEST(IndexerWrite, RandomScatterMatchesPerTokenQuantisation) {
  Rng rng(testing::test_seed());
  const int32_t num_pages = 9, tokens = 150;
  Case c(num_pages);
  c.pool.poison_pages();
  std::vector<uint8_t> before = c.pool.bytes();
  c.k = rng.bf16_vector(size_t(tokens) * kIndexHeadDim, 2.f);
  std::vector<int32_t> slots = rng.permutation(kPageSize, num_pages * kPageSize);
  for (int32_t t = 0; t < tokens; ++t) c.slot.push_back(t % 7 == 3 ? -1 : slots[t]);
  ASSERT_TRUE(indexer_write_ref(c.params()).ok());

  std::vector<uint8_t> expected = before;
  IndexerPool view = c.pool.pool();
  view.data = expected.data();
  for (int32_t t = 0; t < tokens; ++t) {
    if (c.slot[t] < 0) continue;
    // Independent formulation: amax, exponent by frexp, codes by float_to_e4m3.
    float amax = 1e-4f;
    for (int d = 0; d < kIndexHeadDim; ++d)
      amax = std::max(amax, std::fabs(bf16_to_float(c.k[t * kIndexHeadDim + d])));
    int exp2;
    float m = std::frexp(amax / 448.0f, &exp2);  // amax/448 = m * 2^exp2, m in [0.5, 1)
    int e = (m == 0.5f) ? exp2 - 1 : exp2;
    float scale = std::ldexp(1.0f, e);
    for (int d = 0; d < kIndexHeadDim; ++d) {
      float y = bf16_to_float(c.k[t * kIndexHeadDim + d]) / scale;
      expected[indexer_value_offset(view, c.slot[t]) + d] = float_to_e4m3(y).bits;
    }
    std::memcpy(expected.data() + indexer_scale_offset(view, c.slot[t]), &scale, 4);
  }
  EXPECT_TRUE(c.pool.bytes() == expected);
}

TEST(IndexerWrite, ZeroTokensIsNoOp) {
  Case c(2);
  c.pool.poison_pages();
  auto before = c.pool.bytes();
  ASSERT_TRUE(indexer_write_ref(c.params()).ok());
  EXPECT_TRUE(c.pool.bytes() == before);
}

TEST(IndexerWrite, AllSkippedSlotsWriteNothing) {
  Rng rng(testing::test_seed());
  Case c(2);
  c.k = rng.bf16_vector(4 * kIndexHeadDim);
  c.slot = {-1, -1, -1, -1};
  auto before = c.pool.bytes();
  ASSERT_TRUE(indexer_write_ref(c.params()).ok());
  EXPECT_TRUE(c.pool.bytes() == before);
}

class IndexerWriteRejects : public ::testing::Test {
 protected:
  IndexerWriteRejects() : c(3) {
    Rng rng(testing::test_seed());
    c.k = rng.bf16_vector(2 * kIndexHeadDim);
    c.slot = {kPageSize, kPageSize + 1};
  }
  void expect(StatusCode code, const IndexerWriteParams& p, const std::string& needle) {
    auto before = c.pool.bytes();
    Status s = indexer_write_ref(p);
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.to_string();
    EXPECT_TRUE(c.pool.bytes() == before) << "a rejected call must not write";
  }
  Case c;
};

TEST_F(IndexerWriteRejects, NegativeTokenCount) {
  auto p = c.params();
  p.num_tokens = -1;
  expect(StatusCode::kInvalidArgument, p, "num_tokens = -1");
}
TEST_F(IndexerWriteRejects, WrongHeadDim) {
  auto p = c.params();
  p.pool.head_dim = 64;
  expect(StatusCode::kInvalidArgument, p, "pool.head_dim = 64");
}
TEST_F(IndexerWriteRejects, WrongPageSize) {
  auto p = c.params();
  p.pool.page_size = 32;
  expect(StatusCode::kInvalidArgument, p, "pool.page_size = 32");
}
TEST_F(IndexerWriteRejects, WrongPageStride) {
  auto p = c.params();
  p.pool.page_stride_bytes = 8192;
  expect(StatusCode::kInvalidArgument, p, "pool.page_stride_bytes = 8192");
}
TEST_F(IndexerWriteRejects, NullKeys) {
  auto p = c.params();
  p.k = nullptr;
  expect(StatusCode::kInvalidArgument, p, "k is null");
}
TEST_F(IndexerWriteRejects, SlotInReservedPage) {
  c.slot[1] = 3;
  expect(StatusCode::kOutOfRange, c.params(), "slot[1] = 3");
}
TEST_F(IndexerWriteRejects, SlotBeyondPool) {
  c.slot[0] = 3 * kPageSize;
  expect(StatusCode::kOutOfRange, c.params(), "slot[0] = 192");
}
TEST_F(IndexerWriteRejects, NegativeSlotOtherThanMinusOne) {
  c.slot[0] = -4;
  expect(StatusCode::kOutOfRange, c.params(), "slot[0] = -4");
}
TEST_F(IndexerWriteRejects, RepeatedSlot) {
  c.slot[1] = c.slot[0];
  expect(StatusCode::kOutOfRange, c.params(), "repeats");
}
TEST_F(IndexerWriteRejects, NonFiniteKey) {
  c.k[kIndexHeadDim + 7] = float_to_bf16(INFINITY);
  expect(StatusCode::kOutOfRange, c.params(), "k[1][7] = inf");
}

// Unchecked mode neutralises: an out-of-pool slot is skipped, the valid one is written.
TEST(IndexerWrite, UncheckedSkipsOutOfPoolSlots) {
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  Case c(2);
  c.k = rng.bf16_vector(3 * kIndexHeadDim);
  c.slot = {5, 2 * kPageSize + 1, kPageSize + 9};
  auto before = c.pool.bytes();
  ASSERT_TRUE(indexer_write_ref(c.params()).ok());
  EXPECT_EQ(std::memcmp(c.pool.bytes().data(), before.data(), 8448), 0) << "page 0 written";
  EXPECT_GT(c.pool.scale(kPageSize + 9), 0.f);
}

}  // namespace
}  // namespace dsa::kernels
