#include "dsa/engine/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "dsa/kernels/common/paged_cache.h"

namespace dsa::engine {

Scheduler::Scheduler(runtime::PagedCacheManager& pages, SchedulerLimits limits)
    : pages_(pages), limits_(limits) {}

RequestState& Scheduler::add(GenerationRequest req) {
  auto r = std::make_unique<RequestState>();
  r->id = next_id_++;
  r->req = std::move(req);
  r->arrived = std::chrono::steady_clock::now();
  RequestState& state = *r;
  waiting_.push_back(r.get());
  requests_[state.id] = std::move(r);
  return state;
}

// A request runs when a request slot and pages for its whole life are free; otherwise it waits
// (FIFO: a later, smaller request does not overtake the head). One that could never fit is refused.
Status Scheduler::admit() {
  const int32_t n = limits_.rows_per_request;
  while (!waiting_.empty() && int32_t(running_.size()) < limits_.max_running) {
    RequestState& r = *waiting_.front();
    // In 64 bits: prompt + max_new_tokens may exceed int32 (the context caps it below).
    const int32_t total = int32_t(std::min<int64_t>(int64_t(r.prompt_len()) + r.req.max_new_tokens,
                                                    limits_.max_context)) +
                          2 * n;
    const int32_t pages = (total + kernels::kPageSize - 1) / kernels::kPageSize;
    if (pages > pages_.num_pages() - 1) {  // it fails alone; the queue moves on
      r.finish = FinishReason::kError;
      r.error = resource_exhausted(fmt::format(
          "request {} needs {} pages of {} tokens ({} positions with the speculative lookahead); "
          "the page pool has {}",
          r.id, pages, kernels::kPageSize, total, pages_.num_pages() - 1));
      refused_.push_back(&r);  // finished (and releasable) once retired
      waiting_.pop_front();
      continue;
    }
    if (pages > pages_.num_free_pages()) break;  // wait for running requests to finish
    DSA_ASSIGN_OR_RETURN(r.req_slot, pages_.open_request());
    DSA_RETURN_IF_ERROR(pages_.reserve(r.req_slot, total));
    r.phase = RequestPhase::kPrefill;
    running_.push_back(&r);
    waiting_.pop_front();
  }
  return ok_status();
}

StatusOr<std::vector<RequestState*>> Scheduler::retire_finished() {
  std::vector<RequestState*> done = std::move(refused_);
  refused_.clear();
  for (RequestState* r : done) {
    r->phase = RequestPhase::kFinished;
    r->done = std::chrono::steady_clock::now();
  }
  for (auto it = running_.begin(); it != running_.end();) {
    RequestState& r = **it;
    // A finished request still in a launched, unread decode keeps its pages and slot until that
    // decode is read (SPEC.md §6.7): the work done for it there is discarded then.
    if (r.finish == FinishReason::kNone || r.in_flight > 0) {
      ++it;
      continue;
    }
    r.phase = RequestPhase::kFinished;
    r.done = std::chrono::steady_clock::now();
    DSA_RETURN_IF_ERROR(pages_.close_request(r.req_slot));
    done.push_back(&r);
    it = running_.erase(it);
  }
  return done;
}

StatusOr<RequestState*> Scheduler::abort(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return not_found(fmt::format("request {}: no such request", id));
  RequestState& r = *it->second;
  if (r.phase == RequestPhase::kFinished || r.finish != FinishReason::kNone) {
    return failed_precondition(
        fmt::format("request {}: already finished ({})", id, finish_reason_name(r.finish)));
  }
  if (r.phase == RequestPhase::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), &r));
  } else {
    DSA_RETURN_IF_ERROR(pages_.close_request(r.req_slot));
    running_.erase(std::find(running_.begin(), running_.end(), &r));
  }
  r.finish = FinishReason::kAborted;
  r.phase = RequestPhase::kFinished;
  r.done = std::chrono::steady_clock::now();
  return &r;
}

const RequestState* Scheduler::find(int64_t id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

Status Scheduler::release(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return not_found(fmt::format("request {}: no such request", id));
  if (it->second->phase != RequestPhase::kFinished) {
    return failed_precondition(fmt::format("request {}: not finished", id));
  }
  requests_.erase(it);
  return ok_status();
}

}  // namespace dsa::engine
