// Graph keys and buckets (SPEC.md §5), the model's graph options, and the forward's staging
// (runtime/metadata_mirror.h) on the CPU backend: the parts of the graph runner that do not need a
// device. The replays themselves are tested on the GPU (tests/e2e/graph_replay_cuda_test.cc).
#include "dsa/model/forward_graphs.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dsa/model/dsa_model.h"
#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/metadata_mirror.h"
#include "dsa/runtime/runtime_test_util.h"

namespace dsa::model {
namespace {

using runtime::ForwardMode;
using runtime::ModelKind;

TEST(GraphBuckets, SpecListUpToTheMaximumWhichIsTheLastBucket) {
  EXPECT_EQ(default_buckets(1), (std::vector<int32_t>{1}));
  EXPECT_EQ(default_buckets(8), (std::vector<int32_t>{1, 2, 4, 8}));
  EXPECT_EQ(default_buckets(6), (std::vector<int32_t>{1, 2, 4, 6}));
  EXPECT_EQ(default_buckets(32), (std::vector<int32_t>{1, 2, 4, 8, 16, 24, 32}));
  EXPECT_EQ(default_buckets(300).back(), 300);
  EXPECT_EQ(default_buckets(300)[13], 256);
}

TEST(GraphBuckets, SmallestBucketAtLeastB) {
  const std::vector<int32_t> b = {1, 2, 4, 8};
  EXPECT_EQ(bucket_for(b, 0), 1);
  EXPECT_EQ(bucket_for(b, 1), 1);
  EXPECT_EQ(bucket_for(b, 3), 4);
  EXPECT_EQ(bucket_for(b, 8), 8);
  EXPECT_EQ(bucket_for(b, 9), 9);  // above the largest: eager, in its own mode
  EXPECT_EQ(bucket_for({}, 5), 5);
}

TEST(GraphKeys, EveryForwardOfTheStepHasOneGraphPerBucket) {
  const std::vector<int32_t> b = {1, 2};
  auto keys = graph_keys(0, true, b);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], (GraphKey{ModelKind::kTarget, ForwardMode::kDecode, 1}));
  keys = graph_keys(1, true, b);  // no draft chain when d = 1
  ASSERT_EQ(keys.size(), 4u);
  EXPECT_EQ(keys[1], (GraphKey{ModelKind::kMtp, ForwardMode::kDraftExtend, 1}));
  keys = graph_keys(3, true, b);
  ASSERT_EQ(keys.size(), 6u);
  EXPECT_EQ(keys[0], (GraphKey{ModelKind::kTarget, ForwardMode::kTargetVerify, 1}));
  EXPECT_EQ(keys[2], (GraphKey{ModelKind::kMtp, ForwardMode::kDecode, 1}));
  EXPECT_EQ(graph_keys(3, false, b).size(), 2u);  // no MTP layer: target graphs only
}

// An IDLE forward replays the graph of the step it stands in for (SPEC.md §4.1, §7).
TEST(GraphKeys, IdleMapsToTheStepsModeByItsRowsPerRequest) {
  runtime::MetadataHeader h;
  h.mode = ForwardMode::kIdle;
  h.batch_pad = 4;
  h.model = ModelKind::kTarget;
  h.rows_per_request = 1;
  EXPECT_EQ(graph_key(h), (GraphKey{ModelKind::kTarget, ForwardMode::kDecode, 4}));
  h.rows_per_request = 4;
  EXPECT_EQ(graph_key(h), (GraphKey{ModelKind::kTarget, ForwardMode::kTargetVerify, 4}));
  h.model = ModelKind::kMtp;
  EXPECT_EQ(graph_key(h), (GraphKey{ModelKind::kMtp, ForwardMode::kDraftExtend, 4}));
  h.rows_per_request = 1;
  EXPECT_EQ(graph_key(h), (GraphKey{ModelKind::kMtp, ForwardMode::kDecode, 4}));
  for (ForwardMode m : runtime::kAllForwardModes) {  // every mode has a key (SPEC.md §9 row 3)
    h.mode = m;
    EXPECT_EQ(graph_key(h).batch_pad, 4);
  }
}

