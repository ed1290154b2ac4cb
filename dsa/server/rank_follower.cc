#include "dsa/server/rank_follower.h"

#include <fmt/format.h>

#include <algorithm>

#include "dsa/core/log.h"
#include "dsa/engine/engine_metrics.h"

namespace dsa::server {

RankFollower::RankFollower(model::DsaModel& model, engine::EngineOptions options,
                           dist::Collective& group)
    : model_(model), group_(group), num_draft_tokens_(model.options().num_draft_tokens) {
  options.on_tokens = [this](const engine::RequestState& r, std::span<const int32_t> t) {
    on_tokens(r, t);
  };
  options.on_finish = [this](const engine::RequestState& r) { on_finish(r); };
  engine_ = std::make_unique<engine::Engine>(model, std::move(options), &group);
}

void RankFollower::on_tokens(const engine::RequestState& r, std::span<const int32_t> tokens) {
  auto it = tracked_.find(r.id);
  if (it == tracked_.end() || !it->second.stream) return;
  Tracked& t = it->second;
  if (std::optional<RequestEvent> delta = delta_event(r, tokens, &t.text_sent)) {
    events_.push_back({.front_id = t.front_id, .event = std::move(*delta)});
  }
}

void RankFollower::on_finish(const engine::RequestState& r) {
  auto it = tracked_.find(r.id);
  if (it == tracked_.end()) return;
  const Tracked t = it->second;
  tracked_.erase(it);
  to_release_.push_back(r.id);
  const engine::RequestFigures f = engine::request_figures(r, num_draft_tokens_);
  wire::RankEvent e;
  e.front_id = t.front_id;
  e.event = finished_event(r, t.text_sent);
  e.ttft_s = f.ttft_s;
  e.e2e_s = f.e2e_s;
  e.tpot_s = f.tpot_s;
  e.accept_length = f.accept_length_mean;
  events_.push_back(std::move(e));
}

void RankFollower::apply(const wire::FrontControl& c) {
  for (const wire::PlacedRequest& p : c.admit) {
    if (p.rank != group_.rank()) continue;
    const int32_t prompt_tokens = int32_t(p.req.prompt.size());
    StatusOr<int64_t> id = engine_->add_request(p.req);
    if (id.ok()) {
      tracked_[*id] = Tracked{p.front_id, p.stream, 0};
      continue;
    }
    // Refused here (the front checked the request, but this rank's engine is the judge): the
    // front answers the client with this error.
    events_.push_back({.front_id = p.front_id, .event = error_event(id.status(), prompt_tokens)});
  }
  std::vector<int64_t> aborts;
  for (const auto& [engine_id, t] : tracked_) {
    const bool named = std::find(c.abort.begin(), c.abort.end(), t.front_id) != c.abort.end();
    if (c.abort_all || named) aborts.push_back(engine_id);
  }
  // Each abort finishes the request at once (on_finish), which sends its event.
  for (int64_t id : aborts) {
    if (Status s = engine_->abort(id); !s.ok()) {
      DSA_LOG_WARN("dp rank {}: abort of request {}: {}", group_.rank(), id, s.to_string());
    }
  }
}

wire::RankReport RankFollower::take_report() {
  wire::RankReport r;
  r.events.swap(events_);
  const runtime::PagedCacheManager& pages = model_.pages();
  wire::RankStatus& s = r.status;
  s.load = engine_->load();
  s.running = int64_t(engine_->num_running());
  s.waiting = int64_t(engine_->num_waiting());
  s.kv_pages_used = pages.num_pages() - 1 - pages.num_free_pages();  // page 0: the dummy page
  s.kv_pages_free = pages.num_free_pages();
  s.steps = steps_;
  s.emitted = engine_->metrics().emitted;
  s.accept_histogram = engine_->metrics().accept.histogram();
  return r;
}

Status RankFollower::run() {
  const int32_t me = group_.rank();
  while (true) {
    DSA_ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                         wire::exchange(group_, wire::encode(take_report())));
    DSA_ASSIGN_OR_RETURN(const wire::FrontControl control, wire::decode_control(texts[0]));
    // The front stops only once no request of any rank is in flight: nothing is left unsent.
    if (control.stop) return ok_status();
    apply(control);
    DSA_ASSIGN_OR_RETURN(const wire::Vote vote,
                         wire::vote(group_, engine_->has_work(), !events_.empty()));
    if (vote.work) {
      if (Status s = engine_->step(); !s.ok()) {
        return s.with_context(fmt::format("dp rank {}: step {}", me, steps_ + 1));
      }
      ++steps_;
    }
    for (int64_t id : to_release_) (void)engine_->release(id);
    to_release_.clear();
  }
}

}  // namespace dsa::server
