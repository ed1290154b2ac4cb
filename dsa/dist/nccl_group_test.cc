// The NCCL group at world size 1 (one GPU): the reductions are the identity, the values make the
// round trip through the device, and bad arguments are refused. Skipped without a device.
#include "dsa/dist/nccl_group.h"

#include <gtest/gtest.h>

#include "dsa/testing/gpu_skip.h"

namespace dsa::dist {
namespace {

using namespace std::chrono_literals;

TEST(NcclGroup, WorldSizeOneRoundTrips) {
  DSA_SKIP_WITHOUT_GPU();
  auto id = nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto g = NcclGroup::create(0, 1, *id, 10000ms);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ((*g)->world_size(), 1);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    std::vector<int64_t> v = {3, -7, int64_t(1) << 40, 0, 12};
    const std::vector<int64_t> want = v;
    ASSERT_TRUE((*g)->all_reduce(v, op).ok());
    EXPECT_EQ(v, want);
  }
  std::vector<int64_t> big(NcclGroup::kMaxValues + 1, 1);
  Status s = (*g)->all_reduce(big, ReduceOp::kSum);
  EXPECT_NE(s.message().find("4097 values"), std::string::npos) << s.to_string();
}

// The arguments are checked before any CUDA or NCCL call, so this runs without a device too.
TEST(NcclGroup, RefusesBadArguments) {
  NcclId id{};
  auto g = NcclGroup::create(2, 2, id, 1000ms);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("rank = 2, world_size = 2"), std::string::npos);
  auto t = NcclGroup::create(0, 1, id, 0ms);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("timeout = 0 ms"), std::string::npos);
}

}  // namespace
}  // namespace dsa::dist
