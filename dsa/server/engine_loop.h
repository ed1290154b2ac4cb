// The engine thread: the one thread that owns the engine. HTTP threads submit requests through a
// bounded, thread-safe queue and read each request's events (text deltas, the finish) from its own
// channel; the engine thread takes what was submitted between steps, so requests join the running
// batch at the next step (continuous batching across connections). A channel cancelled by its
// HTTP thread (the client went away) has its request aborted before the next step, which frees its
// pages. Shutdown stops taking requests, lets the running ones finish until a deadline, then
// aborts what is left.
//
// With several models (--dp-size N, the CPU stand-in of DP attention, docs/multi_gpu.md) the loop
// drives an engine::DpEngineGroup: each submitted request is placed on the least-loaded rank as it
// is admitted (dp_placement.h), and whenever any rank has work every rank takes the step, each on
// its own thread (DpEngineGroup::step_all), so the ranks' collectives pair up. Admission, aborts
// and releases happen between steps on this thread, when no rank runs; a rank's token and finish
// callbacks run on that rank's thread and touch only that rank's requests.
//
// With one process per rank (create_front, docs/multi_gpu.md "dsa serve over rank processes") this
// loop is rank 0's, the front: it places each request by load over every rank, steps its own
// engine, and meets the other ranks (rank_follower.h) once per iteration in one exchange
// (rank_wire.h) that carries the requests placed on them and the aborts out, and their requests'
// events and gauges back; then every rank votes and, if any has work, all step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/dist/collective.h"
#include "dsa/engine/dp_engine_group.h"
#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"
#include "dsa/server/rank_wire.h"
#include "dsa/server/request_event.h"
#include "dsa/server/server_metrics.h"

namespace dsa::server {

// One request's channel between the engine thread (writer) and its HTTP thread (reader).
class RequestChannel {
 public:
  explicit RequestChannel(bool stream) : stream_(stream) {}

  // Waits until events arrive or `timeout` passes; returns those that arrived (maybe none).
  std::vector<RequestEvent> wait(std::chrono::milliseconds timeout);
  // The client went away: the engine thread aborts the request before its next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  bool stream() const { return stream_; }

 private:
  friend class EngineLoop;
  void push(RequestEvent e);

  const bool stream_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  // Engine thread only.
  int32_t rank_ = 0;         // the DP rank that owns the request
  int64_t engine_id_ = -1;   // its id on that rank's engine (another process's: the front id)
  bool abort_sent_ = false;  // another process's request: its abort has gone out
  size_t text_sent_ = 0;     // bytes of the request's text already sent as deltas
  std::string tag_;          // the response id, for the log line
};

struct EngineLoopOptions {
  int64_t max_running = 1;   // the engine's running batch (the queue bound adds to it)
  int64_t max_queued = 256;  // requests waiting beyond the running batch before a 429
  int32_t num_draft_tokens = 0;
};

class EngineLoop {
 public:
  // `options.on_tokens` / `on_finish` are replaced (the loop routes them to the channels);
  // `metrics` may be null.
  EngineLoop(model::DsaModel& model, engine::EngineOptions options, EngineLoopOptions limits,
             ServerMetrics* metrics);
  ~EngineLoop();  // shuts down with no grace and joins

  // Runs the loop on a new thread. run() runs it on the calling thread instead, until the
  // shutdown: the CUDA backend keeps its forward stream per thread, so the thread that loaded the
  // model (and captured its graphs) should be the one that steps it.
  void start();
  void run();

  // Queues a request for the engine. ResourceExhausted when max_running + max_queued requests
  // are already in flight (the caller answers 429), Unavailable once shutting down or after the
  // engine failed (503). `tag` names the request in the log.
  StatusOr<std::shared_ptr<RequestChannel>> submit(engine::GenerationRequest req, bool stream,
                                                   std::string tag);

  // Stops taking requests; running and queued ones may finish until `deadline`, then are aborted.
  // May be called again with an earlier deadline. join() waits for the thread to end.
  void shutdown(std::chrono::steady_clock::time_point deadline);
  void join();

  int64_t in_flight() const { return in_flight_.load(); }
  bool failed() const { return failed_.load(); }

