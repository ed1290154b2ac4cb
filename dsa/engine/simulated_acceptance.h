// Simulated acceptance for benchmarks (issue 16 item 6; SGLang's SGLANG_SIMULATE_ACC_LEN,
// TensorRT-LLM's forced accepted tokens, vLLM's synthetic acceptance). Random weights draft
// nothing the target agrees with, so the real accept length is ~1 and a benchmark would measure
// the wrong step. With a simulated mean accept length L every draft and verify forward still
// runs at its true shape; only the *count* of accepted drafts is drawn instead of decided.
//
// Distribution: a = floor(L - 1) + B, B ~ Bernoulli(frac(L - 1)) — the two-point distribution on
// the integers around L - 1, so E[a + 1] = L exactly and the per-step variance is at most 1/4 (the
// least any integer-valued a with that mean can have: measured means converge fastest). The
// Bernoulli is keyed by (the request's seed, the step's first position C + 1) through SplitMix64:
// deterministic per request, independent of the batch it runs in.
//
// Emitted tokens (the consistent rule): g_1..g_a, then y = the target's own sample from verify row
// a (position C + a + 1). TARGET_VERIFY wrote the KV of exactly [x_C, g_1..g_a] at positions
// C..C + a, so the committed cache holds the emitted tokens, and y is what the target predicts
// after that prefix: the next verify starts from a state a real run with these tokens would have.
// (Emitting the target's tokens y_{C+1}..y_{C+a} instead, as SGLang's simulation does, would leave
// the KV of drafts the output never contains at those positions.) When the real acceptance would
// have taken at least a drafts the two rules agree and the output is the target's own.
#pragma once

#include <cstdint>
#include <span>

#include "dsa/core/status.h"
#include "dsa/engine/acceptance.h"

namespace dsa::engine {

// InvalidArgument unless d >= 1 and 1 <= accept_length <= d + 1 (and finite).
Status validate_simulated_accept_length(double accept_length, int32_t d);

// The drawn a in [0, d] for one (request, step); accept_length must be valid for d.
int32_t simulated_accepted(double accept_length, int32_t d, uint64_t seed, int64_t first_position);

// As accept_drafts (same arguments), but with a = `accepted` forced: emits g_1..g_a and the
// target's sample from row a. Rows past a are not read.
AcceptResult force_acceptance(std::span<const float> verify_logits, int32_t vocab,
                              std::span<const int32_t> drafts, const SamplingParams& p,
                              int64_t first_position, int32_t accepted);

}  // namespace dsa::engine
