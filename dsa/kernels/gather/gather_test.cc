#include "dsa/kernels/gather/gather.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/kernels/gather/gather_check.h"
#include "dsa/testing/pools.h"

namespace dsa::kernels {
namespace {

using testing::IndexerPoolBuffer;
using testing::LatentPoolBuffer;
using testing::PageTableBuffer;
using testing::Rng;

constexpr uint8_t kSentinelByte = 0xEE;

// Three requests over a 5-page pool: request 0 has 2 positions (row 1 = [2]), request 1 is empty
// (paged-path), request 2 has 66 positions (row 2 = [3, 1]) crossing a page boundary.
struct Case {
  IndexerPoolBuffer ipool{5};
  LatentPoolBuffer bf16_pool{5, LatentFormat::kBf16};
  LatentPoolBuffer fp8_pool{5, LatentFormat::kFp8_656};
  PageTableBuffer table{3, 2, 5};
  std::vector<int32_t> req_slot{1, 0, 2}, cu_kv{0, 2, 2, 68};
  std::vector<uint8_t> k8 = std::vector<uint8_t>(80 * 128, kSentinelByte);
  std::vector<float> kscale = std::vector<float>(80, -1.f);
  std::vector<bf16> kv = std::vector<bf16>(80 * kQkDim, bf16{0xEEEE});
  Case() {
    Rng rng(testing::test_seed());
    ipool.fill_random(rng);
    bf16_pool.fill_random(rng);
    fp8_pool.fill_random(rng);
    table.at(1, 0) = 2;
    table.at(2, 0) = 3;
    table.at(2, 1) = 1;
  }
  IndexerGatherParams indexer() {
    return {req_slot.data(),
            cu_kv.data(),
            table.table(),
            ipool.pool(),
            3,
            k8.data(),
            kscale.data(),
            80};
  }
  LatentGatherParams latent(LatentFormat f) {
    return {req_slot.data(),
            cu_kv.data(),
            table.table(),
            f == LatentFormat::kBf16 ? bf16_pool.pool() : fp8_pool.pool(),
            3,
            kv.data(),
            80};
  }
};

// Hand-computed slot mapping: output row -> slot.
//   0 -> 2*64+0 = 128, 1 -> 129 (request 0); request 1 adds nothing;
//   2 -> 3*64 = 192 (request 2 pos 0), 65 -> 255 (pos 63), 66 -> 1*64 = 64 (pos 64), 67 -> 65.
TEST(Gather, HandComputedIndexerRows) {
  Case c;
  ASSERT_TRUE(indexer_gather_ref(c.indexer()).ok());
  const std::pair<int, int> expected[] = {{0, 128},  {1, 129}, {2, 192},
                                          {65, 255}, {66, 64}, {67, 65}};
  for (auto [row, slot] : expected) {
    EXPECT_EQ(std::memcmp(&c.k8[size_t(row) * 128], c.ipool.values(slot), 128), 0) << row;
    EXPECT_EQ(c.kscale[size_t(row)], c.ipool.scale(slot)) << row;
  }
  for (int row = 68; row < 80; ++row) {
    EXPECT_EQ(c.k8[size_t(row) * 128], kSentinelByte) << "rows past S untouched";
    EXPECT_EQ(c.kscale[size_t(row)], -1.f);
  }
}

// Hand-computed FP8-656 dequantisation: code 0x38 (1.0) in tile 1 with scale 2^-3 -> bf16 0.125
// = 0x3E00; code 0xC4 (-3) in tile 3 with scale 2^4 -> -48 = 0xC240; k_pe copied verbatim.
TEST(Gather, HandComputedFp8LatentRow) {
  Case c;
  uint8_t* row = c.fp8_pool.bytes().data() + 129 * 656;  // request 0, position 1
  std::memset(row, 0, 656);
  row[128 + 5] = 0x38;
  row[384 + 7] = 0xC4;
  const float scales[4] = {1.f, 0.125f, 2.f, 16.f};
  std::memcpy(row + 512, scales, 16);
  const uint16_t pe = 0x4049;  // bf16 3.140625
  std::memcpy(row + 528 + 2 * 10, &pe, 2);
  ASSERT_TRUE(latent_gather_ref(c.latent(LatentFormat::kFp8_656)).ok());
  const bf16* out = &c.kv[1 * kQkDim];
  EXPECT_EQ(out[128 + 5].bits, 0x3E00);
  EXPECT_EQ(out[384 + 7].bits, 0xC240);
  EXPECT_EQ(out[512 + 10].bits, 0x4049);
  EXPECT_EQ(out[0].bits, 0);
  EXPECT_EQ(out[128 + 6].bits, 0);
}

TEST(Gather, Bf16LatentRowsAreVerbatim) {
  Case c;
  ASSERT_TRUE(latent_gather_ref(c.latent(LatentFormat::kBf16)).ok());
  const std::pair<int, int> expected[] = {{0, 128}, {2, 192}, {66, 64}, {67, 65}};
  for (auto [out, slot] : expected) {
    EXPECT_EQ(
        std::memcmp(&c.kv[size_t(out) * kQkDim], c.bf16_pool.bytes().data() + slot * 1152, 1152), 0)
        << out;
  }
  EXPECT_EQ(c.kv[68 * kQkDim].bits, 0xEEEE);
}

// Random shapes against the independent per-token lookup (all three gathers).
TEST(Gather, RandomMatchesPerTokenLookup) {
  const uint64_t seed = testing::test_seed();
  for (auto [batch, ctx] : {std::pair{1, 1}, {3, 64}, {5, 300}, {4, 1000}}) {
    Status st =
        check_gather(indexer_gather_ref, latent_gather_ref, batch, ctx, seed + uint64_t(batch));
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
}

// Only empty requests (and B_pad = 0): S = 0, nothing is written.
TEST(Gather, EmptyRequestsWriteNothing) {
  Case c;
  c.cu_kv = {0, 0, 0, 0};
  c.req_slot = {0, 0, 0};
  ASSERT_TRUE(indexer_gather_ref(c.indexer()).ok());
  ASSERT_TRUE(latent_gather_ref(c.latent(LatentFormat::kFp8_656)).ok());
  for (uint8_t v : c.k8) ASSERT_EQ(v, kSentinelByte);
  for (bf16 v : c.kv) ASSERT_EQ(v.bits, 0xEEEE);
  auto p = c.indexer();
  p.batch_pad = 0;
  ASSERT_TRUE(indexer_gather_ref(p).ok());
}

// Unchecked: a bad page id reads page 0 (zeros), a decreasing cu_kv gives an empty request, never
// an out-of-bounds access.
TEST(Gather, UncheckedNeutralises) {
  ScopedCheckedMode unchecked(false);
  Case c;
  c.table.at(2, 1) = 77;  // request 2's second page: out of pool
  ASSERT_TRUE(indexer_gather_ref(c.indexer()).ok());
  for (int row = 66; row < 68; ++row) {
    for (int t = 0; t < 128; ++t) ASSERT_EQ(c.k8[size_t(row) * 128 + t], 0) << row;
    ASSERT_EQ(c.kscale[size_t(row)], 0.f);
  }
  EXPECT_EQ(std::memcmp(&c.k8[2 * 128], c.ipool.values(192), 128), 0);
  Case d;
  d.cu_kv = {0, 5, 3, 6};  // request 1 decreasing: empty; request 2 fills [3, 6)
  ASSERT_TRUE(indexer_gather_ref(d.indexer()).ok());
  EXPECT_EQ(std::memcmp(&d.k8[3 * 128], d.ipool.values(192), 128), 0);
  EXPECT_EQ(d.k8[6 * 128], kSentinelByte);
}

// ---- Rejections -----------------------------------------------------------------------------

template <class P>
void expect_reject(Case& c, Status (*op)(const P&), const P& p, StatusCode code,
                   const std::string& needle) {
  Status st = op(p);
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
  for (uint8_t v : c.k8) ASSERT_EQ(v, kSentinelByte) << "a rejected call must not write";
  for (bf16 v : c.kv) ASSERT_EQ(v.bits, 0xEEEE) << "a rejected call must not write";
}

TEST(GatherRejects, MoreRowsThanCapacity) {
  Case c;
  auto p = c.indexer();
  p.capacity = 67;
  expect_reject(c, indexer_gather_ref, p, StatusCode::kResourceExhausted,
                "indexer_gather: cu_kv[3] = 68 gathered rows: exceeds capacity 67");
  ScopedCheckedMode unchecked(false);
  auto l = c.latent(LatentFormat::kBf16);
  l.capacity = 10;
  expect_reject(c, latent_gather_ref, l, StatusCode::kResourceExhausted, "exceeds capacity 10");
}
TEST(GatherRejects, DecreasingCuKv) {
  Case c;
  c.cu_kv = {0, 5, 3, 6};
  expect_reject(c, indexer_gather_ref, c.indexer(), StatusCode::kOutOfRange,
                "cu_kv[2] = 3: must be >= cu_kv[1] = 5");
}
TEST(GatherRejects, CuKvNotStartingAtZero) {
  Case c;
  c.cu_kv = {1, 2, 2, 68};
  expect_reject(c, latent_gather_ref, c.latent(LatentFormat::kBf16), StatusCode::kOutOfRange,
                "latent_gather: cu_kv[0] = 1: must be 0");
}
TEST(GatherRejects, ReservedPageRead) {
  Case c;
  c.table.at(2, 1) = 0;
  expect_reject(c, indexer_gather_ref, c.indexer(), StatusCode::kOutOfRange,
                "page_table[2][1] = 0 (request 2)");
}
TEST(GatherRejects, PageBeyondPool) {
  Case c;
  c.table.at(1, 0) = 5;
  expect_reject(c, latent_gather_ref, c.latent(LatentFormat::kFp8_656), StatusCode::kOutOfRange,
                "page_table[1][0] = 5 (request 0)");
}
TEST(GatherRejects, RequestSlotBeyondTable) {
  Case c;
  c.req_slot[2] = 3;
  expect_reject(c, indexer_gather_ref, c.indexer(), StatusCode::kOutOfRange,
                "req_slot[2] = 3: must be in [0, R_slots = 3)");
}
TEST(GatherRejects, RequestLongerThanPageTable) {
  Case c;
  c.cu_kv = {0, 2, 2, 131};  // W P = 128
  c.k8.resize(200 * 128, kSentinelByte);
  c.kscale.resize(200, -1.f);
  auto p = c.indexer();
  p.capacity = 200;
  expect_reject(c, indexer_gather_ref, p, StatusCode::kOutOfRange,
                "request 2 gathers 129 rows: must be <= W*P = 128");
}
TEST(GatherRejects, HostParams) {
  Case c;
  auto p = c.indexer();
  p.pool.head_dim = 64;
  expect_reject(c, indexer_gather_ref, p, StatusCode::kInvalidArgument, "pool.head_dim = 64");
  p = c.indexer();
  p.pool.page_stride_bytes = 1;
  expect_reject(c, indexer_gather_ref, p, StatusCode::kInvalidArgument,
                "pool.page_stride_bytes = 1");
  p = c.indexer();
  p.batch_pad = -2;
  expect_reject(c, indexer_gather_ref, p, StatusCode::kInvalidArgument, "batch_pad = -2");
  p = c.indexer();
  p.kscale = nullptr;
  expect_reject(c, indexer_gather_ref, p, StatusCode::kInvalidArgument, "kscale is null");
  p = c.indexer();
  p.page_table.num_pages = 4;
  expect_reject(c, indexer_gather_ref, p, StatusCode::kInvalidArgument,
                "page_table.num_pages = 4: must be 5");
  auto l = c.latent(LatentFormat::kBf16);
  l.pool.page_size = 16;
  expect_reject(c, latent_gather_ref, l, StatusCode::kInvalidArgument, "pool.page_size = 16");
  l = c.latent(LatentFormat::kBf16);
  l.pool.format = static_cast<LatentFormat>(7);
  expect_reject(c, latent_gather_ref, l, StatusCode::kInvalidArgument, "pool.format = 7");
  l = c.latent(LatentFormat::kBf16);
  l.capacity = -1;
  expect_reject(c, latent_gather_ref, l, StatusCode::kInvalidArgument, "capacity = -1");
  l = c.latent(LatentFormat::kBf16);
  l.cu_kv = nullptr;
  expect_reject(c, latent_gather_ref, l, StatusCode::kInvalidArgument, "cu_kv is null");
}

}  // namespace
}  // namespace dsa::kernels
