// Helpers for the DP tests: run one function per rank, each on its own thread, over a LocalGroup;
// check that every rank of a DpEngineGroup ran the same forwards.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "dsa/dist/local_group.h"
#include "dsa/engine/dp_engine_group.h"
#include "dsa/runtime/forward_mode.h"

namespace dsa::engine::testing {

template <class T>
std::vector<T> run_ranks(dist::LocalGroup& g, const std::function<T(dist::Collective&)>& fn) {
  std::vector<std::optional<T>> got(static_cast<size_t>(g.world_size()));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < g.world_size(); ++r) {
    threads.emplace_back([&, r] { got[static_cast<size_t>(r)].emplace(fn(g.rank(r))); });
  }
  for (auto& t : threads) t.join();
  std::vector<T> out;
  for (auto& v : got) out.push_back(std::move(*v));
  return out;
}

// Every rank ran the same forwards in the same steps (the record of each rank's engine).
inline void expect_same_forwards(DpEngineGroup& g) {
  const std::vector<ForwardRecord>& first = g.engine(0).forward_trace();
  for (int32_t r = 1; r < g.world_size(); ++r) {
    const std::vector<ForwardRecord>& t = g.engine(r).forward_trace();
    ASSERT_EQ(t.size(), first.size()) << "rank " << r;
    for (size_t i = 0; i < t.size(); ++i) {
      ASSERT_EQ(t[i].step, first[i].step) << "rank " << r << ", forward " << i;
      ASSERT_TRUE(t[i].shape == first[i].shape)
          << "rank " << r << ", forward " << i << ": " << runtime::mode_name(t[i].shape.mode)
          << " B_pad " << t[i].shape.batch_pad << " rows_pad " << t[i].shape.rows_pad << " vs "
          << runtime::mode_name(first[i].shape.mode) << " B_pad " << first[i].shape.batch_pad
          << " rows_pad " << first[i].shape.rows_pad;
    }
  }
}

}  // namespace dsa::engine::testing
