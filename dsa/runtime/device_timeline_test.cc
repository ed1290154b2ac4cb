// DeviceTimeline on the CPU backend, whose timing markers read the host clock: nested spans add
// to the outer one's inner time, the time between a label's spans is counted, misuse is refused,
// resolving keeps open spans, markers are reused, and a failed reading is retried, not counted
// twice.
#include "dsa/runtime/device_timeline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace dsa::runtime {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(DeviceTimeline, NestedSpansAddToTheOuterOnesInnerTime) {
  DeviceTimeline t(memory_ops(kernels::Backend::kCpu), 3);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(t.open(0).ok());
    ASSERT_TRUE(t.open(1).ok());
    sleep_ms(4);
    ASSERT_TRUE(t.close(1).ok());
    sleep_ms(3);  // inside the step, outside its forward
    ASSERT_TRUE(t.open(2).ok());
    sleep_ms(2);
    ASSERT_TRUE(t.close(2).ok());
    ASSERT_TRUE(t.close(0).ok());
    sleep_ms(5);  // between steps
  }
  ASSERT_TRUE(t.resolve().ok());
  const DeviceTimeline::Total step = t.total(0), a = t.total(1), b = t.total(2);
  EXPECT_EQ(step.spans, 2);
  EXPECT_EQ(a.spans, 2);
  EXPECT_EQ(b.spans, 2);
  EXPECT_GE(a.ms, 8.0);
  EXPECT_GE(b.ms, 4.0);
  EXPECT_GE(step.ms, a.ms + b.ms + 6.0);
  EXPECT_NEAR(step.inner_ms, a.ms + b.ms, 1e-9);
  EXPECT_EQ(a.inner_ms, 0.0);
  EXPECT_GE(step.between_ms, 5.0);  // one gap: between the two steps
  EXPECT_LT(step.between_ms, step.ms);
  EXPECT_GE(a.between_ms, 3.0 + 2.0 + 5.0);
}

TEST(DeviceTimeline, ResolvingKeepsOpenSpans) {
  DeviceTimeline t(memory_ops(kernels::Backend::kCpu), 2);
  ASSERT_TRUE(t.open(0).ok());
  for (int i = 0; i < 3000; ++i) {  // past the automatic resolve
    ASSERT_TRUE(t.open(1).ok());
    ASSERT_TRUE(t.close(1).ok());
  }
  EXPECT_EQ(t.total(0).spans, 0);  // still open
  // Nothing resolves on its own while a span is open: it would wait inside a step.
  EXPECT_EQ(t.total(1).spans, 0);
  ASSERT_TRUE(t.close(0).ok());
  ASSERT_TRUE(t.resolve().ok());
  EXPECT_EQ(t.total(0).spans, 1);
  EXPECT_EQ(t.total(1).spans, 3000);
  EXPECT_NEAR(t.total(0).inner_ms, t.total(1).ms, 1e-6);
  EXPECT_GE(t.total(0).ms, t.total(0).inner_ms);
}

TEST(DeviceTimeline, MarkersAreReusedOverALongRun) {
  DeviceTimeline t(memory_ops(kernels::Backend::kCpu), 2);
  for (int step = 0; step < 5000; ++step) {
    ASSERT_TRUE(t.open(0).ok());
    ASSERT_TRUE(t.open(1).ok());
    ASSERT_TRUE(t.close(1).ok());
    ASSERT_TRUE(t.close(0).ok());
  }
  EXPECT_GT(t.total(0).spans, 0);  // resolved on its own, between steps
  EXPECT_LE(t.markers_made(), size_t(2 * 2048 + 2 * 256 + 8)) << "markers are not reused";
  ASSERT_TRUE(t.resolve().ok());
  EXPECT_EQ(t.total(0).spans, 5000);
  EXPECT_EQ(t.total(1).spans, 5000);
}

// A reading that fails leaves its span pending: nothing is counted twice, no marker is shared.
// The fake fails once after `g_readings_left` good readings (-1: never), partway through a resolve.
int g_readings_left = -1;
TEST(DeviceTimeline, AFailedReadingIsRetriedNotCountedTwice) {
  MemoryOps mem = memory_ops(kernels::Backend::kCpu);
  mem.elapsed_ms = [](void* a, void* b) -> StatusOr<double> {
    if (g_readings_left == 0) {
      g_readings_left = -1;
      return internal_error("reading failed");
    }
    if (g_readings_left > 0) --g_readings_left;
    return memory_ops(kernels::Backend::kCpu).elapsed_ms(a, b);
  };
  DeviceTimeline t(mem, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(t.open(0).ok());
    sleep_ms(1);
    ASSERT_TRUE(t.close(0).ok());
  }
  // The first span's time and the second's reads well, the gap before the second fails: the
  // first is counted, the second and third stay pending.
  g_readings_left = 2;
  EXPECT_EQ(t.resolve().code(), StatusCode::kInternal);
  EXPECT_EQ(t.total(0).spans, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(t.open(0).ok());
    sleep_ms(1);
    ASSERT_TRUE(t.close(0).ok());
  }
  ASSERT_TRUE(t.resolve().ok());
  const DeviceTimeline::Total total = t.total(0);
  EXPECT_EQ(total.spans, 6);
  EXPECT_GE(total.ms, 6.0);
  EXPECT_GE(total.between_ms, 0.0);
  EXPECT_LT(total.between_ms, total.ms);
}

TEST(DeviceTimeline, MisuseIsRefused) {
  DeviceTimeline t(memory_ops(kernels::Backend::kCpu), 2);
  Status s = t.open(2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("label 2 out of [0, 2)"), std::string::npos) << s.message();
  EXPECT_EQ(t.open(-1).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(t.open(0).ok());
  s = t.open(0);
  EXPECT_NE(s.message().find("already open"), std::string::npos) << s.message();
  ASSERT_TRUE(t.open(1).ok());
  s = t.close(0);  // 1 is the innermost
  EXPECT_NE(s.message().find("close(0) but the innermost open span is 1"), std::string::npos)
      << s.message();
  EXPECT_TRUE(t.close(1).ok());
  EXPECT_TRUE(t.close(0).ok());
  EXPECT_EQ(t.close(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.total(5).spans, 0);
}

TEST(DeviceTimeline, DroppedSpansCountNowhere) {
  DeviceTimeline t(memory_ops(kernels::Backend::kCpu), 2);
  ASSERT_TRUE(t.open(0).ok());
  ASSERT_TRUE(t.close(0).ok());
  ASSERT_TRUE(t.open(0).ok());  // a step that launched nothing
  sleep_ms(3);
  ASSERT_TRUE(t.close(0, /*keep=*/false).ok());
  ASSERT_TRUE(t.open(0).ok());
  ASSERT_TRUE(t.close(0).ok());
  ASSERT_TRUE(t.resolve().ok());
  EXPECT_EQ(t.total(0).spans, 2);
  EXPECT_LT(t.total(0).ms, 3.0);
  EXPECT_GE(t.total(0).between_ms, 3.0);  // the dropped one's time is between the kept two
}

}  // namespace
}  // namespace dsa::runtime
