// The forward's staging (runtime/metadata_mirror.h) on the CPU backend: one copy at fixed
// addresses of the part of each region the forward uses, the schedule rebuilt from the uploaded
// row_len, short inputs refused.
#include "dsa/runtime/metadata_mirror.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/page_pool.h"
#include "dsa/runtime/runtime_test_util.h"

namespace dsa::runtime {
namespace {

// The host build of a forward of `mode` over `requests`, padded to `batch_pad` (fails the test on
// a builder error).
ForwardMetadata built(const MetadataConfig& c, const PagedCacheManager& pages, ForwardMode mode,
                      int32_t batch_pad, std::vector<RequestInput> requests) {
  ForwardBatch fb;
  fb.mode = mode;
  fb.batch_pad = batch_pad;
  fb.requests = std::move(requests);
  ForwardMetadata meta(c);
  const Status s = build_forward_metadata(fb, c, pages.page_table(), meta);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return meta;
}

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
    const ForwardMetadata meta = built(c, pages, ForwardMode::kTargetVerify, 4,
                                       {{*a, 66 + round, 4, 0, -1}, {*b, 1, 4, 0, -1}});
    std::vector<int32_t> tokens(16);
    for (int32_t i = 0; i < 16; ++i) tokens[size_t(i)] = 100 * round + i;
    std::vector<bf16> hidden(16 * 8);
    for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float_to_bf16(float(i + round));
    ASSERT_TRUE(mirror.upload(meta, pages, tokens, hidden).ok());
    const MetadataArrays& got = mirror.arrays();
    EXPECT_EQ(got.row_len, before.row_len);
    EXPECT_EQ(got.schedule, before.schedule);
    EXPECT_EQ(got.page_table.data, before.page_table.data);
    EXPECT_EQ(mirror.tokens(), tokens_at);
    // The forward's rows and requests (what the builder wrote; the rest is not copied).
    const size_t rows = size_t(meta.header.rows_pad), reqs = size_t(meta.header.batch_pad);
    EXPECT_EQ(std::memcmp(got.row_len, meta.row_len.data(), rows * 4), 0);
    EXPECT_EQ(std::memcmp(got.write_slot, meta.write_slot.data(), rows * 4), 0);
    EXPECT_EQ(std::memcmp(got.sample_row, meta.sample_row.data(), rows * 4), 0);
    EXPECT_EQ(std::memcmp(got.req_kv_len, meta.req_kv_len.data(), reqs * 4), 0);
    EXPECT_EQ(std::memcmp(got.cu_q, meta.cu_q.data(), (reqs + 1) * 4), 0);
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

// A small forward after a large one copies only its own rows and requests: exactly the words of
// its used parts (12 row regions, 2 request regions and 2 prefix sums; no schedule, which the
// forward rebuilds, and no paged sub-batch outside EXTEND), where the block at capacity is far
// larger; past them the regions keep the large forward's values, which its launches never read.
TEST(MetadataMirror, OnlyTheUsedPartOfEachRegionIsCopied) {
  const MetadataConfig c = testing::small_config(3);
  PagedCacheManager pages(c.num_pages, c.num_rows, c.page_table_width);
  MetadataMirror mirror(kernels::Backend::kCpu, c, 8);
  auto a = pages.open_request(), b = pages.open_request();
  ASSERT_TRUE(a.ok() && b.ok() && pages.reserve(*a, 70).ok() && pages.reserve(*b, 9).ok());
  const ForwardMetadata verify =
      built(c, pages, ForwardMode::kTargetVerify, 4, {{*a, 66, 4, 0, -1}, {*b, 5, 4, 0, -1}});
  const std::vector<int32_t> tokens(16, 5);
  ASSERT_TRUE(mirror.upload(verify, pages, tokens).ok());
  const ForwardMetadata decode = built(c, pages, ForwardMode::kDecode, 2, {{*b, 9, 1, 0, -1}});
  const int64_t before = mirror.staged_bytes();
  const std::vector<int32_t> two = {8, 0};
  ASSERT_TRUE(mirror.upload(decode, pages, two).ok());
  const int64_t words = 12 * 2 + 2 * 2 + 2 * 3;
  EXPECT_EQ(mirror.staged_bytes() - before, words * 4);
  EXPECT_LT(words * 4, int64_t(decode.row_len.size()) * 4);  // one row region at capacity
  const MetadataArrays& got = mirror.arrays();
  EXPECT_EQ(std::memcmp(got.row_len, decode.row_len.data(), 2 * 4), 0);
  EXPECT_EQ(std::memcmp(got.positions, decode.positions.data(), 2 * 4), 0);
  EXPECT_EQ(std::memcmp(got.cu_kv, decode.cu_kv.data(), 3 * 4), 0);
  EXPECT_EQ(mirror.tokens()[0], 8);
  EXPECT_EQ(mirror.hidden_rows()[1], -1);
  // Row 2 on is the verify's still.
  EXPECT_EQ(std::memcmp(got.positions + 2, verify.positions.data() + 2, 14 * 4), 0);
  EXPECT_EQ(mirror.tokens()[2], 5);
}

// A poisoned mirror (set_poison) of the small config, its page manager, and one request slot
// with `reserved` positions' pages.
struct PoisonedMirror {
  explicit PoisonedMirror(int32_t reserved) {
    mirror.set_poison(true);
    auto r = pages.open_request();
    EXPECT_TRUE(r.ok() && pages.reserve(*r, reserved).ok());
    slot = r.ok() ? *r : -1;
  }
  const MetadataConfig c = testing::small_config(3);
  PagedCacheManager pages{c.num_pages, c.num_rows, c.page_table_width};
  MetadataMirror mirror{kernels::Backend::kCpu, c, 8};
  int32_t slot = -1;
};

// Poisoned (ModelOptions::poison_workspace's half here): the used part as before and every word
// past it kMirrorPoisonWord, the whole block copied; the page table untouched by the poison.
TEST(MetadataMirror, PoisonFillsEveryRegionPastItsUsedPart) {
  PoisonedMirror p(9);
  auto& [c, pages, mirror, slot] = p;
  ASSERT_GE(slot, 0);
  const ForwardMetadata decode = built(c, pages, ForwardMode::kDecode, 2, {{slot, 9, 1, 0, -1}});
  const std::vector<int32_t> two = {8, 0};
  ASSERT_TRUE(mirror.upload(decode, pages, two).ok());
  const MetadataArrays& got = mirror.arrays();
  const size_t cap = decode.positions.size();
  ASSERT_GT(cap, 2u);
  EXPECT_EQ(std::memcmp(got.positions, decode.positions.data(), 2 * 4), 0);
  EXPECT_EQ(std::memcmp(got.cu_kv, decode.cu_kv.data(), 3 * 4), 0);
  for (size_t r = 2; r < cap; ++r) {
    ASSERT_EQ(got.positions[r], kMirrorPoisonWord) << "positions row " << r;
    ASSERT_EQ(got.write_slot[r], kMirrorPoisonWord) << "write_slot row " << r;
    ASSERT_EQ(mirror.tokens()[r], kMirrorPoisonWord) << "token row " << r;
    ASSERT_EQ(mirror.hidden_rows()[r], kMirrorPoisonWord) << "hidden row " << r;
  }
  for (size_t i = 3; i < decode.cu_kv.size(); ++i) ASSERT_EQ(got.cu_kv[i], kMirrorPoisonWord) << i;
  EXPECT_EQ(mirror.hidden_rows()[1],
            -1);  // a forward row without a listed entry: -1, as unpoisoned
  const kernels::PageTable pt = pages.page_table();
  EXPECT_EQ(std::memcmp(got.page_table.data, pt.data, size_t(pt.num_rows) * size_t(pt.width) * 4),
            0);
}

// Checked mode's read-back (validate_uploaded) of a poisoned upload: the used part is what the
// backend holds, the rest the host build's, so valid metadata passes with the poison past it; and
// a used row changed on the backend is still caught.
TEST(MetadataMirror, CheckedReadBackIgnoresThePoisonPastTheUsedPart) {
  PoisonedMirror p(70);
  auto& [c, pages, mirror, slot] = p;
  ASSERT_GE(slot, 0);
  const ForwardMetadata verify =
      built(c, pages, ForwardMode::kTargetVerify, 2, {{slot, 66, 4, 0, -1}});
  const std::vector<int32_t> tokens(8, 5);
  ASSERT_TRUE(mirror.upload(verify, pages, tokens).ok());
  ASSERT_EQ(mirror.arrays().sample_row[verify.sample_row.size() - 1], kMirrorPoisonWord);
  ForwardMetadata back(c);
  const Status ok = mirror.validate_uploaded(verify, pages, &back);
  EXPECT_TRUE(ok.ok()) << ok.to_string();
  const_cast<int32_t*>(mirror.arrays().sample_row)[0] = -5;  // a used entry, as a bad patch
  const Status bad = mirror.validate_uploaded(verify, pages, &back);
  EXPECT_EQ(bad.code(), StatusCode::kFailedPrecondition) << bad.to_string();
  EXPECT_NE(bad.to_string().find("sample_row"), std::string::npos) << bad.to_string();
}

TEST(MetadataMirror, TooFewTokensOrHiddenRowsAreInvalidArgument) {
  const MetadataConfig c = testing::small_config(3);
  PagedCacheManager pages(c.num_pages, c.num_rows, c.page_table_width);
  MetadataMirror mirror(kernels::Backend::kCpu, c, 8);
  auto a = pages.open_request();
  ASSERT_TRUE(a.ok() && pages.reserve(*a, 10).ok());
  const ForwardMetadata meta = built(c, pages, ForwardMode::kDecode, 2, {{*a, 9, 1, 0, -1}});
  const std::vector<int32_t> one = {3};
  Status s = mirror.upload(meta, pages, one);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  const std::vector<int32_t> two = {3, 0};
  const std::vector<bf16> short_hidden(8);  // one row of 8 for 2 rows
  s = mirror.upload(meta, pages, two, short_hidden);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_TRUE(mirror.upload(meta, pages, two).ok());
}

// The staging ring (header comment): uploads between two synchronisations take distinct slots,
// so a back-to-back chain of up to staging_slots() forwards never waits; one more, or host hidden
// rows while slots are pending, synchronises first. Every upload lands whole in the one backend
// block, with the hand-off's row list staged (the rest -1).
TEST(MetadataMirror, TheStagingRingWaitsOnlyWhenFull) {
  const MetadataConfig c = testing::small_config(3);
  PagedCacheManager pages(c.num_pages, c.num_rows, c.page_table_width);
  MetadataMirror mirror(kernels::Backend::kCpu, c, 8);
  ASSERT_EQ(mirror.staging_slots(), 8);  // two steps of d + 1 forwards for d = 3
  auto a = pages.open_request();
  ASSERT_TRUE(a.ok() && pages.reserve(*a, 40).ok());
  const ForwardMetadata meta = built(c, pages, ForwardMode::kDecode, 2, {{*a, 9, 1, 0, -1}});
  const std::vector<int32_t> rows = {0};
  for (int32_t i = 0; i < mirror.staging_slots(); ++i) {
    const std::vector<int32_t> tokens = {10 + i, 0};
    ASSERT_TRUE(mirror.upload(meta, pages, tokens, {}, rows).ok());
    EXPECT_EQ(mirror.tokens()[0], 10 + i);
    EXPECT_EQ(mirror.hidden_rows()[0], 0);
    EXPECT_EQ(mirror.hidden_rows()[1], -1);
  }
  EXPECT_EQ(mirror.ring_waits(), 0);
  const std::vector<int32_t> tokens = {7, 0};
  ASSERT_TRUE(mirror.upload(meta, pages, tokens).ok());  // one more: the ring is full
  EXPECT_EQ(mirror.ring_waits(), 1);
  EXPECT_EQ(mirror.hidden_rows()[0], -1);
  const std::vector<bf16> hidden(16, float_to_bf16(1.f));
  ASSERT_TRUE(mirror.upload(meta, pages, tokens, hidden).ok());  // slot 0 pending
  EXPECT_EQ(mirror.ring_waits(), 2);
  mirror.synchronised();
  ASSERT_TRUE(mirror.upload(meta, pages, tokens, hidden).ok());
  EXPECT_EQ(mirror.ring_waits(), 2);
  EXPECT_EQ(std::memcmp(mirror.hidden(), hidden.data(), hidden.size() * 2), 0);
  const std::vector<int32_t> too_many = {0, 1, 2};
  EXPECT_EQ(mirror.upload(meta, pages, tokens, {}, too_many).code(), StatusCode::kInvalidArgument);
}

// The page-table patch list: after every upload the backend's table equals the host's, over a
// random run of requests opened, grown and closed; an upload after no change copies no table byte,
// and one after a change copies exactly the changed rows (one copy per run of consecutive rows).
TEST(MetadataMirror, OnlyChangedPageTableRowsAreCopied) {
  const MetadataConfig c = testing::small_config(3);
  PagedCacheManager pages(c.num_pages, c.num_rows, c.page_table_width);
  MetadataMirror mirror(kernels::Backend::kCpu, c, 8);
  auto keep = pages.open_request();
  ASSERT_TRUE(keep.ok() && pages.reserve(*keep, 40).ok());
  const ForwardMetadata meta = built(c, pages, ForwardMode::kDecode, 2, {{*keep, 9, 1, 0, -1}});
  const std::vector<int32_t> tokens = {1, 0};
  const size_t table_bytes = size_t(c.num_rows) * size_t(c.page_table_width) * 4;
  const auto table_matches = [&] {
    return std::memcmp(mirror.arrays().page_table.data, pages.page_table().data, table_bytes) == 0;
  };
  // The first upload copies the whole table (one run), then nothing while nothing changes.
  ASSERT_TRUE(mirror.upload(meta, pages, tokens).ok());
  EXPECT_TRUE(table_matches());
  EXPECT_EQ(mirror.table_patches(), 1);
  const int64_t first = mirror.staged_bytes();
  ASSERT_TRUE(mirror.upload(meta, pages, tokens).ok());
  const int64_t plain = mirror.staged_bytes() - first;
  EXPECT_EQ(first - plain, int64_t(table_bytes));
  EXPECT_EQ(mirror.table_patches(), 1);
  std::mt19937 rng(7);
  std::vector<int32_t> open;
  const int64_t row_bytes = int64_t(c.page_table_width) * 4;
  for (int i = 0; i < 300; ++i) {
    const std::vector<uint64_t> before(pages.row_versions().begin(), pages.row_versions().end());
    const int op = int(rng() % 3);
    if (op == 0 || open.empty()) {
      auto slot = pages.open_request();
      if (slot.ok() && pages.reserve(*slot, int32_t(rng() % 300) + 1).ok()) open.push_back(*slot);
    } else if (op == 1) {
      const int32_t slot = open[rng() % open.size()];
      ASSERT_TRUE(pages.reserve(slot, int32_t(rng() % 600) + 1).ok());
    } else {
      const size_t k = rng() % open.size();
      ASSERT_TRUE(pages.close_request(open[k]).ok());
      open.erase(open.begin() + long(k));
    }
    int64_t changed = 0, runs = 0;
    for (size_t r = 0; r < before.size(); ++r) {
      const bool now = before[r] != pages.row_versions()[r];
      changed += now ? 1 : 0;
      runs += now && (r == 0 || before[r - 1] == pages.row_versions()[r - 1]) ? 1 : 0;
    }
    const int64_t bytes = mirror.staged_bytes(), patches = mirror.table_patches();
    ASSERT_TRUE(mirror.upload(meta, pages, tokens).ok());
    ASSERT_TRUE(table_matches()) << "step " << i;
    EXPECT_EQ(mirror.staged_bytes() - bytes, plain + changed * row_bytes) << "step " << i;
    EXPECT_EQ(mirror.table_patches() - patches, runs) << "step " << i;
  }
}

}  // namespace
}  // namespace dsa::runtime
