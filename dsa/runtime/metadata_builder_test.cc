#include "dsa/runtime/metadata_builder.h"

#include <gtest/gtest.h>

#include <random>

#include "dsa/runtime/metadata_validator.h"
#include "dsa/runtime/runtime_test_util.h"
#include "dsa/testing/random.h"

namespace dsa::runtime {
namespace {

using kernels::kPageSize;
using testing::World;

std::vector<int32_t> prefix(const std::vector<int32_t>& v, int32_t count) {
  return std::vector<int32_t>(v.begin(), v.begin() + count);
}

int32_t slot_of(const World& w, int32_t req_slot, int32_t pos) {
  return w.pages.row(req_slot)[pos / kPageSize] * kPageSize + pos % kPageSize;
}

// TARGET_VERIFY with d = 3: rows see C + j + 1, positions C + j; bucket padding adds constants.
TEST(MetadataBuilder, TargetVerifyHandComputedWithBucketPadding) {
  World w(testing::small_config(3));
  ForwardMetadata m(w.config);
  ForwardBatch batch;
  batch.mode = ForwardMode::kTargetVerify;
  batch.batch_pad = 3;
  batch.requests = {w.request(62, 4), w.request(5, 4)};
  ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
  EXPECT_EQ(m.header.rows, 8);
  EXPECT_EQ(m.header.rows_pad, 12);
  EXPECT_EQ(prefix(m.row_len, 12), (std::vector<int32_t>{63, 64, 65, 66, 6, 7, 8, 9, 0, 0, 0, 0}));
  EXPECT_EQ(prefix(m.positions, 12),
            (std::vector<int32_t>{62, 63, 64, 65, 5, 6, 7, 8, 0, 0, 0, 0}));
  EXPECT_EQ(prefix(m.row_req, 12), (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  EXPECT_EQ(prefix(m.cu_q, 4), (std::vector<int32_t>{0, 4, 8, 12}));
  EXPECT_EQ(prefix(m.req_kv_len, 3), (std::vector<int32_t>{66, 9, 0}));
  EXPECT_EQ(m.req_slot[2], 0);
  // Rows 2 and 3 of request 0 cross into its second page.
  EXPECT_EQ(m.write_slot[1], slot_of(w, batch.requests[0].req_slot, 63));
  EXPECT_EQ(m.write_slot[2], slot_of(w, batch.requests[0].req_slot, 64));
  EXPECT_NE(m.write_slot[2] / kPageSize, m.write_slot[1] / kPageSize);
  for (int r = 8; r < 12; ++r) {
    EXPECT_EQ(m.write_slot[r], -1);
    EXPECT_EQ(m.row_page[r], 0);
    EXPECT_EQ(m.row_topk_len[r], 0);
  }
  EXPECT_EQ(m.header.num_samples, 12);
  EXPECT_EQ(m.sample_row[5], 5);
  EXPECT_EQ(m.sample_row[9], -1);
  EXPECT_TRUE(validate_forward_metadata(m, w.config, w.pages.page_table()).ok());
}

// DRAFT_EXTEND: cached_len = C (peers' subtractive form max(seq - n + 1 + j, 0) with seq = C + n),
// sampled row b n + a_b.
TEST(MetadataBuilder, DraftExtendUsesCachedLenAndSamplesAcceptedRow) {
  World w(testing::small_config(3));
  ForwardMetadata m(w.config);
  ForwardBatch batch;
  batch.model = ModelKind::kMtp;
  batch.mode = ForwardMode::kDraftExtend;
  batch.requests = {w.request(10, 4), w.request(0, 4)};
  batch.requests[0].sample_first = 2;
  batch.requests[1].sample_first = 0;
  ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
  for (int j = 0; j < 4; ++j) {
    const int seq = 10 + 4;  // peers' "seq": draft cache length after the writes
    EXPECT_EQ(m.row_len[j], std::max(seq - 4 + 1 + j, 0));
    EXPECT_EQ(m.row_len[4 + j], j + 1);
  }
  EXPECT_EQ(m.header.num_samples, 2);
  EXPECT_EQ(m.sample_row[0], 2);
  EXPECT_EQ(m.sample_row[1], 4);
}

// The case that crashed peers: n = 8 rows per request, real requests of one token of context and
// padded requests whose peer-style fill value (seq_len = 1) would give negative lengths.
TEST(MetadataBuilder, PaddedRowsAreConstantsEvenAtNEightWithSeqLenOne) {
  World w(testing::small_config(7));
  ForwardMetadata m(w.config);
  ForwardBatch batch;
  batch.mode = ForwardMode::kDraftExtend;
  batch.batch_pad = 16;
  batch.requests = {w.request(0, 8), w.request(1, 8)};
  for (auto& q : batch.requests) q.sample_first = 0;
  ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
  for (int r = 0; r < m.header.rows_pad; ++r) {
    EXPECT_GE(m.row_len[r], 0);
    EXPECT_GE(m.row_topk_len[r], 0);
    if (r >= 16) {
      EXPECT_EQ(m.row_len[r], 0) << r;
      EXPECT_EQ(m.write_slot[r], -1) << r;
    }
  }
  EXPECT_TRUE(validate_forward_metadata(m, w.config, w.pages.page_table()).ok());
}

TEST(MetadataBuilder, IdleRankBuildsAllPaddingBatch) {
  World w(testing::small_config(3));
  ForwardMetadata m(w.config);
  ForwardBatch batch;
  batch.mode = ForwardMode::kIdle;
  batch.idle_rows_per_request = 4;
  batch.batch_pad = 8;
  ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
  EXPECT_EQ(m.header.rows, 0);
  EXPECT_EQ(m.header.rows_pad, 32);
  for (int r = 0; r < 32; ++r) EXPECT_EQ(m.write_slot[r], -1);
  EXPECT_EQ(m.schedule[7], 0) << "T_seg of an all-padding batch";
  EXPECT_TRUE(validate_forward_metadata(m, w.config, w.pages.page_table()).ok());
  // The LM head of the verify it stands in for: n (-1) samples per padded request, as the
  // TARGET_VERIFY graph captured over padding has; as the MTP's draft-extend, one each.
  EXPECT_EQ(m.header.num_samples, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(m.sample_row[i], -1);
  batch.model = ModelKind::kMtp;
  ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
  EXPECT_EQ(m.header.num_samples, 8);
  batch.idle_rows_per_request = 1;
  ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
  EXPECT_EQ(m.header.num_samples, 8);
}

// EXTEND: a short request (<= d + 1 rows) takes the paged sub-batch, a long one the ragged path;
// DP padding adds one padded request holding the extra rows.
TEST(MetadataBuilder, ExtendSplitsPagedAndRaggedAndPadsRows) {
  World w(testing::small_config(3));
  ForwardMetadata m(w.config);
  ForwardBatch batch;
  batch.mode = ForwardMode::kExtend;
  batch.rows_pad = 110;
  batch.requests = {w.request(0, 100), w.request(30, 3), w.request(64, 2)};
  batch.requests[0].sample_first = 99;
  batch.requests[0].sample_count = 1;
  batch.requests[1].sample_count = 3;
  ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
  EXPECT_EQ(m.header.batch_pad, 4);
  EXPECT_EQ(m.header.rows, 105);
  EXPECT_EQ(m.header.paged_requests, 2);
  EXPECT_EQ(m.header.paged_rows_per_req, 3);
  EXPECT_EQ(prefix(m.cu_q, 5), (std::vector<int32_t>{0, 100, 103, 105, 110}));
  EXPECT_EQ(prefix(m.cu_kv, 5), (std::vector<int32_t>{0, 100, 100, 100, 100}));
  EXPECT_EQ(m.ks[50], 0);
  EXPECT_EQ(m.ke[50], 51);
  EXPECT_EQ(prefix(m.pg_row_len, 6), (std::vector<int32_t>{31, 32, 33, 65, 66, 0}));
  EXPECT_EQ(prefix(m.pg_row, 6), (std::vector<int32_t>{100, 101, 102, 103, 104, -1}));
  EXPECT_EQ(m.header.num_samples, 4);
  EXPECT_EQ(prefix(m.sample_row, 4), (std::vector<int32_t>{99, 100, 101, 102}));
  for (int r = 105; r < 110; ++r) EXPECT_EQ(m.write_slot[r], -1);
  EXPECT_TRUE(validate_forward_metadata(m, w.config, w.pages.page_table()).ok());
}

struct BadCase {
  const char* name;
  StatusCode code;
  const char* needle;
};

TEST(MetadataBuilder, RejectsMalformedRequests) {
  World w(testing::small_config(3));
  ForwardMetadata m(w.config);
  auto run = [&](ForwardBatch b) {
    return build_forward_metadata(b, w.config, w.pages.page_table(), m);
  };
  RequestInput good = w.request(10, 4);
  auto verify = [&](RequestInput q) {
    ForwardBatch b;
    b.mode = ForwardMode::kTargetVerify;
    b.requests = {q};
    return b;
  };
  RequestInput q = good;
  q.cached_len = -3;
  Status s = run(verify(q));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cached_len = -3"), std::string::npos) << s.to_string();
  q = good;
  q.new_len = 3;
  s = run(verify(q));
  EXPECT_NE(s.message().find("new_len = 3: must equal n = 4"), std::string::npos) << s.to_string();
  q = good;
  q.req_slot = 0;
  EXPECT_NE(run(verify(q)).message().find("req_slot = 0"), std::string::npos);
  ForwardBatch twice = verify(good);
  twice.requests.push_back(good);
  EXPECT_NE(run(twice).message().find("used by an earlier request"), std::string::npos);
  ForwardBatch under = verify(good);
  under.batch_pad = 0;
  under.requests.push_back(w.request(0, 4));
  under.batch_pad = 1;
  EXPECT_NE(run(under).message().find("batch_pad = 1: below B = 2"), std::string::npos);
  ForwardBatch over = verify(good);
  over.batch_pad = 25;
  EXPECT_EQ(run(over).code(), StatusCode::kResourceExhausted);
  q = good;
  q.cached_len = 40 * 64;  // beyond W * P
  EXPECT_EQ(run(verify(q)).code(), StatusCode::kResourceExhausted);
  q = good;
  q.cached_len = 200;  // pages for positions >= 64 were never reserved
  s = run(verify(q));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("has no page"), std::string::npos) << s.to_string();
  ForwardBatch idle;
  idle.mode = ForwardMode::kIdle;
  idle.requests = {good};
  EXPECT_EQ(run(idle).code(), StatusCode::kInvalidArgument);
  ForwardBatch ext;
  ext.mode = ForwardMode::kExtend;
  ext.requests = {good};
  ext.rows_pad = 2;
  EXPECT_NE(run(ext).message().find("rows_pad = 2: below rows = 4"), std::string::npos);
}

// Buffers are allocated once at capacity: builds never move them.
TEST(MetadataBuilder, BuffersKeepTheirAddresses) {
  World w(testing::small_config(3));
  ForwardMetadata m(w.config);
  const int32_t* row_len = m.row_len.data();
  const int32_t* schedule = m.schedule.data();
  ForwardBatch batch;
  batch.mode = ForwardMode::kExtend;
  batch.requests = {w.request(0, 1000)};
  batch.requests[0].sample_count = 0;
  ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
  batch.mode = ForwardMode::kDecode;
  batch.requests = {w.request(3, 1)};
  ASSERT_TRUE(build_forward_metadata(batch, w.config, w.pages.page_table(), m).ok());
  EXPECT_EQ(m.row_len.data(), row_len);
  EXPECT_EQ(m.schedule.data(), schedule);
}

}  // namespace
}  // namespace dsa::runtime
