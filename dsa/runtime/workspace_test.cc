// The workspace's two kinds of take on the host backend: zeroed storage is zeros even where it
// reuses memory an earlier take dirtied, uninitialised storage is poisoned in poison mode (and left
// as it was otherwise), and the counts say which kind each take was.
#include "dsa/runtime/workspace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

namespace dsa::runtime {
namespace {

TEST(Workspace, ZeroedTakesAreZerosOverReusedMemory) {
  Workspace ws(kernels::Backend::kCpu);
  {
    Workspace::Frame f(ws);
    auto p = ws.take_uninit<uint8_t>(1000);
    ASSERT_TRUE(p.ok());
    std::memset(*p, 0x5A, 1000);
  }
  auto z = ws.take_zeroed<uint8_t>(1000);  // the same bytes, handed out again
  ASSERT_TRUE(z.ok());
  EXPECT_TRUE(std::all_of(*z, *z + 1000, [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(ws.counts().zeroed, 1);
  EXPECT_EQ(ws.counts().uninit, 1);
}

TEST(Workspace, UninitTakesKeepContentsOrArePoisoned) {
  Workspace ws(kernels::Backend::kCpu);
  {
    Workspace::Frame f(ws);
    auto p = ws.take_uninit<uint8_t>(512);
    ASSERT_TRUE(p.ok());
    std::memset(*p, 0x5A, 512);
  }
  {
    Workspace::Frame f(ws);
    auto p = ws.take_uninit<uint8_t>(512);  // not filled: what the last user left
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(std::all_of(*p, *p + 512, [](uint8_t b) { return b == 0x5A; }));
  }
  ws.set_poison(true);
  EXPECT_TRUE(ws.poison());
  auto f = ws.take_uninit<float>(100);
  ASSERT_TRUE(f.ok());
  for (int i = 0; i < 100; ++i) EXPECT_TRUE((*f)[i] != (*f)[i]) << i;  // NaN
  auto z = ws.take_zeroed<float>(10);  // poison mode leaves zeroed takes zeroed
  ASSERT_TRUE(z.ok());
  EXPECT_TRUE(std::all_of(*z, *z + 10, [](float v) { return v == 0.f; }));
  EXPECT_EQ(ws.counts().zeroed, 1);
  EXPECT_EQ(ws.counts().uninit, 3);
}

TEST(MemoryOps, FillWritesEveryByte) {
  const MemoryOps& m = memory_ops(kernels::Backend::kCpu);
  uint8_t b[40] = {};
  ASSERT_TRUE(m.fill(b + 4, 0xFF, 32).ok());
  for (int i = 0; i < 40; ++i) EXPECT_EQ(b[i], (i >= 4 && i < 36) ? 0xFF : 0) << i;
  EXPECT_TRUE(m.fill(b, 0, 0).ok());
}

}  // namespace
}  // namespace dsa::runtime
