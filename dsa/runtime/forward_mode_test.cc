// Table-driven over every ForwardMode (SPEC.md §9 row 3): each property is defined for each mode,
// and the builder accepts a well-formed batch of each.
#include "dsa/runtime/forward_mode.h"

#include <gtest/gtest.h>

#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/metadata_builder.h"
#include "dsa/runtime/metadata_validator.h"
#include "dsa/runtime/runtime_test_util.h"

namespace dsa::runtime {
namespace {

TEST(ForwardMode, EveryModeHasEveryProperty) {
  for (ForwardMode m : kAllForwardModes) {
    EXPECT_NE(mode_name(m), "?");
    const int32_t n = uniform_rows_per_request(m, 3);
    if (m == ForwardMode::kDecode) EXPECT_EQ(n, 1);
    if (m == ForwardMode::kTargetVerify || m == ForwardMode::kDraftExtend) EXPECT_EQ(n, 4);
    EXPECT_EQ(uses_cuda_graph(m), m != ForwardMode::kExtend) << mode_name(m);
    EXPECT_EQ(may_use_ragged_indexer(m), m == ForwardMode::kExtend) << mode_name(m);
    EXPECT_EQ(is_uniform(m), m != ForwardMode::kExtend) << mode_name(m);
    EXPECT_EQ(writes_cache(m), m != ForwardMode::kIdle) << mode_name(m);
  }
}

TEST(ForwardMode, BuilderAndValidatorHandleEveryMode) {
  testing::World w(testing::small_config(3));
  ForwardMetadata meta(w.config);
  for (ForwardMode m : kAllForwardModes) {
    ForwardBatch batch;
    batch.mode = m;
    batch.model = m == ForwardMode::kDraftExtend ? ModelKind::kMtp : ModelKind::kTarget;
    batch.idle_rows_per_request = 4;
    batch.batch_pad = 4;
    if (m != ForwardMode::kIdle) {
      int32_t n = m == ForwardMode::kExtend ? 70 : uniform_rows_per_request(m, 3);
      batch.requests.push_back(w.request(10, n));
      batch.requests.back().sample_count = 1;
    }
    Status s = build_forward_metadata(batch, w.config, w.pages.page_table(), meta);
    ASSERT_TRUE(s.ok()) << mode_name(m) << ": " << s.to_string();
    Status v = validate_forward_metadata(meta, w.config, w.pages.page_table());
    EXPECT_TRUE(v.ok()) << mode_name(m) << ": " << v.to_string();
    for (const auto& q : batch.requests) ASSERT_TRUE(w.pages.close_request(q.req_slot).ok());
  }
}

}  // namespace
}  // namespace dsa::runtime
