// The forward's staging (runtime/metadata_mirror.h) on the CPU backend: one copy at fixed
// addresses, the schedule rebuilt from the uploaded row_len, short inputs refused.
#include "dsa/runtime/metadata_mirror.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/page_pool.h"
#include "dsa/runtime/runtime_test_util.h"

namespace dsa::runtime {
namespace {

// Staging: one copy puts every array, the page table, tokens and hidden rows at addresses fixed
// when the mirror was allocated (inv. 18), with the values of the host build; the schedule is
// rebuilt by the backend from the uploaded row_len, equal to the host builder's.
TEST(MetadataMirror, OneCopyAtFixedAddressesAndTheScheduleRebuilt) {
  const MetadataConfig c = testing::small_config(3);
  PagedCacheManager pages(c.num_pages, c.num_rows, c.page_table_width);
  MetadataMirror mirror(kernels::Backend::kCpu, c, 8);
  ASSERT_TRUE(mirror.allocate(pages.page_table()).ok());
  const MetadataArrays before = mirror.arrays();
  const int32_t* tokens_at = mirror.tokens();
  for (int32_t round = 0; round < 3; ++round) {
    auto a = pages.open_request(), b = pages.open_request();
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE(pages.reserve(*a, 70 + round).ok() && pages.reserve(*b, 5).ok());
    ForwardBatch fb;
    fb.mode = ForwardMode::kTargetVerify;
    fb.batch_pad = 4;
    fb.requests = {{*a, 66 + round, 4, 0, -1}, {*b, 1, 4, 0, -1}};
    ForwardMetadata meta(c);
    ASSERT_TRUE(build_forward_metadata(fb, c, pages.page_table(), meta).ok());
    std::vector<int32_t> tokens(16);
    for (int32_t i = 0; i < 16; ++i) tokens[size_t(i)] = 100 * round + i;
    std::vector<bf16> hidden(16 * 8);
    for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float_to_bf16(float(i + round));
    ASSERT_TRUE(mirror.upload(meta, pages.page_table(), tokens, hidden).ok());
    const MetadataArrays& got = mirror.arrays();
    EXPECT_EQ(got.row_len, before.row_len);
    EXPECT_EQ(got.schedule, before.schedule);
    EXPECT_EQ(got.page_table.data, before.page_table.data);
    EXPECT_EQ(mirror.tokens(), tokens_at);
    EXPECT_EQ(std::memcmp(got.row_len, meta.row_len.data(), meta.row_len.size() * 4), 0);
    EXPECT_EQ(std::memcmp(got.write_slot, meta.write_slot.data(), meta.write_slot.size() * 4), 0);
    EXPECT_EQ(std::memcmp(got.sample_row, meta.sample_row.data(), meta.sample_row.size() * 4), 0);
    EXPECT_EQ(std::memcmp(got.page_table.data, pages.page_table().data,
                          size_t(c.num_rows) * c.page_table_width * 4),
              0);
    EXPECT_EQ(std::memcmp(mirror.tokens(), tokens.data(), tokens.size() * 4), 0);
    EXPECT_EQ(std::memcmp(mirror.hidden(), hidden.data(), hidden.size() * 2), 0);
    // The backend's rebuild over the uploaded row_len equals the host builder's schedule.
    std::memset(const_cast<int32_t*>(got.schedule), 0x7f, meta.schedule.size() * 4);
    ASSERT_TRUE(mirror.rebuild_schedule(kernels::cpu_ops(), meta).ok());
    EXPECT_EQ(std::memcmp(got.schedule, meta.schedule.data(), meta.schedule.size() * 4), 0);
    ASSERT_TRUE(pages.close_request(*a).ok() && pages.close_request(*b).ok());
  }
}

TEST(MetadataMirror, TooFewTokensOrHiddenRowsAreInvalidArgument) {
  const MetadataConfig c = testing::small_config(3);
  PagedCacheManager pages(c.num_pages, c.num_rows, c.page_table_width);
  MetadataMirror mirror(kernels::Backend::kCpu, c, 8);
  auto a = pages.open_request();
  ASSERT_TRUE(a.ok() && pages.reserve(*a, 10).ok());
  ForwardBatch fb;
  fb.mode = ForwardMode::kDecode;
  fb.batch_pad = 2;
  fb.requests = {{*a, 9, 1, 0, -1}};
  ForwardMetadata meta(c);
  ASSERT_TRUE(build_forward_metadata(fb, c, pages.page_table(), meta).ok());
  const std::vector<int32_t> one = {3};
  Status s = mirror.upload(meta, pages.page_table(), one);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  const std::vector<int32_t> two = {3, 0};
  const std::vector<bf16> short_hidden(8);  // one row of 8 for 2 rows
  s = mirror.upload(meta, pages.page_table(), two, short_hidden);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_TRUE(mirror.upload(meta, pages.page_table(), two).ok());
}

// The staging ring (header comment): uploads between two synchronisations take distinct slots,
// so a back-to-back chain of up to staging_slots() forwards never waits; one more, or host hidden
// rows while slots are pending, synchronises first. Every upload lands whole in the one backend
// block, with the hand-off's row list staged (the rest -1).
TEST(MetadataMirror, TheStagingRingWaitsOnlyWhenFull) {
  const MetadataConfig c = testing::small_config(3);
  PagedCacheManager pages(c.num_pages, c.num_rows, c.page_table_width);
  MetadataMirror mirror(kernels::Backend::kCpu, c, 8);
  ASSERT_EQ(mirror.staging_slots(), 4);  // d + 1 for d = 3
  auto a = pages.open_request();
  ASSERT_TRUE(a.ok() && pages.reserve(*a, 40).ok());
  ForwardBatch fb;
  fb.mode = ForwardMode::kDecode;
  fb.batch_pad = 2;
  fb.requests = {{*a, 9, 1, 0, -1}};
  ForwardMetadata meta(c);
  ASSERT_TRUE(build_forward_metadata(fb, c, pages.page_table(), meta).ok());
  const std::vector<int32_t> rows = {0};
  for (int32_t i = 0; i < 4; ++i) {
    const std::vector<int32_t> tokens = {10 + i, 0};
    ASSERT_TRUE(mirror.upload(meta, pages.page_table(), tokens, {}, rows).ok());
    EXPECT_EQ(mirror.tokens()[0], 10 + i);
    EXPECT_EQ(mirror.hidden_rows()[0], 0);
    EXPECT_EQ(mirror.hidden_rows()[1], -1);
  }
  EXPECT_EQ(mirror.ring_waits(), 0);
  const std::vector<int32_t> tokens = {7, 0};
  ASSERT_TRUE(mirror.upload(meta, pages.page_table(), tokens).ok());  // a fifth: the ring is full
  EXPECT_EQ(mirror.ring_waits(), 1);
  EXPECT_EQ(mirror.hidden_rows()[0], -1);
  const std::vector<bf16> hidden(16, float_to_bf16(1.f));
  ASSERT_TRUE(mirror.upload(meta, pages.page_table(), tokens, hidden).ok());  // slot 0 pending
  EXPECT_EQ(mirror.ring_waits(), 2);
  mirror.synchronised();
  ASSERT_TRUE(mirror.upload(meta, pages.page_table(), tokens, hidden).ok());
  EXPECT_EQ(mirror.ring_waits(), 2);
  EXPECT_EQ(std::memcmp(mirror.hidden(), hidden.data(), hidden.size() * 2), 0);
  const std::vector<int32_t> too_many = {0, 1, 2};
  EXPECT_EQ(mirror.upload(meta, pages.page_table(), tokens, {}, too_many).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsa::runtime
