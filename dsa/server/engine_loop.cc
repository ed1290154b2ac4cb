#include "dsa/server/engine_loop.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsa/core/log.h"
#include "dsa/engine/dp_placement.h"

namespace dsa::server {

namespace {

// A step's Status, or its exception as one: out of memory or a bug must not end the engine thread
// (and the server with it) unreported.
template <typename F>
Status guarded(F&& step) {
  try {
    return step();
  } catch (const std::exception& e) {
    return internal_error(fmt::format("engine step: {}", e.what()));
  }
}

}  // namespace

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

StatusOr<std::unique_ptr<EngineLoop>> EngineLoop::create_front(model::DsaModel& model,
                                                               engine::EngineOptions options,
                                                               EngineLoopOptions limits,
                                                               ServerMetrics* metrics,
                                                               dist::Collective& group) {
  if (group.rank() != 0) {
    return invalid_argument(fmt::format(
        "engine loop: the front runs on rank 0, this group's rank is {}", group.rank()));
  }
  std::unique_ptr<EngineLoop> loop(new EngineLoop({&model}, limits, metrics));
  const size_t world = size_t(group.world_size());
  loop->procs_ = &group;
  loop->solo_ =
      std::make_unique<engine::Engine>(model, loop->routed(std::move(options), 0), &group);
  loop->ranks_ = {loop->solo_.get()};
  loop->placed_.assign(world, 0);
  loop->steps_.assign(world, 0);
  loop->remote_status_.assign(world, {});
  for (wire::RankStatus& st : loop->remote_status_) {
    st.accept_histogram.assign(size_t(model.options().num_draft_tokens) + 1, 0);
  }
  loop->remote_load_.assign(world, 0);
  loop->pending_cost_.assign(world, 0);
  return loop;
}

Status EngineLoop::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
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
    const int32_t prompt_tokens = int32_t(req.prompt.size());
    incoming_.push_back({std::move(req), channel, prompt_tokens});
    ++in_flight_;
  }
  cv_.notify_one();
  return channel;
}

void EngineLoop::run() {
  if (procs_) {
    run_front();
    return;
  }
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
      const Status s = guarded([this] { return step(); });
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
  if (procs_) {
    admit_placed(std::move(incoming));
    return;
  }
  for (Submission& s : incoming) {
    // By load over the ranks (DpEngineGroup::add_request), or the one engine.
    if (group_) {
      StatusOr<engine::DpRequestId> id = group_->add_request(std::move(s.req));
      admit_as(std::move(s), std::move(id));
    } else {
      admit_on_solo(std::move(s));
    }
  }
}

void EngineLoop::admit_on_solo(Submission s) {
  StatusOr<int64_t> one = solo_->add_request(std::move(s.req));
  if (one.ok()) {
    admit_as(std::move(s), engine::DpRequestId{0, *one});
  } else {
    admit_as(std::move(s), one.status());
  }
}

// The request's place on one of this process's engines, or the engine's refusal, answered at once.
void EngineLoop::admit_as(Submission s, StatusOr<engine::DpRequestId> id) {
  if (!id.ok()) {
    DSA_LOG_WARN("{}: refused by the engine: {}", s.channel->tag_, id.status().to_string());
    finish_channel(*s.channel, error_event(id.status(), s.prompt_tokens));
    return;
  }
  s.channel->rank_ = id->rank;
  s.channel->engine_id_ = id->id;
  ++placed_[size_t(id->rank)];
  active_[size_t(id->rank)][id->id] = std::move(s.channel);
}

void EngineLoop::abort_cancelled(bool all) {
  // Another process's requests: the aborts go out with the next exchange, and each comes back as
  // that request's finish.
  for (auto& [id, c] : remote_) {
    if ((all || c->cancelled()) && !c->abort_sent_) {
      control_.abort.push_back(id);
      c->abort_sent_ = true;
    }
  }
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
  for (auto& [id, c] : remote_) {
    finish_channel(*c, error_event(why));
  }
  remote_.clear();
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
      finish_channel(*c, error_event(why));
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
  if (std::optional<RequestEvent> e = delta_event(r, tokens, &c.text_sent_)) c.push(std::move(*e));
}

