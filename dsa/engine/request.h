// A generation request and its state inside the engine (SPEC.md §6.1).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dsa/engine/accept_stats.h"
#include "dsa/kernels/sampling/sampler.h"

namespace dsa::engine {

// The sampling rules live with their op (kernels/sampling); a request carries their params.
using kernels::SamplingParams;

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included if wanted
  int32_t max_new_tokens = 64;
  SamplingParams sampling;
};

enum class FinishReason { kNone, kEos, kMaxNewTokens, kMaxContext };
std::string_view finish_reason_name(FinishReason r);

enum class RequestPhase { kWaiting, kPrefill, kDecode, kFinished };

struct RequestState {
  int64_t id = 0;
  GenerationRequest req;
  RequestPhase phase = RequestPhase::kWaiting;
  int32_t req_slot = 0;                 // page-table row while running
  int32_t prefilled = 0;                // prompt tokens whose target KV is written
  int32_t committed = 0;                // C: tokens with KV in the target (and MTP) caches
  int32_t pending = -1;                 // x_C: sampled, no KV yet
  std::vector<int32_t> drafts;          // g_1..g_d for positions C + 1..C + d
  std::vector<int32_t> output;          // emitted tokens
  std::vector<int32_t> accept_lengths;  // a + 1 per speculative step
  AcceptStats accept;                   // the same steps as a histogram (request_figures)
  FinishReason finish = FinishReason::kNone;
  std::chrono::steady_clock::time_point arrived, first_token, done;

  int32_t prompt_len() const { return static_cast<int32_t>(req.prompt.size()); }
  // Token at absolute position p (prompt, then emitted tokens).
  int32_t token_at(int32_t p) const {
    return p < prompt_len() ? req.prompt[size_t(p)] : output[size_t(p - prompt_len())];
  }
};

}  // namespace dsa::engine
