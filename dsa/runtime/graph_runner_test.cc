// Graph keys, buckets, the graph options and the runner's eager fallback (SPEC.md §5): the parts
// of the graph runner that do not need a device. Capture and replay are tested on the GPU
// (tests/e2e/graph_replay_cuda_test.cc).
#include "dsa/runtime/graph_runner.h"

#include <gtest/gtest.h>

#include <vector>

namespace dsa::runtime {
namespace {

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
  MetadataHeader h;
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
  for (ForwardMode m : kAllForwardModes) {  // every mode has a key (SPEC.md §9 row 3)
    h.mode = m;
    EXPECT_EQ(graph_key(h).batch_pad, 4);
  }
}

TEST(GraphRunner, OptionsRejectedWhereTheyCannotWork) {
  const std::vector<int32_t> fine = {1, 2, 4};
  Status s = GraphRunner::validate(kernels::Backend::kCpu, /*cuda_graphs=*/true, fine, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cuda_graphs"), std::string::npos) << s.to_string();
  EXPECT_TRUE(GraphRunner::validate(kernels::Backend::kCpu, false, fine, 4).ok());
  const std::vector<int32_t> too_big = {1, 8}, descending = {2, 1}, zero = {0, 1};
  s = GraphRunner::validate(kernels::Backend::kCpu, false, too_big, 4);
  EXPECT_NE(s.message().find("buckets: 8"), std::string::npos) << s.to_string();
  s = GraphRunner::validate(kernels::Backend::kCpu, false, descending, 4);
  EXPECT_NE(s.message().find("ascending"), std::string::npos) << s.to_string();
  s = GraphRunner::validate(kernels::Backend::kCpu, false, zero, 4);
  EXPECT_NE(s.message().find("buckets: 0"), std::string::npos) << s.to_string();
}

// Without captured graphs every forward runs its body eagerly, and its errors come back.
TEST(GraphRunner, WithoutGraphsEveryForwardRunsEagerly) {
  GraphRunner runner(kernels::Backend::kCpu, {1, 2, 4});
  EXPECT_EQ(runner.batch_pad_for(3), 4);
  EXPECT_EQ(runner.batch_pad_for(5), 5);
  MetadataHeader h;
  h.mode = ForwardMode::kDecode;
  h.batch_pad = 2;
  EXPECT_EQ(runner.find(h), nullptr);
  int calls = 0;
  auto replayed = runner.run(h, [&] {
    ++calls;
    return ok_status();
  });
  ASSERT_TRUE(replayed.ok());
  EXPECT_FALSE(*replayed);
  EXPECT_EQ(calls, 1);
  replayed = runner.run(h, [] { return internal_error("body failed"); });
  EXPECT_EQ(replayed.status().code(), StatusCode::kInternal);
  EXPECT_EQ(runner.stats().graphs, 0);
}

// Capture needs a device: on the CPU it is an error naming the key, never a silent no-op.
TEST(GraphRunner, CaptureOnTheCpuFailsNamingTheKey) {
  GraphRunner runner(kernels::Backend::kCpu, {1});
  const std::vector<GraphKey> keys = {{ModelKind::kTarget, ForwardMode::kDecode, 1}};
  int stages = 0, bodies = 0;
  Status s = runner.capture(
      keys,
      [&](const GraphKey&) {
        ++stages;
        return ok_status();
      },
      [&](ModelKind) {
        ++bodies;
        return ok_status();
      });
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("B_pad = 1"), std::string::npos) << s.to_string();
  EXPECT_EQ(bodies, 1);  // the warm-up ran the body eagerly before the capture failed
  EXPECT_EQ(stages, 2);
}

}  // namespace
}  // namespace dsa::runtime