// ", dp rank 1" in the log with --dp-size > 1 (request ids are per rank).
std::string EngineLoop::where(int32_t rank) const {
  return group_ || procs_ ? fmt::format(", dp rank {}", rank) : std::string();
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
  RequestEvent e = finished_event(r, c->text_sent_);
  log_finish(*c, r.id, rank, e, f.ttft_s, f.tpot_s, f.accept_length_mean);
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
  // The other processes' ranks, as their last reports gave them.
  for (size_t r = 1; procs_ && r < remote_status_.size(); ++r) {
    const wire::RankStatus& st = remote_status_[r];
    running += st.running;
    waiting += st.waiting;
    used += st.kv_pages_used;
    free += st.kv_pages_free;
    accept.merge(engine::AcceptStats::of_histogram(st.accept_histogram));
    emitted += st.emitted;
    metrics_->set_rank(int32_t(r), {.running = st.running,
                                    .waiting = st.waiting,
                                    .kv_pages_used = st.kv_pages_used,
                                    .steps = st.steps,
                                    .placed = placed_[r]});
  }
  metrics_->set_requests(running, waiting + int64_t(queued));
  metrics_->set_kv_pages(used, free);
  metrics_->set_accept_stats(accept);
  metrics_->add_generation_tokens(emitted - emitted_seen_);
  emitted_seen_ = emitted;
}

void EngineLoop::log_finish(const RequestChannel& c, int64_t id, int32_t rank,
                            const RequestEvent& e, double ttft_s, double tpot_s,
                            double accept_length) const {
  const std::string why =
      e.finish == engine::FinishReason::kError ? ": " + e.error.to_string() : std::string();
  if (e.completion_tokens == 0) {
    DSA_LOG_INFO("{} (request {}{}): {} prompt tokens, no completion, {}{}", c.tag_, id,
                 where(rank), e.prompt_tokens, engine::finish_reason_name(e.finish), why);
    return;
  }
  DSA_LOG_INFO(
      "{} (request {}{}): {} prompt + {} completion tokens, ttft {:.1f} ms, tpot {:.1f} ms, "
      "accept length {:.2f}, {}{}",
      c.tag_, id, where(rank), e.prompt_tokens, e.completion_tokens, 1000 * ttft_s, 1000 * tpot_s,
      accept_length, engine::finish_reason_name(e.finish), why);
}

// Places the arrivals by load over every rank: rank 0's own engine as admit() does, the others'
// into the next exchange's control. A rank's load is the one its last report gave, plus what was
// placed there since it was sent (placement_cost, as dp_placement.h charges it).
void EngineLoop::admit_placed(std::vector<Submission> incoming) {
  if (incoming.empty()) return;
  const size_t world = size_t(procs_->world_size());
  std::vector<int64_t> loads(world), costs;
  loads[0] = solo_->load();
  for (size_t r = 1; r < world; ++r) loads[r] = remote_load_[r] + pending_cost_[r];
  for (const Submission& s : incoming) {
    costs.push_back(
        engine::placement_cost(int64_t(s.req.prompt.size()), int64_t(s.req.max_new_tokens)));
  }
  StatusOr<std::vector<int32_t>> owners = engine::place_requests(loads, costs);
  for (size_t i = 0; i < incoming.size(); ++i) {
    Submission& s = incoming[i];
    const int32_t owner = owners.ok() ? (*owners)[i] : 0;
    if (owner == 0) {
      admit_on_solo(std::move(s));  // rank 0's own engine
      continue;
    }
    const int64_t id = next_front_id_++;
    s.channel->rank_ = owner;
    s.channel->engine_id_ = id;
    ++placed_[size_t(owner)];
    pending_cost_[size_t(owner)] += costs[i];
    control_.admit.push_back({owner, id, s.channel->stream(), std::move(s.req)});
    remote_[id] = std::move(s.channel);
  }
}
// create_front's loop: as run(), but every iteration is one exchange with the other ranks (even
// an idle one, every kIdleExchange, while they wait in it), and the shutdown ends with a last
// exchange that tells them to stop, once no request of any rank is in flight.
void EngineLoop::run_front() {
  update_gauges();
  while (true) {
    std::vector<Submission> incoming;
    bool stopping = false;
    std::chrono::steady_clock::time_point deadline;
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, wire::kIdleExchange,
                   [&] { return !incoming_.empty() || stopping_ || any_work_ || has_work(); });
      incoming.swap(incoming_);
      stopping = stopping_;
      deadline = deadline_;
    }
    admit(std::move(incoming));
    const bool abort_all = stopping && std::chrono::steady_clock::now() >= deadline;
    abort_cancelled(abort_all);
    control_.abort_all = abort_all;
    // Stopping, submit() takes nothing more, so incoming_ stays empty from here.
    const bool stop = stopping && remote_.empty() && active_[0].empty();
    const Status s = guarded([this, stop] { return exchange_with_ranks(stop); });
    if (!s.ok()) {
      // A broken rank group or a failed step: the step's ranks can no longer agree, so the loop
      // ends, every request fails, and the server stops (the launcher stops the other ranks).
      DSA_LOG_ERROR("engine step failed: {}", s.to_string());
      std::vector<Submission> late;
      {
        // Under the lock, so that submit() takes nothing after this (it checks failed_ under it),
        // and before the requests' finishes, so that a reader woken by one sees why.
        std::lock_guard lock(mu_);
        failure_ = s;
        failed_.store(true);
        late.swap(incoming_);  // submitted while the exchange was failing: answered below
      }
      fail_all(s);
      for (Submission& l : late) finish_channel(*l.channel, error_event(s, l.prompt_tokens));
      break;
    }
    for (int64_t id : to_release_[0]) (void)solo_->release(id);
    to_release_[0].clear();
    update_gauges();
    if (stop) break;
  }
}

