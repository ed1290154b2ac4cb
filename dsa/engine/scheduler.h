// What runs each step (SPEC.md §6.1, §6.4): the waiting queue (FIFO), admission into the running
// set when a request slot and pages for the request's whole life are free, and finishing (its page
// row closed). The scheduler is the only one that opens, reserves and closes rows of the model's
// page pool; the forwards only read the page table.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/engine/request.h"
#include "dsa/runtime/page_pool.h"

namespace dsa::engine {

struct SchedulerLimits {
  int32_t max_running = 1;       // B_max: requests decoded together
  int32_t max_context = 1;       // max_ctx: prompt + new tokens of one request
  int32_t rows_per_request = 1;  // n = d + 1; the speculative lookahead is 2n positions (§6.4)
};

class Scheduler {
 public:
  Scheduler(runtime::PagedCacheManager& pages, SchedulerLimits limits);

  // Queues a request (already validated by the engine) and returns its state.
  RequestState& add(GenerationRequest req);

  // Moves waiting requests into the running set, FIFO, while a slot and the pages of the head's
  // whole life (prompt, every new token it may emit and the lookahead) are free.
  // A request that could never fit the pool fails alone (kError, ResourceExhausted); it is
  // returned by the next retire_finished().
  Status admit();

  // Finishes every running request that has a finish reason: its page row is closed, its done time
  // set, and it leaves the running set (returned, in running order, for the caller's figures).
  StatusOr<std::vector<RequestState*>> retire_finished();

  // Finishes a waiting or running request now with kAborted: it leaves the queue or the running
  // set and its page row is closed (between steps: the phases hold the running set only within
  // one). NotFound for an unknown id, FailedPrecondition for one already finished or refused at
  // admission (it finishes with its own error at the next retire_finished()).
  StatusOr<RequestState*> abort(int64_t id);

  // Forgets a finished request (its state was read): the map does not grow with every request.
  // Only retired requests are finished (phase kFinished), so none is freed while still queued.
  Status release(int64_t id);
  // nullptr once released (or never added).
  const RequestState* find(int64_t id) const;
  RequestState* find(int64_t id) {
    return const_cast<RequestState*>(std::as_const(*this).find(id));
  }

  bool has_work() const { return !waiting_.empty() || !running_.empty() || !refused_.empty(); }
  bool has_waiting() const { return !waiting_.empty(); }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_requests() const { return requests_.size(); }
  const std::vector<RequestState*>& running() const { return running_; }
  const std::deque<RequestState*>& waiting() const { return waiting_; }
  const RequestState& request(int64_t id) const { return *requests_.at(id); }

 private:
  runtime::PagedCacheManager& pages_;
  SchedulerLimits limits_;
  int64_t next_id_ = 0;
  std::map<int64_t, std::unique_ptr<RequestState>> requests_;
  std::deque<RequestState*> waiting_;
  std::vector<RequestState*> running_;
  std::vector<RequestState*> refused_;  // failed at admission, not yet retired
};

}  // namespace dsa::engine
