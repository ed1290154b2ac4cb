// The messages of `dsa serve` with one process per rank (docs/multi_gpu.md, "dsa serve over rank
// processes"). Once per step every rank sends one text to every other (dist::all_gather_text over
// the process group): rank 0, the HTTP front, sends a FrontControl (the requests it placed on the
// other ranks since the last exchange, the aborts, the shutdown); every other rank sends a
// RankReport (the events of its requests since the last exchange, and its gauges).
//
// The encoding is CBOR (nlohmann::json::to_cbor) with every piece of generated text as a byte
// string: a token's bytes need not be valid UTF-8 (a byte-fallback token), and the front must see
// exactly the bytes the rank decoded. Decoding checks every field's type and range and names the
// first bad one, so a corrupt message is a Status, never a crash.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/dist/collective.h"
#include "dsa/engine/request.h"
#include "dsa/server/request_event.h"

namespace dsa::server::wire {

// A request the front placed on rank `rank`; `front_id` names it in both directions.
struct PlacedRequest {
  int32_t rank = 0;
  int64_t front_id = 0;
  bool stream = false;  // whether the rank sends text deltas before the finish
  engine::GenerationRequest req;
};

struct FrontControl {
  std::vector<PlacedRequest> admit;
  std::vector<int64_t> abort;  // front ids; each rank aborts those it owns
  bool abort_all = false;      // the shutdown's grace period is over
  bool stop = false;           // this is the last exchange: every rank leaves its loop
};

// One event of a request a rank owns. For a finish, the figures the front's metrics and log line
// take (the request's RequestState stays on its rank).
struct RankEvent {
  int64_t front_id = 0;
  RequestEvent event;
  double ttft_s = 0, e2e_s = 0, tpot_s = 0, accept_length = 1;
};

// A rank's gauges after its last step (server_metrics.h's RankFigures and the merged totals).
struct RankStatus {
  int64_t load = 0;  // Engine::load(): the front places by it
  int64_t running = 0, waiting = 0;
  int64_t kv_pages_used = 0, kv_pages_free = 0;
  int64_t steps = 0, emitted = 0;
  std::vector<int64_t> accept_histogram;  // AcceptStats::histogram(), [d + 1]
};

struct RankReport {
  std::vector<RankEvent> events;
  RankStatus status;
};

std::string encode(const FrontControl& c);
std::string encode(const RankReport& r);
// InvalidArgument naming the field for a message that is not one of these (a truncated or corrupt
// text, a field of the wrong type, a negative count, an unknown finish reason).
StatusOr<FrontControl> decode_control(std::string_view bytes);
StatusOr<RankReport> decode_report(std::string_view bytes);

// The exchange every rank makes once per iteration of its loop, in the same order on every rank:
// every rank's text to every rank ([world size], rank r's at r), then the vote.
StatusOr<std::vector<std::string>> exchange(dist::Collective& group, std::string_view mine);
// After the exchange, one max all-reduce: whether any rank has work (then every rank steps), and
// whether any rank holds events for the front that were made after its report (a refusal, an
// abort's finish: then the front makes the next exchange at once instead of waiting idle).
struct Vote {
  bool work = false, events = false;
};
StatusOr<Vote> vote(dist::Collective& group, bool work, bool events);

// How long the front waits between exchanges while no rank has work: the other ranks wait in the
// exchange meanwhile, and the group's watchdog must not take an idle server for a dead rank.
inline constexpr std::chrono::milliseconds kIdleExchange{1000};

}  // namespace dsa::server::wire
