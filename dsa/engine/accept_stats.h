// Accept-length statistics of speculative steps (SPEC.md §6.2): the one definition of the mean
// accept length and the per-position acceptance, kept for the whole engine and for each request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dsa::engine {

class AcceptStats {
 public:
  explicit AcceptStats(int32_t num_draft_tokens = 0)
      : histogram_(static_cast<size_t>(num_draft_tokens) + 1, 0) {}

  // The steps of a request's accept lengths (a + 1 each, 1..d + 1).
  static AcceptStats of_lengths(int32_t num_draft_tokens, std::span<const int32_t> lengths);
  // From histogram() of another instance (another rank's, sent over the wire); [d + 1] entries,
  // none negative (the caller checks).
  static AcceptStats of_histogram(std::vector<int64_t> histogram);

  // One speculative step that accepted `accepted` drafts (0..d).
  void add(int32_t accepted);
  // Every step of `other` (the same d: a check), e.g. another DP rank's.
  void merge(const AcceptStats& other);

  int64_t steps() const;
  // [d + 1]: steps with a = 0..d accepted drafts.
  const std::vector<int64_t>& histogram() const { return histogram_; }
  // Mean of a + 1 (tokens a step commits). 1 without speculative steps: plain decoding commits one
  // token per target forward.
  double mean_accept_length() const;
  // [d]: reach_j / reach_{j-1}, reach_j = steps with a >= j: the fraction of steps accepting draft
  // j among those that accepted draft j - 1 (0 where no step reached j - 1).
  std::vector<double> per_position_acceptance() const;

 private:
  std::vector<int64_t> histogram_;
};

}  // namespace dsa::engine
