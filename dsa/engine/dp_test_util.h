// Helpers for the DP tests: run one function per rank, each on its own thread, over a LocalGroup.
#pragma once

#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "dsa/dist/local_group.h"

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

}  // namespace dsa::engine::testing
