#include "dsa/server/engine_loop.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsa/core/log.h"

namespace dsa::server {

std::vector<RequestEvent> RequestChannel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<RequestEvent> out(std::make_move_iterator(events_.begin()),
                                std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

void RequestChannel::push(RequestEvent e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_one();
}

EngineLoop::EngineLoop(std::vector<model::DsaModel*> models, EngineLoopOptions limits,
                       ServerMetrics* metrics)
    : models_(std::move(models)),
      limits_(limits),
      metrics_(metrics),
      active_(models_.size()),
      to_release_(models_.size()),
      placed_(models_.size(), 0),
      steps_(models_.size(), 0) {}

EngineLoop::EngineLoop(model::DsaModel& model, engine::EngineOptions options,
                       EngineLoopOptions limits, ServerMetrics* metrics)
    : EngineLoop(std::vector<model::DsaModel*>{&model}, limits, metrics) {
  // One rank: the engine alone (its SoloCollective), exactly as before --dp-size existed.
  solo_ = std::make_unique<engine::Engine>(model, routed(std::move(options), 0));
  ranks_ = {solo_.get()};
}

StatusOr<std::unique_ptr<EngineLoop>> EngineLoop::create(std::vector<model::DsaModel*> models,
                                                         engine::EngineOptions options,
                                                         EngineLoopOptions limits,
                                                         ServerMetrics* metrics) {
  if (models.size() == 1 && models[0] != nullptr) {
    return std::make_unique<EngineLoop>(*models[0], std::move(options), limits, metrics);
  }
  std::unique_ptr<EngineLoop> loop(new EngineLoop(models, limits, metrics));
  EngineLoop* self = loop.get();
  DSA_ASSIGN_OR_RETURN(
      loop->group_, engine::DpEngineGroup::create(std::move(models), options, engine::kDpWatchdog,
                                                  [self](int32_t rank, engine::EngineOptions& o) {
                                                    o = self->routed(std::move(o), rank);
                                                  }));
  for (int32_t r = 0; r < loop->group_->world_size(); ++r) {
    loop->ranks_.push_back(&loop->group_->engine(r));
  }
  return loop;
}

engine::EngineOptions EngineLoop::routed(engine::EngineOptions options, int32_t rank) {
  options.on_tokens = [this, rank](const engine::RequestState& r, std::span<const int32_t> t) {
    on_tokens(rank, r, t);
  };
  options.on_finish = [this, rank](const engine::RequestState& r) { on_finish(rank, r); };
  return options;
}

bool EngineLoop::has_work() const {
  for (const engine::Engine* e : ranks_) {
    if (e->has_work()) return true;
  }
  return false;
}

// Every rank steps when any has work (group_: the ranks' collectives pair up).
Status EngineLoop::step() {
  if (!group_) {
    DSA_RETURN_IF_ERROR(solo_->step());
    ++steps_[0];
    return ok_status();
  }
  DSA_RETURN_IF_ERROR(group_->step_all());
  for (size_t r = 0; r < steps_.size(); ++r) steps_[r] += group_->steps()[r];
  return ok_status();
}

EngineLoop::~EngineLoop() {
  shutdown(std::chrono::steady_clock::now());
  join();
}

void EngineLoop::start() {
  thread_ = std::thread([this] { run(); });
}

void EngineLoop::join() {
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::shutdown(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_ || deadline < deadline_) deadline_ = deadline;
    stopping_ = true;
  }
  cv_.notify_one();
}

StatusOr<std::shared_ptr<RequestChannel>> EngineLoop::submit(engine::GenerationRequest req,
                                                             bool stream, std::string tag) {
  std::shared_ptr<RequestChannel> channel;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return failed_precondition("the server is shutting down");
    if (failed_.load()) return failed_precondition("the engine failed; see the server log");
    const int64_t cap = limits_.max_running + limits_.max_queued;
    if (in_flight_.load() >= cap) {
      return resource_exhausted(fmt::format(
          "the server is at capacity: {} requests in flight ({} running + {} queued); retry later",
          in_flight_.load(), limits_.max_running, limits_.max_queued));
    }
    channel = std::make_shared<RequestChannel>(stream);
    channel->tag_ = std::move(tag);
    incoming_.push_back({std::move(req), channel});
    ++in_flight_;
  }
  cv_.notify_one();
  return channel;
}

