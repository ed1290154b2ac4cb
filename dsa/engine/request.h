// A generation request and its state inside the engine (SPEC.md §6.1).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/sampling/sampler.h"
#include "dsa/model/text_stream.h"

namespace dsa::engine {

// The sampling rules live with their op (kernels/sampling); a request carries their params.
using kernels::SamplingParams;

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included if wanted
  int32_t max_new_tokens = 64;
  SamplingParams sampling;
  // Finish when one of these ids is emitted (it stays in the output, as EOS does).
  std::vector<int32_t> stop_token_ids;
  // Finish when the decoded text contains one of these (matched across token boundaries); the
  // text ends before it. Needs the engine's tokenizer (EngineOptions::tokenizer).
  std::vector<std::string> stop;
  bool ignore_eos = false;  // EOS is an ordinary token (benchmarks with a fixed output length)
};

enum class FinishReason {
  kNone,
  kEos,
  kStopToken,
  kStopString,
  kMaxNewTokens,
  kMaxContext,
  kError,    // this request failed alone (RequestState::error says why); the others go on
  kAborted,  // the caller gave up on it (Engine::abort: a client went away, a shutdown)
};
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
  // The overlapped decode (engine.h, SPEC.md §6.7 F = 1): tokens sampled by launched decodes and
  // not yet read back (`committed` already counts their KV), and while `pending` is not known on
  // the host, the launch that sampled it and its row there.
  // >= 0: `drafts` (placeholders) are kept in the model's draft slots, row drafts_row of the last
  // chain drafted there (Engine::draft_chain); the host reads them only if it needs them.
  int32_t drafts_row = -1;
  int32_t in_flight = 0;
  int64_t pending_launch = -1;
  int32_t pending_row = -1;
  FinishReason finish = FinishReason::kNone;
  Status error;            // why, when finish == kError
  model::TextStream text;  // the output decoded so far (with a tokenizer)
  std::chrono::steady_clock::time_point arrived, first_token, done;

  // Bytes of text() that can no longer change: all of it once finished, else all but the longest
  // stop-string prefix that may still be completing (never inside a UTF-8 character).
  size_t stable_text_size() const;

  int32_t prompt_len() const { return static_cast<int32_t>(req.prompt.size()); }
  // Token at absolute position p (prompt, then emitted tokens).
  int32_t token_at(int32_t p) const {
    return p < prompt_len() ? req.prompt[size_t(p)] : output[size_t(p - prompt_len())];
  }
};

}  // namespace dsa::engine
