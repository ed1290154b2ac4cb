#include "dsa/runtime/page_pool.h"

#include <gtest/gtest.h>

#include <set>

namespace dsa::runtime {
namespace {

TEST(IdAllocator, NeverHandsOutIdZeroAndExhaustsCleanly) {
  IdAllocator ids("pages", 5);
  std::set<int32_t> got;
  for (int i = 0; i < 4; ++i) {
    auto id = ids.allocate();
    ASSERT_TRUE(id.ok());
    EXPECT_GE(*id, 1);
    got.insert(*id);
  }
  EXPECT_EQ(got.size(), 4u);
  auto none = ids.allocate();
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("pages"), std::string::npos);
  EXPECT_TRUE(ids.free(2).ok());
  EXPECT_EQ(*ids.allocate(), 2);
}

TEST(IdAllocator, BulkAllocationIsAllOrNothing) {
  IdAllocator ids("pages", 8);
  auto many = ids.allocate(8);
  EXPECT_EQ(many.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ids.num_free(), 7);
  EXPECT_TRUE(ids.allocate(7).ok());
}

TEST(IdAllocator, RejectsDoubleFreeAndReservedId) {
  IdAllocator ids("pages", 4);
  EXPECT_EQ(ids.free(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ids.free(3).code(), StatusCode::kInvalidArgument);  // never allocated
  int32_t a = *ids.allocate();
  EXPECT_TRUE(ids.free(a).ok());
  Status again = ids.free(a);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("free(" + std::to_string(a) + ")"), std::string::npos);
}

TEST(PagedCacheManager, ReserveFillsRowAndCloseReturnsPages) {
  PagedCacheManager m(/*num_pages=*/10, /*num_rows=*/4, /*width=*/6);
  int32_t slot = *m.open_request();
  EXPECT_GE(slot, 1);
  ASSERT_TRUE(m.reserve(slot, 130).ok());  // 3 pages
  EXPECT_EQ(m.pages_held(slot), 3);
  auto row = m.row(slot);
  for (int c = 0; c < 3; ++c) EXPECT_GE(row[c], 1);
  for (int c = 3; c < 6; ++c) EXPECT_EQ(row[c], 0);
  ASSERT_TRUE(m.reserve(slot, 100).ok());  // already covered
  EXPECT_EQ(m.pages_held(slot), 3);
  EXPECT_EQ(m.num_free_pages(), 6);
  for (int32_t v : m.row(0)) EXPECT_EQ(v, 0);
  ASSERT_TRUE(m.close_request(slot).ok());
  EXPECT_EQ(m.num_free_pages(), 9);
  for (int32_t v : m.row(slot)) EXPECT_EQ(v, 0);
}

TEST(PagedCacheManager, RunningOutIsAStatus) {
  PagedCacheManager m(5, 4, 8);
  int32_t a = *m.open_request();
  Status s = m.reserve(a, 5 * 64);  // 5 pages, 4 allocatable
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m.pages_held(a), 0) << "a failed reserve takes nothing";
  Status wide = m.reserve(a, 9 * 64);
  EXPECT_EQ(wide.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(wide.message().find("length = 576"), std::string::npos);
  EXPECT_EQ(m.reserve(0, 10).code(), StatusCode::kInvalidArgument);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(m.open_request().ok());
  EXPECT_EQ(m.open_request().status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace dsa::runtime