void EngineLoop::run() {
  update_gauges();
  while (true) {
    std::vector<Submission> incoming;
    bool stopping = false;
    std::chrono::steady_clock::time_point deadline;
    {
      std::unique_lock lock(mu_);
      // The engine is touched only by this thread, so reading has_work() here is safe.
      cv_.wait(lock,
               [&] { return !incoming_.empty() || stopping_ || (has_work() && !failed_.load()); });
      incoming.swap(incoming_);
      stopping = stopping_;
      deadline = deadline_;
    }
    admit(std::move(incoming));
    abort_cancelled(stopping && std::chrono::steady_clock::now() >= deadline);
    if (has_work() && !failed_.load()) {
      Status s;
      try {
        s = step();
      } catch (const std::exception& e) {  // out of memory, a bug: this thread must not die
        s = internal_error(fmt::format("engine step: {}", e.what()));
      }
      if (!s.ok()) {
        // A failed step concerns the whole batch: every request in it fails, and no more are
        // taken (the engine's state after a failed forward is not trusted).
        DSA_LOG_ERROR("engine step failed: {}", s.to_string());
        failed_.store(true);
        fail_all(s);
      }
    }
    bool idle = true;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      for (int64_t id : to_release_[r]) (void)ranks_[r]->release(id);
      to_release_[r].clear();
      idle = idle && active_[r].empty();
    }
    update_gauges();
    if (stopping && idle) {
      std::lock_guard lock(mu_);
      if (incoming_.empty()) break;
    }
  }
}

void EngineLoop::admit(std::vector<Submission> incoming) {
  for (Submission& s : incoming) {
    const int32_t prompt_tokens = int32_t(s.req.prompt.size());
    // By load over the ranks (DpEngineGroup::add_request), or the one engine.
    StatusOr<engine::DpRequestId> id = internal_error("not placed");
    if (group_) {
      id = group_->add_request(std::move(s.req));
    } else if (StatusOr<int64_t> one = solo_->add_request(std::move(s.req)); one.ok()) {
      id = engine::DpRequestId{0, *one};
    } else {
      id = one.status();
    }
    if (!id.ok()) {
      DSA_LOG_WARN("{}: refused by the engine: {}", s.channel->tag_, id.status().to_string());
      RequestEvent e;
      e.kind = RequestEvent::Kind::kFinished;
      e.finish = engine::FinishReason::kError;
      e.error = id.status();
      e.prompt_tokens = prompt_tokens;
      finish_channel(*s.channel, std::move(e));
      continue;
    }
    s.channel->rank_ = id->rank;
    s.channel->engine_id_ = id->id;
    ++placed_[size_t(id->rank)];
    active_[size_t(id->rank)][id->id] = std::move(s.channel);
  }
}

void EngineLoop::abort_cancelled(bool all) {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    std::vector<int64_t> ids;
    for (const auto& [id, c] : active_[r]) {
      if (all || c->cancelled()) ids.push_back(id);
    }
    for (int64_t id : ids) {
      if (Status s = ranks_[r]->abort(id); !s.ok()) {
        DSA_LOG_WARN("abort of request {} (dp rank {}): {}", id, r, s.to_string());
      }
    }
  }
}

void EngineLoop::fail_all(const Status& why) {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    std::map<int64_t, std::shared_ptr<RequestChannel>>& active = active_[r];
    std::vector<int64_t> ids;
    for (const auto& [id, c] : active) ids.push_back(id);
    for (int64_t id : ids) {
      auto it = active.find(id);
      if (it == active.end()) continue;
      std::shared_ptr<RequestChannel> c = it->second;
      active.erase(it);  // first: on_finish (called by abort) then leaves the channel alone
      (void)ranks_[r]->abort(id);  // frees its pages if the engine can still do so
      RequestEvent e;
      e.kind = RequestEvent::Kind::kFinished;
      e.finish = engine::FinishReason::kError;
      e.error = why;
      finish_channel(*c, std::move(e));
    }
  }
}

void EngineLoop::finish_channel(RequestChannel& c, RequestEvent e) {
  --in_flight_;  // first: a reader woken by the finish sees the slot free
  c.push(std::move(e));
}

