#include "dsa/engine/dp_placement.h"

#include <gtest/gtest.h>

namespace dsa::engine {
namespace {

TEST(DpPlacement, LeastLoadedRankTiesToTheLowest) {
  const int64_t loads[] = {50, 10, 10, 30};
  const int64_t costs[] = {15, 15, 1, 100};
  auto p = place_requests(loads, costs);
  ASSERT_TRUE(p.ok());
  // 15 -> rank 1 (tie with 2, lowest); 15 -> rank 2 (10 < 25); 1 -> rank 1 (25 = 25, lowest);
  // 100 -> rank 2 (25 < 26).
  EXPECT_EQ(*p, (std::vector<int32_t>{1, 2, 1, 2}));
}

TEST(DpPlacement, ABurstSpreadsOverIdleRanks) {
  const int64_t loads[] = {0, 0, 0};
  const int64_t costs[] = {10, 10, 10, 10, 10, 10};
  auto p = place_requests(loads, costs);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
}

TEST(DpPlacement, BadInputNamesTheEntry) {
  const int64_t none[] = {0};
  EXPECT_NE(place_requests({}, none).status().message().find("loads is empty"), std::string::npos);
  const int64_t neg[] = {3, -2};
  EXPECT_NE(place_requests(neg, none).status().message().find("loads[1] = -2"), std::string::npos);
  const int64_t bad_cost[] = {4, -1};
  EXPECT_NE(place_requests(none, bad_cost).status().message().find("costs[1] = -1"),
            std::string::npos);
  EXPECT_EQ(placement_cost(100, 28), 128);
}

}  // namespace
}  // namespace dsa::engine
