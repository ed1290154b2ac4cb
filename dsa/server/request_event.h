// What a request's HTTP thread reads from its channel (engine_loop.h): text deltas as they become
// final, then the finish. The rank processes of `dsa serve` with one process per rank send the
// same events to the front (rank_wire.h).
#pragma once

#include <cstdint>
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

}  // namespace dsa::server
