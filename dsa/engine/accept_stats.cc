#include "dsa/engine/accept_stats.h"

#include "dsa/core/check.h"

namespace dsa::engine {

AcceptStats AcceptStats::of_lengths(int32_t num_draft_tokens, std::span<const int32_t> lengths) {
  AcceptStats s(num_draft_tokens);
  for (int32_t len : lengths) s.add(len - 1);
  return s;
}

AcceptStats AcceptStats::of_histogram(std::vector<int64_t> histogram) {
  DSA_CHECK(!histogram.empty());
  AcceptStats s;
  s.histogram_ = std::move(histogram);
  return s;
}

void AcceptStats::add(int32_t accepted) {
  DSA_CHECK(accepted >= 0 && size_t(accepted) < histogram_.size());
  ++histogram_[size_t(accepted)];
}

void AcceptStats::merge(const AcceptStats& other) {
  DSA_CHECK(other.histogram_.size() == histogram_.size());
  for (size_t a = 0; a < histogram_.size(); ++a) histogram_[a] += other.histogram_[a];
}

int64_t AcceptStats::steps() const {
  int64_t n = 0;
  for (int64_t c : histogram_) n += c;
  return n;
}

double AcceptStats::mean_accept_length() const {
  int64_t steps = 0, total = 0;
  for (size_t a = 0; a < histogram_.size(); ++a) {
    steps += histogram_[a];
    total += histogram_[a] * int64_t(a + 1);
  }
  return steps ? double(total) / double(steps) : 1.0;
}

std::vector<double> AcceptStats::per_position_acceptance() const {
  const size_t d = histogram_.size() - 1;
  std::vector<int64_t> reach(d + 1, 0);
  for (size_t a = 0; a <= d; ++a) {
    for (size_t j = 0; j <= a; ++j) reach[j] += histogram_[a];
  }
  std::vector<double> out;
  for (size_t j = 1; j <= d; ++j)
    out.push_back(reach[j - 1] ? double(reach[j]) / double(reach[j - 1]) : 0.0);
  return out;
}

}  // namespace dsa::engine
