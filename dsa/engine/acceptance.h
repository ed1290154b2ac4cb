// Acceptance of top-1 drafts (SPEC.md §6.2, §6.3) as a pure function of the verify logits.
// Row j of TARGET_VERIFY predicts absolute position C + j + 1, where the target samples
// y_{C+j+1} = sample_token(row j, p, C + j + 1). Draft g_j is accepted iff g_j = y_{C+j}, for
// j = 1.. until the first mismatch; with a accepted the step emits g_1..g_a and then y_{C+a+1} (the
// correction at the mismatch, or the bonus when a = d). At temperature 0 this is greedy acceptance;
// at temperature > 0 it is exact speculative rejection sampling for a one-hot drafter, and the
// emitted tokens equal non-speculative sampling with the same seed, token for token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsa/kernels/sampling/sampler.h"

namespace dsa::engine {

using kernels::kNoToken;
using kernels::SamplingParams;

struct AcceptResult {
  int32_t accepted = 0;          // a, 0..d
  std::vector<int32_t> emitted;  // g_1..g_a then y: a + 1 tokens
};

// verify_logits: [d + 1, vocab] fp32, row j = the target's logits for position first_position + j.
// drafts: [d] g_1..g_d (any int32; an out-of-vocabulary id is simply rejected).
// first_position: the absolute position row 0 predicts, C + 1.
// Preconditions (DSA_CHECK): vocab > 0, verify_logits.size() == (d + 1) vocab, validate(p) ok,
// 0 <= first_position and first_position + d < 2^31. Rows past the first mismatch are not read.
// The last emitted token is kNoToken only if its row has no eligible token (all NaN / -inf).
AcceptResult accept_drafts(std::span<const float> verify_logits, int32_t vocab,
                           std::span<const int32_t> drafts, const SamplingParams& p,
                           int64_t first_position);

}  // namespace dsa::engine