  // --dp-size N: one rank per model (the same weights and options, each outliving the loop).
  // InvalidArgument as DpEngineGroup::create (no models, models that differ); one model is the
  // constructor above.
  static StatusOr<std::unique_ptr<EngineLoop>> create(std::vector<model::DsaModel*> models,
                                                      engine::EngineOptions options,
                                                      EngineLoopOptions limits,
                                                      ServerMetrics* metrics);

  // --dp-size N with one process per rank: this loop is rank 0's (the front) over `model`, rank
  // 0's own, and `group`, the process group whose other ranks run RankFollower::run. The loop ends
  // on its own when a step or the group fails (failure() says why): the server then stops, and
  // the launcher with it. InvalidArgument for a group whose rank is not 0.
  static StatusOr<std::unique_ptr<EngineLoop>> create_front(model::DsaModel& model,
                                                            engine::EngineOptions options,
                                                            EngineLoopOptions limits,
                                                            ServerMetrics* metrics,
                                                            dist::Collective& group);

  int32_t world_size() const { return procs_ ? procs_->world_size() : int32_t(ranks_.size()); }
  // Why create_front's loop ended on its own (failed() is then true); OK otherwise.
  Status failure() const;

 private:
  EngineLoop(std::vector<model::DsaModel*> models, EngineLoopOptions limits,
             ServerMetrics* metrics);
  struct Submission {
    engine::GenerationRequest req;
    std::shared_ptr<RequestChannel> channel;
    int32_t prompt_tokens = 0;  // for the refusal's event, once req has been moved
  };

  // Routes a rank's callbacks to this loop (the engine options of every rank).
  engine::EngineOptions routed(engine::EngineOptions options, int32_t rank);
  void on_tokens(int32_t rank, const engine::RequestState& r, std::span<const int32_t> tokens);
  void on_finish(int32_t rank, const engine::RequestState& r);
  bool has_work() const;
  Status step();
  // create_front's loop, its exchange with the other ranks and what it does with their reports.
  void run_front();
  Status exchange_with_ranks(bool stop);
  Status take_report(int32_t rank, const wire::RankReport& report);
  void admit_placed(std::vector<Submission> incoming);
  void finish_remote(int32_t rank, const wire::RankEvent& e);
  void log_finish(const RequestChannel& c, int64_t id, int32_t rank, const RequestEvent& e,
                  double ttft_s, double tpot_s, double accept_length) const;
  std::string where(int32_t rank) const;
  void admit(std::vector<Submission> incoming);
  void admit_on_solo(Submission s);
  void admit_as(Submission s, StatusOr<engine::DpRequestId> id);
  void abort_cancelled(bool all);
  void fail_all(const Status& why);
  void finish_channel(RequestChannel& c, RequestEvent e);
  void update_gauges();

  std::vector<model::DsaModel*> models_;
  EngineLoopOptions limits_;
  ServerMetrics* metrics_;
  std::unique_ptr<engine::Engine> solo_;          // one model
  std::unique_ptr<engine::DpEngineGroup> group_;  // several
  std::vector<engine::Engine*> ranks_;            // the engines, by rank

  mutable std::mutex mu_;  // guards incoming_, stopping_, deadline_, failure_
  std::condition_variable cv_;
  std::vector<Submission> incoming_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> failed_{false};
  std::thread thread_;

  // Per rank, touched by the engine thread between steps and by that rank's thread in a step.
  std::vector<std::map<int64_t, std::shared_ptr<RequestChannel>>> active_;  // engine id -> channel
  std::vector<std::vector<int64_t>> to_release_;
  // Engine thread only.
  std::vector<int64_t> placed_, steps_;  // per rank
  int64_t emitted_seen_ = 0;

  // create_front only (engine thread): the other ranks' requests and state.
  dist::Collective* procs_ = nullptr;
  std::map<int64_t, std::shared_ptr<RequestChannel>> remote_;  // front id -> channel
  wire::FrontControl control_;                                 // what the next exchange carries
  std::vector<wire::RankStatus> remote_status_;                // per rank, at the last exchange
  // Per rank: the load at the last exchange (with what that exchange placed there), and the cost
  // placed there since, not yet seen by it.
  std::vector<int64_t> remote_load_, pending_cost_;
  int64_t next_front_id_ = 1;
  bool any_work_ = false;  // the last vote
  Status failure_;         // guarded by mu_
};

}  // namespace dsa::server
