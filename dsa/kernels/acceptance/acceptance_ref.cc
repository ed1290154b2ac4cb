#include <fmt/format.h>

#include <limits>
#include <span>

#include "dsa/kernels/acceptance/acceptance.h"
#include "dsa/kernels/sampling/sampler.h"

namespace dsa::kernels {

Status validate(const AcceptanceParams& p) {
  if (p.requests < 0) {
    return invalid_argument(fmt::format("acceptance: requests = {}: must be >= 0", p.requests));
  }
  if (p.drafts_per_request < 0) {
    return invalid_argument(
        fmt::format("acceptance: drafts_per_request = {}: must be >= 0", p.drafts_per_request));
  }
  if (p.vocab < 1) {
    return invalid_argument(fmt::format("acceptance: vocab = {}: must be >= 1", p.vocab));
  }
  if (p.row_stride != 0 && p.row_stride < p.vocab) {
    return invalid_argument(fmt::format("acceptance: row_stride = {}: must be 0 or >= vocab = {}",
                                        p.row_stride, p.vocab));
  }
  const int64_t rows = int64_t{p.requests} * (int64_t{p.drafts_per_request} + 1);
  if (rows > std::numeric_limits<int32_t>::max()) {
    return invalid_argument(fmt::format(
        "acceptance: requests * (drafts_per_request + 1) = {}: must be <= 2^31 - 1", rows));
  }
  if (p.requests > 0) {
    if (p.logits == nullptr) return invalid_argument("acceptance: logits is null");
    if (p.drafts == nullptr && p.drafts_per_request > 0) {
      return invalid_argument("acceptance: drafts is null");
    }
    if (!p.greedy) {
      if (p.temperature == nullptr) return invalid_argument("acceptance: temperature is null");
      if (p.top_p == nullptr) return invalid_argument("acceptance: top_p is null");
      if (p.top_k == nullptr) return invalid_argument("acceptance: top_k is null");
      if (p.seed == nullptr) return invalid_argument("acceptance: seed is null");
      if (p.first_position == nullptr) {
        return invalid_argument("acceptance: first_position is null");
      }
    }
    if (p.accepted == nullptr) return invalid_argument("acceptance: accepted is null");
    if (p.emitted == nullptr) return invalid_argument("acceptance: emitted is null");
  }
  if ((p.draft_slots == nullptr) != (p.draft_index == nullptr)) {
    return invalid_argument("acceptance: draft_slots and draft_index: set both or neither");
  }
  if (p.draft_index != nullptr && p.draft_index_bound < 1) {
    return invalid_argument(fmt::format(
        "acceptance: draft_index_bound = {}: must be >= 1 with draft_index", p.draft_index_bound));
  }
  return ok_status();
}

namespace {

// Request b's sampling params and first position (+ its shift), with the checks the header names.
Status request_sampling(const AcceptanceParams& p, int32_t b, SamplingParams* sp, int64_t* first) {
  const int64_t d = p.drafts_per_request;
  *sp = SamplingParams{p.temperature[b], p.top_p[b], p.top_k[b], p.seed[b]};
  if (Status s = validate(*sp); !s.ok()) {
    return invalid_argument(fmt::format("acceptance: request {}: {}", b, s.message()));
  }
  const int64_t shift = p.shift_accepted != nullptr ? p.shift_accepted[b] : 0;
  if (shift < 0 || shift > d) {
    return invalid_argument(fmt::format(
        "acceptance: request {}: shift_accepted = {}: must be in [0, {}]", b, shift, d));
  }
  *first = int64_t{p.first_position[b]} + shift;
  if (*first < 0 || *first + d > std::numeric_limits<int32_t>::max()) {
    return invalid_argument(
        fmt::format("acceptance: request {}: first_position{} = {}: must be in [0, 2^31 - 1 - {}]",
                    b, p.shift_accepted != nullptr ? " + shift_accepted" : "", *first, d));
  }
  return ok_status();
}

}  // namespace

Status accept_drafts_ref(const AcceptanceParams& p) {
  DSA_RETURN_IF_ERROR(validate(p));
  const int64_t d = p.drafts_per_request, n = d + 1;
  const int64_t stride = p.row_stride != 0 ? p.row_stride : p.vocab;
  for (int32_t b = 0; b < p.requests; ++b) {
    // `greedy`: every row at temperature 0, where the position is not read (nor the shift).
    SamplingParams sp;
    int64_t first = 0;
    if (!p.greedy) DSA_RETURN_IF_ERROR(request_sampling(p, b, &sp, &first));
    const float* rows = p.logits + b * n * stride;
    // The drafts, each from its slot where the index keeps one (every index checked first).
    const int32_t* drafts = p.drafts + b * d;
    const int32_t* index = p.draft_index != nullptr ? p.draft_index + b * d : nullptr;
    for (int64_t j = 0; index != nullptr && j < d; ++j) {
      if (!draft_index_ok(index[j], p.draft_index_bound)) {
        return invalid_argument(
            fmt::format("acceptance: request {}: draft_index[{}] = {}: must be in [-1, {})", b,
                        b * d + j, index[j], p.draft_index_bound));
      }
    }
    int32_t* out = p.emitted + b * n;
    int32_t a = 0;
    for (;; ++a) {
      const std::span<const float> row(rows + a * stride, size_t(p.vocab));
      const int32_t y = sample_token(row, sp, first + a);
      out[a] = y;
      // y_a against g_{a+1}; kNoToken never accepts a draft.
      if (a == d || y == kNoToken || y != request_draft(drafts, index, p.draft_slots, a)) break;
    }
    p.accepted[b] = a;
    for (int64_t j = a + 1; j < n; ++j) out[j] = kNoToken;
  }
  return ok_status();
}

}  // namespace dsa::kernels