Status EngineLoop::exchange_with_ranks(bool stop) {
  control_.stop = stop;
  const wire::FrontControl control = std::move(control_);
  control_ = {};
  DSA_ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                       wire::exchange(*procs_, wire::encode(control)));
  for (int32_t r = 1; r < procs_->world_size(); ++r) {
    StatusOr<wire::RankReport> report = wire::decode_report(texts[size_t(r)]);
    if (!report.ok()) return report.status().with_context(fmt::format("dp rank {}'s report", r));
    DSA_RETURN_IF_ERROR(take_report(r, *report));
  }
  if (stop) return ok_status();
  DSA_ASSIGN_OR_RETURN(const wire::Vote vote, wire::vote(*procs_, solo_->has_work(), false));
  // Events a rank holds (a refusal, an abort's finish) go out at the next exchange, at once.
  any_work_ = vote.work || vote.events;
  if (!vote.work) return ok_status();
  DSA_RETURN_IF_ERROR(solo_->step());
  ++steps_[0];
  return ok_status();
}

Status EngineLoop::take_report(int32_t rank, const wire::RankReport& report) {
  const size_t r = size_t(rank);
  if (report.status.accept_histogram.size() != size_t(limits_.num_draft_tokens) + 1) {
    return internal_error(
        fmt::format("dp rank {} reports {} accept-histogram entries; d = {} has {}", rank,
                    report.status.accept_histogram.size(), limits_.num_draft_tokens,
                    limits_.num_draft_tokens + 1));
  }
  for (const wire::RankEvent& e : report.events) {
    if (e.event.kind == RequestEvent::Kind::kFinished) {
      finish_remote(rank, e);
      continue;
    }
    auto it = remote_.find(e.front_id);
    if (it != remote_.end() && it->second->stream()) it->second->push(e.event);
  }
  remote_status_[r] = report.status;
  // What this exchange placed there is not in the report (the rank sent it before reading them).
  remote_load_[r] = report.status.load + pending_cost_[r];
  pending_cost_[r] = 0;
  return ok_status();
}

void EngineLoop::finish_remote(int32_t rank, const wire::RankEvent& e) {
  auto it = remote_.find(e.front_id);
  if (it == remote_.end()) {
    DSA_LOG_WARN("dp rank {} finished request {}, which the front does not know", rank, e.front_id);
    return;
  }
  std::shared_ptr<RequestChannel> c = std::move(it->second);
  remote_.erase(it);
  if (metrics_ != nullptr) {
    engine::RequestFigures f;
    f.ttft_s = e.ttft_s;
    f.e2e_s = e.e2e_s;
    f.tpot_s = e.tpot_s;
    metrics_->request_finished(e.event.finish, e.event.prompt_tokens, e.event.completion_tokens, f);
  }
  log_finish(*c, e.front_id, rank, e.event, e.ttft_s, e.tpot_s, e.accept_length);
  finish_channel(*c, e.event);
}
}  // namespace dsa::server
