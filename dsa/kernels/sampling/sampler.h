// The token sampler (SPEC.md §6.2, §6.3): greedy argmax at temperature 0, else position-keyed
// Gumbel-max over the temperature-scaled, top-k and top-p filtered logits. The noise of token v at
// absolute position p depends only on (seed, p, v), so the sampled token is the same with or
// without speculation, for any d, batch or chunking. Pure functions, no global state.
//
// Rules fixed here (SPEC.md leaves them open):
//  - Order: temperature, then top-k, then top-p on the distribution renormalised after top-k
//    (the HF / vLLM order).
//  - Ordering for top-k and top-p: scaled logit descending, ties by lower token id first; so ties
//    at the top-k boundary keep the lower ids, and so does top-p's prefix.
//  - Eligible tokens: a NaN or -inf logit is never chosen (probability 0). If some logits are +inf,
//    the distribution is uniform over those tokens (the limit of the softmax).
//  - kNoToken is returned only when no token is eligible (an empty row, or all NaN / -inf).
//  - Scores are compared in fp64: scaled logit = double(logit) / double(T) (never overflows), plus
//    double(gamma) with gamma the fp32 noise of §6.3.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dsa/core/status.h"

namespace dsa::kernels {

struct SamplingParams {
  float temperature = 0.f;  // 0 = greedy; else finite and > 0
  float top_p = 1.f;        // in (0, 1]; 1 = off
  int32_t top_k = 0;        // 0 = off; >= vocab keeps every token
  uint64_t seed = 0;        // the request's 64-bit Philox key
};

inline constexpr int32_t kNoToken = -1;

// temperature finite and >= 0; top_p in (0, 1]; top_k >= 0. InvalidArgument names field and value.
Status validate(const SamplingParams& p);

// U_p(v) of §6.3: word (v mod 4) of Philox-4x32-10(key = seed, counter = (v / 4, p, 0, 0)), mapped
// exactly to (floor(w / 2^9) + 1/2) 2^-23. position in [0, 2^31), token >= 0.
float uniform_noise(uint64_t seed, int64_t position, int32_t token);
// gamma_p(v) = -ln(-ln U_p(v)) in fp64, rounded to fp32.
float gumbel_noise(uint64_t seed, int64_t position, int32_t token);

// Greedy: the id of the largest logit, ties to the lowest id; NaN and -inf never win, so a row
// without a value above -inf gives kNoToken.
int32_t argmax_token(std::span<const float> logits);

// The token at absolute position `position` from one row of logits [V]. Temperature 0: argmax, ties
// to the lowest id (one pass, no noise). Else argmax over kept v of scaled logit + gamma_p(v), ties
// to the lowest id. `p` must pass validate().
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, int64_t position);

// pi [V]: the filtered, renormalised distribution sample_token draws from (one-hot on the argmax at
// temperature 0; all zeros when no token is eligible). For tests and the engine's metrics.
std::vector<double> sampling_distribution(std::span<const float> logits, const SamplingParams& p);

}  // namespace dsa::kernels
