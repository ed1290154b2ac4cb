#include "dsa/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace dsa {
namespace {

TEST(ThreadPool, CallsEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t i) { hits[size_t(i)]++; });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, NestedCallsRunSeriallyWithoutDeadlock) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  pool.parallel_for(8, [&](int64_t) { pool.parallel_for(5, [&](int64_t) { total++; }); });
  EXPECT_EQ(total.load(), 40);
}

TEST(ThreadPool, ManyJobsInARow) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int j = 0; j < 200; ++j) pool.parallel_for(17, [&](int64_t i) { sum += i; });
  EXPECT_EQ(sum.load(), 200 * (16 * 17 / 2));
}

TEST(ThreadPool, DefaultPoolWorks) {
  std::atomic<int> n{0};
  parallel_for(10, [&](int64_t) { n++; });
  EXPECT_EQ(n.load(), 10);
}

}  // namespace
}  // namespace dsa