std::string model_dir() { return std::string(DSA_SOURCE_DIR) + "/models/tiny-dsa"; }

TEST(GraphOptions, RejectedWhereTheyCannotWork) {
  ModelOptions o;
  o.max_requests = 4;
  o.cuda_graphs = true;
  auto m = DsaModel::load(model_dir(), o, kernels::cpu_ops());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("cuda_graphs"), std::string::npos) << m.status().to_string();
  o.cuda_graphs = false;
  o.buckets = {1, 8};
  m = DsaModel::load(model_dir(), o, kernels::cpu_ops());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("buckets: 8"), std::string::npos) << m.status().to_string();
  o.buckets = {2, 1};
  m = DsaModel::load(model_dir(), o, kernels::cpu_ops());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("ascending"), std::string::npos) << m.status().to_string();
}

// Staging: one copy puts every array, the page table, tokens and hidden rows at addresses fixed
// when the mirror was allocated (inv. 18), with the values of the host build; the schedule is
// rebuilt by the backend from the uploaded row_len, equal to the host builder's.
TEST(MetadataMirror, OneCopyAtFixedAddressesAndTheScheduleRebuilt) {
  const runtime::MetadataConfig c = runtime::testing::small_config(3);
  runtime::PagedCacheManager pages(c.num_pages, c.num_rows, c.page_table_width);
  runtime::MetadataMirror mirror(kernels::Backend::kCpu, c, 8);
  ASSERT_TRUE(mirror.allocate(pages.page_table()).ok());
  const runtime::MetadataArrays before = mirror.arrays();
  const int32_t* tokens_at = mirror.tokens();
  for (int32_t round = 0; round < 3; ++round) {
    auto a = pages.open_request(), b = pages.open_request();
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE(pages.reserve(*a, 70 + round).ok() && pages.reserve(*b, 5).ok());
    runtime::ForwardBatch fb;
    fb.mode = ForwardMode::kTargetVerify;
    fb.batch_pad = 4;
    fb.requests = {{*a, 66 + round, 4, 0, -1}, {*b, 1, 4, 0, -1}};
    runtime::ForwardMetadata meta(c);
    ASSERT_TRUE(runtime::build_forward_metadata(fb, c, pages.page_table(), meta).ok());
    std::vector<int32_t> tokens(16);
    for (int32_t i = 0; i < 16; ++i) tokens[size_t(i)] = 100 * round + i;
    std::vector<bf16> hidden(16 * 8);
    for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float_to_bf16(float(i + round));
    ASSERT_TRUE(mirror.upload(meta, pages.page_table(), tokens, hidden).ok());
    const runtime::MetadataArrays& got = mirror.arrays();
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
  const runtime::MetadataConfig c = runtime::testing::small_config(3);
  runtime::PagedCacheManager pages(c.num_pages, c.num_rows, c.page_table_width);
  runtime::MetadataMirror mirror(kernels::Backend::kCpu, c, 8);
  auto a = pages.open_request();
  ASSERT_TRUE(a.ok() && pages.reserve(*a, 10).ok());
  runtime::ForwardBatch fb;
  fb.mode = ForwardMode::kDecode;
  fb.batch_pad = 2;
  fb.requests = {{*a, 9, 1, 0, -1}};
  runtime::ForwardMetadata meta(c);
  ASSERT_TRUE(runtime::build_forward_metadata(fb, c, pages.page_table(), meta).ok());
  const std::vector<int32_t> one = {3};
  Status s = mirror.upload(meta, pages.page_table(), one);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  const std::vector<int32_t> two = {3, 0};
  const std::vector<bf16> short_hidden(8);  // one row of 8 for 2 rows
  s = mirror.upload(meta, pages.page_table(), two, short_hidden);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_TRUE(mirror.upload(meta, pages.page_table(), two).ok());
}

}  // namespace
}  // namespace dsa::model
