// A rank > 0 of `dsa serve` with one process per rank (docs/multi_gpu.md, "dsa serve over rank
// processes"). It owns its engine (its own model, its own requests, its attention) and takes no
// connection: rank 0, the HTTP front, places requests on it. Every iteration of its loop is one
// exchange with every rank (rank_exchange.h): it sends its report (the events of its requests
// since the last exchange, its gauges) and reads the front's control (the requests placed on it,
// the aborts, the stop); then the ranks vote whether any has work, and if one does every rank
// steps, idle ones with padded forwards, so their collectives pair up (SPEC.md §9 bug class 10).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/dist/collective.h"
#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"
#include "dsa/server/rank_wire.h"

namespace dsa::server {

class RankFollower {
 public:
  // `model` and `group` outlive the follower; group.rank() > 0. options.on_tokens / on_finish
  // are replaced (the follower turns them into events for the front).
  RankFollower(model::DsaModel& model, engine::EngineOptions options, dist::Collective& group);

  // Until the front's stop: OK then. A broken group, a corrupt control or a failed step ends it
  // with the error (the process then exits non-zero and its launcher stops the others).
  Status run();

  // Steps taken (every rank takes every step).
  int64_t steps() const { return steps_; }

 private:
  struct Tracked {
    int64_t front_id = 0;
    bool stream = false;
    size_t text_sent = 0;  // bytes already sent as deltas
  };
  void on_tokens(const engine::RequestState& r, std::span<const int32_t> tokens);
  void on_finish(const engine::RequestState& r);
  void apply(const wire::FrontControl& c);
  wire::RankReport take_report();

  model::DsaModel& model_;
  dist::Collective& group_;
  std::unique_ptr<engine::Engine> engine_;
  std::map<int64_t, Tracked> tracked_;  // engine id -> the request's front id and stream state
  std::vector<wire::RankEvent> events_;
  std::vector<int64_t> to_release_;
  int64_t steps_ = 0;
  int32_t num_draft_tokens_ = 0;
};

}  // namespace dsa::server
