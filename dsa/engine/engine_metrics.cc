#include "dsa/engine/engine.h"

namespace dsa::engine {

double EngineMetrics::mean_accept_length() const {
  int64_t steps = 0, total = 0;
  for (size_t a = 0; a < accept_histogram.size(); ++a) {
    steps += accept_histogram[a];
    total += accept_histogram[a] * int64_t(a + 1);
  }
  return steps ? double(total) / double(steps) : 0.0;
}

std::vector<double> EngineMetrics::per_position_acceptance() const {
  // reach_j = steps with a >= j.
  const size_t d = accept_histogram.empty() ? 0 : accept_histogram.size() - 1;
  std::vector<int64_t> reach(d + 1, 0);
  for (size_t a = 0; a <= d; ++a) {
    for (size_t j = 0; j <= a; ++j) reach[j] += accept_histogram[a];
  }
  std::vector<double> out;
  for (size_t j = 1; j <= d; ++j)
    out.push_back(reach[j - 1] ? double(reach[j]) / double(reach[j - 1]) : 0.0);
  return out;
}

}  // namespace dsa::engine
