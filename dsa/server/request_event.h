// What a request's HTTP thread reads from its channel (engine_loop.h): text deltas as they become
// final, then the finish. The rank processes of `dsa serve` with one process per rank send the
// same events to the front (rank_wire.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "dsa/core/status.h"
#include "dsa/engine/request.h"

namespace dsa::server {

struct RequestEvent {
  enum class Kind { kDelta, kFinished };
  Kind kind = Kind::kDelta;
  // kDelta: text that can no longer change (never a split UTF-8 character, never the beginning of
  // a stop string that may still complete), possibly empty; num_tokens: the tokens of this group.
  // kFinished: the rest of the text not yet sent as deltas.
  std::string text;
  int32_t num_tokens = 0;
  // kFinished only.
  engine::FinishReason finish = engine::FinishReason::kNone;
  Status error;  // finish == kError: why (a request the engine refused or failed alone)
  std::string full_text;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
};

// The events of a request's life, built the same way wherever its engine runs (the server's own
// ranks, engine_loop.h, or another rank process, rank_follower.h).
// The text that became final since `*text_sent` bytes were sent, as a delta of `tokens`' group,
// moving *text_sent on; nullopt when nothing is final yet (a partial character, a stop prefix).
std::optional<RequestEvent> delta_event(const engine::RequestState& r,
                                        std::span<const int32_t> tokens, size_t* text_sent);
// The finish of a request whose first `text_sent` bytes went out as deltas.
RequestEvent finished_event(const engine::RequestState& r, size_t text_sent);
// A request that failed (`why`) before or without its engine: a refusal, a broken rank group.
RequestEvent error_event(const Status& why, int32_t prompt_tokens = 0);

}  // namespace dsa::server
