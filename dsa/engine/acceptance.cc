#include "dsa/engine/acceptance.h"

#include <limits>

namespace dsa::engine {

AcceptResult accept_drafts(std::span<const float> verify_logits, int32_t vocab,
                           std::span<const int32_t> drafts, const SamplingParams& p,
                           int64_t first_position) {
  DSA_CHECK(vocab > 0);
  DSA_CHECK(verify_logits.size() == (drafts.size() + 1) * static_cast<size_t>(vocab));
  DSA_CHECK(validate(p).ok());
  const auto d = static_cast<int64_t>(drafts.size());
  DSA_CHECK(first_position >= 0 && first_position + d <= std::numeric_limits<int32_t>::max());

  AcceptResult r;
  r.emitted.reserve(drafts.size() + 1);
  for (int64_t j = 0;; ++j) {
    const auto row = verify_logits.subspan(static_cast<size_t>(j) * static_cast<size_t>(vocab),
                                           static_cast<size_t>(vocab));
    const int32_t y = kernels::sample_token(row, p, first_position + j);
    r.emitted.push_back(y);
    // y_{C+j+1} against g_{j+1}; kNoToken never accepts a draft.
    if (j == d || y == kNoToken || y != drafts[static_cast<size_t>(j)]) break;
    ++r.accepted;
  }
  return r;
}

}  // namespace dsa::engine
