// The in-process group: reductions are exact for every world size, results are each rank's own
// copy, and the caller bugs NCCL would hang on (a skipped call, a size or op mismatch) come back
// as errors on every rank within the timeout.
#include "dsa/dist/local_group.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "dsa/testing/watchdog.h"

namespace dsa::dist {
namespace {

using namespace std::chrono_literals;

// Runs fn(rank) on one thread per rank; returns each rank's status.
std::vector<Status> run_ranks(LocalGroup& g, const std::function<Status(Collective&)>& fn) {
  std::vector<Status> out(static_cast<size_t>(g.world_size()));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < g.world_size(); ++r) {
    threads.emplace_back([&, r] { out[size_t(r)] = fn(g.rank(r)); });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(LocalGroup, RejectsBadArguments) {
  auto g = LocalGroup::create(0, 100ms);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("world_size = 0"), std::string::npos)
      << g.status().to_string();
  auto t = LocalGroup::create(2, 0ms);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("timeout = 0 ms"), std::string::npos)
      << t.status().to_string();
}

TEST(LocalGroup, SumAndMaxOverManyCallsAndWorldSizes) {
  for (int32_t world : {1, 2, 3, 8}) {
    auto g = LocalGroup::create(world, 5000ms);
    ASSERT_TRUE(g.ok());
    constexpr int kCalls = 200;
    auto st = run_ranks(**g, [&](Collective& c) -> Status {
      EXPECT_EQ(c.world_size(), world);
      for (int i = 0; i < kCalls; ++i) {
        // Rank-dependent values: a reduction that ignored a rank, or returned this rank's own
        // input, would not give these sums and maxima.
        int64_t v[3] = {c.rank() + 1, i * (c.rank() + 1), -c.rank() * 7};
        const ReduceOp op = i % 2 ? ReduceOp::kMax : ReduceOp::kSum;
        DSA_RETURN_IF_ERROR(c.all_reduce(v, op));
        const int64_t w = world;
        if (op == ReduceOp::kSum) {
          EXPECT_EQ(v[0], w * (w + 1) / 2);
          EXPECT_EQ(v[1], int64_t(i) * w * (w + 1) / 2);
          EXPECT_EQ(v[2], -7 * w * (w - 1) / 2);
        } else {
          EXPECT_EQ(v[0], w);
          EXPECT_EQ(v[1], int64_t(i) * w);
          EXPECT_EQ(v[2], 0);
        }
      }
      return ok_status();
    });
    for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ((*g)->completed(), kCalls);
  }
}

TEST(LocalGroup, ARankThatSkipsACallIsReportedNotAHang) {
  auto g = LocalGroup::create(3, 200ms);
  ASSERT_TRUE(g.ok());
  std::vector<Status> st;
  dsa::testing::within_seconds(10, [&] {
    st = run_ranks(**g, [&](Collective& c) -> Status {
      for (int i = 0; i < 5; ++i) {
        if (c.rank() == 2 && i == 3) return ok_status();  // the broken rank leaves early
        int64_t v[1] = {1};
        DSA_RETURN_IF_ERROR(c.all_reduce(v, ReduceOp::kSum));
      }
      return ok_status();
    });
  });
  EXPECT_EQ((*g)->completed(), 3);
  for (int r : {0, 1}) {
    ASSERT_FALSE(st[size_t(r)].ok());
    const std::string& m = st[size_t(r)].message();
    EXPECT_NE(m.find("watchdog"), std::string::npos) << m;
    EXPECT_NE(m.find("collective #3"), std::string::npos) << m;
    EXPECT_NE(m.find("ranks [2] missing"), std::string::npos) << m;
  }
  // The group stays broken: no later call pairs up with the wrong collective.
  int64_t v[1] = {1};
  EXPECT_FALSE((*g)->rank(2).all_reduce(v, ReduceOp::kSum).ok());
}

TEST(LocalGroup, DifferentSizesOrOpsBreakTheGroupOnEveryRank) {
  for (bool size_differs : {true, false}) {
    auto g = LocalGroup::create(2, 2000ms);
    ASSERT_TRUE(g.ok());
    auto st = run_ranks(**g, [&](Collective& c) -> Status {
      std::vector<int64_t> v(c.rank() == 1 && size_differs ? 3 : 2, 1);
      const ReduceOp op = c.rank() == 1 && !size_differs ? ReduceOp::kMax : ReduceOp::kSum;
      return c.all_reduce(v, op);
    });
    for (const Status& s : st) {
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.message().find("not making the same call"), std::string::npos) << s.to_string();
    }
  }
}

TEST(SoloCollective, IsTheIdentity) {
  SoloCollective solo;
  int64_t v[2] = {5, -3};
  ASSERT_TRUE(solo.all_reduce(v, ReduceOp::kSum).ok());
  EXPECT_EQ(v[0], 5);
  EXPECT_EQ(v[1], -3);
  EXPECT_EQ(solo.world_size(), 1);
}

}  // namespace
}  // namespace dsa::dist
