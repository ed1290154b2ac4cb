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

EngineLoop::EngineLoop(model::DsaModel& model, engine::EngineOptions options,
                       EngineLoopOptions limits, ServerMetrics* metrics)
    : model_(model), limits_(limits), metrics_(metrics) {
  options.on_tokens = [this](const engine::RequestState& r, std::span<const int32_t> t) {
    on_tokens(r, t);
  };
  options.on_finish = [this](const engine::RequestState& r) { on_finish(r); };
  engine_ = std::make_unique<engine::Engine>(model, std::move(options));
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
      cv_.wait(lock, [&] {
        return !incoming_.empty() || stopping_ || (engine_->has_work() && !failed_.load());
      });
      incoming.swap(incoming_);
      stopping = stopping_;
      deadline = deadline_;
    }
    admit(std::move(incoming));
    abort_cancelled(stopping && std::chrono::steady_clock::now() >= deadline);
    if (engine_->has_work() && !failed_.load()) {
      Status s;
      try {
        s = engine_->step();
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
    for (int64_t id : to_release_) (void)engine_->release(id);
    to_release_.clear();
    update_gauges();
    if (stopping && active_.empty()) {
      std::lock_guard lock(mu_);
      if (incoming_.empty()) break;
    }
  }
}

void EngineLoop::admit(std::vector<Submission> incoming) {
  for (Submission& s : incoming) {
    const int32_t prompt_tokens = int32_t(s.req.prompt.size());
    StatusOr<int64_t> id = engine_->add_request(std::move(s.req));
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
    s.channel->engine_id_ = *id;
    active_[*id] = std::move(s.channel);
  }
}

void EngineLoop::abort_cancelled(bool all) {
  std::vector<int64_t> ids;
  for (const auto& [id, c] : active_) {
    if (all || c->cancelled()) ids.push_back(id);
  }
  for (int64_t id : ids) {
    if (Status s = engine_->abort(id); !s.ok()) {
      DSA_LOG_WARN("abort of request {}: {}", id, s.to_string());
    }
  }
}

void EngineLoop::fail_all(const Status& why) {
  std::vector<int64_t> ids;
  for (const auto& [id, c] : active_) ids.push_back(id);
  for (int64_t id : ids) {
    auto it = active_.find(id);
    if (it == active_.end()) continue;
    std::shared_ptr<RequestChannel> c = it->second;
    active_.erase(it);         // first: on_finish (called by abort) then leaves the channel alone
    (void)engine_->abort(id);  // frees its pages if the engine can still do so
    RequestEvent e;
    e.kind = RequestEvent::Kind::kFinished;
    e.finish = engine::FinishReason::kError;
    e.error = why;
    finish_channel(*c, std::move(e));
  }
}

void EngineLoop::finish_channel(RequestChannel& c, RequestEvent e) {
  --in_flight_;  // first: a reader woken by the finish sees the slot free
  c.push(std::move(e));
}

void EngineLoop::on_tokens(const engine::RequestState& r, std::span<const int32_t> tokens) {
  auto it = active_.find(r.id);
  if (it == active_.end() || !it->second->stream()) return;
  RequestChannel& c = *it->second;
  const size_t stable = r.stable_text_size();
  if (stable <= c.text_sent_) return;  // nothing final yet (a partial character, a stop prefix)
  RequestEvent e;
  e.text = r.text.text().substr(c.text_sent_, stable - c.text_sent_);
  e.num_tokens = int32_t(tokens.size());
  c.text_sent_ = stable;
  c.push(std::move(e));
}

void EngineLoop::on_finish(const engine::RequestState& r) {
  auto it = active_.find(r.id);
  if (it == active_.end()) return;  // fail_all answers the channel itself
  std::shared_ptr<RequestChannel> c = std::move(it->second);
  active_.erase(it);
  to_release_.push_back(r.id);
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
    DSA_LOG_INFO("{} (request {}): {} prompt tokens, no completion, {}{}", c->tag_, r.id,
                 r.prompt_len(), engine::finish_reason_name(r.finish),
                 r.finish == engine::FinishReason::kError ? ": " + r.error.to_string() : "");
  } else {
    DSA_LOG_INFO(
        "{} (request {}): {} prompt + {} completion tokens, ttft {:.1f} ms, tpot {:.1f} ms, "
        "accept length {:.2f}, {}{}",
        c->tag_, r.id, r.prompt_len(), r.output.size(), 1000 * f.ttft_s, 1000 * f.tpot_s,
        f.accept_length_mean, engine::finish_reason_name(r.finish),
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
  metrics_->set_requests(int64_t(engine_->num_running()), int64_t(engine_->num_waiting() + queued));
  const runtime::PagedCacheManager& pages = model_.pages();
  const int64_t usable = pages.num_pages() - 1;  // page 0 is the reserved dummy page
  metrics_->set_kv_pages(usable - pages.num_free_pages(), pages.num_free_pages());
  const engine::EngineMetrics& m = engine_->metrics();
  metrics_->set_accept_stats(m.accept);
  metrics_->add_generation_tokens(m.emitted - emitted_seen_);
  emitted_seen_ = m.emitted;
}

}  // namespace dsa::server