void EngineLoop::on_tokens(int32_t rank, const engine::RequestState& r,
                           std::span<const int32_t> tokens) {
  std::map<int64_t, std::shared_ptr<RequestChannel>>& active = active_[size_t(rank)];
  auto it = active.find(r.id);
  if (it == active.end() || !it->second->stream()) return;
  RequestChannel& c = *it->second;
  const size_t stable = r.stable_text_size();
  if (stable <= c.text_sent_) return;  // nothing final yet (a partial character, a stop prefix)
  RequestEvent e;
  e.text = r.text.text().substr(c.text_sent_, stable - c.text_sent_);
  e.num_tokens = int32_t(tokens.size());
  c.text_sent_ = stable;
  c.push(std::move(e));
}

// ", dp rank 1" in the log with --dp-size > 1 (request ids are per rank).
std::string EngineLoop::where(int32_t rank) const {
  return group_ ? fmt::format(", dp rank {}", rank) : std::string();
}

void EngineLoop::on_finish(int32_t rank, const engine::RequestState& r) {
  std::map<int64_t, std::shared_ptr<RequestChannel>>& active = active_[size_t(rank)];
  auto it = active.find(r.id);
  if (it == active.end()) return;  // fail_all answers the channel itself
  std::shared_ptr<RequestChannel> c = std::move(it->second);
  active.erase(it);
  to_release_[size_t(rank)].push_back(r.id);
  const engine::RequestFigures f = engine::request_figures(r, limits_.num_draft_tokens);
  if (metrics_ != nullptr) metrics_->request_finished(r, f);
  const std::string& text = r.text.text();
  RequestEvent e;
  e.kind = RequestEvent::Kind::kFinished;
  e.finish = r.finish;
  e.error = r.error;
  e.full_text = text;
  e.text = text.substr(std::min(c->text_sent_, text.size()));
  e.prompt_tokens = r.prompt_len();
  e.completion_tokens = int32_t(r.output.size());
  if (r.output.empty()) {
    DSA_LOG_INFO("{} (request {}{}): {} prompt tokens, no completion, {}{}", c->tag_, r.id,
                 where(rank), r.prompt_len(), engine::finish_reason_name(r.finish),
                 r.finish == engine::FinishReason::kError ? ": " + r.error.to_string() : "");
  } else {
    DSA_LOG_INFO(
        "{} (request {}{}): {} prompt + {} completion tokens, ttft {:.1f} ms, tpot {:.1f} ms, "
        "accept length {:.2f}, {}{}",
        c->tag_, r.id, where(rank), r.prompt_len(), r.output.size(), 1000 * f.ttft_s,
        1000 * f.tpot_s, f.accept_length_mean, engine::finish_reason_name(r.finish),
        r.finish == engine::FinishReason::kError ? ": " + r.error.to_string() : "");
  }
  finish_channel(*c, std::move(e));
}

void EngineLoop::update_gauges() {
  if (metrics_ == nullptr) return;
  size_t queued = 0;
  {
    std::lock_guard lock(mu_);
    queued = incoming_.size();
  }
  // The totals are every rank's merged (the accept statistics as EngineMetrics::merge_rank merges
  // them for `dsa generate --dp`, without its per-request latency lists, which only grow); each
  // rank's share goes out labelled with its rank.
  int64_t running = 0, waiting = 0, used = 0, free = 0, emitted = 0;
  engine::AcceptStats accept = ranks_[0]->metrics().accept;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const engine::Engine& e = *ranks_[r];
    const runtime::PagedCacheManager& pages = models_[r]->pages();
    const int64_t usable = pages.num_pages() - 1;  // page 0 is the reserved dummy page
    const int64_t rank_used = usable - pages.num_free_pages();
    running += int64_t(e.num_running());
    waiting += int64_t(e.num_waiting());
    used += rank_used;
    free += pages.num_free_pages();
    if (r > 0) accept.merge(e.metrics().accept);
    emitted += e.metrics().emitted;
    metrics_->set_rank(int32_t(r), {.running = int64_t(e.num_running()),
                                    .waiting = int64_t(e.num_waiting()),
                                    .kv_pages_used = rank_used,
                                    .steps = steps_[r],
                                    .placed = placed_[r]});
  }
  metrics_->set_requests(running, waiting + int64_t(queued));
  metrics_->set_kv_pages(used, free);
  metrics_->set_accept_stats(accept);
  metrics_->add_generation_tokens(emitted - emitted_seen_);
  emitted_seen_ = emitted;
}

}  // namespace dsa::server
