// The server's Prometheus metrics (prometheus-cpp), named in SGLang / vLLM style with the prefix
// "dsa:". The engine thread feeds them (after each step and as each request finishes), the HTTP
// threads count refusals and serialize the registry for GET /metrics; prometheus-cpp's metrics
// are thread-safe. The figures come from the engine (engine_metrics.h); nothing is recomputed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/engine/accept_stats.h"
#include "dsa/engine/engine_metrics.h"
#include "dsa/engine/request.h"

namespace prometheus {
class Registry;
class Gauge;
class Counter;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace dsa::server {

// One data-parallel rank's share, labelled dp_rank (rank 0 alone without --dp-size): with these a
// rank that gets no work, or falls behind, shows; the unlabelled totals are every rank merged.
struct RankFigures {
  int64_t running = 0, waiting = 0;  // requests on this rank's engine
  int64_t kv_pages_used = 0;
  int64_t steps = 0;   // steps this rank has taken: every rank takes every step, so all equal
  int64_t placed = 0;  // requests placed on this rank so far
};

class ServerMetrics {
 public:
  explicit ServerMetrics(int32_t num_draft_tokens);
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Engine thread, after each step.
  void set_requests(int64_t running, int64_t waiting);
  void set_kv_pages(int64_t used, int64_t free);
  // The engine's accept statistics over every speculative step so far (the counters advance by
  // the difference from the last call).
  void set_accept_stats(const engine::AcceptStats& engine_total);
  void add_generation_tokens(int64_t n);
  void set_rank(int32_t rank, const RankFigures& f);
  // Engine thread, once per finished request (figures only for requests that emitted tokens).
  void request_finished(const engine::RequestState& r, const engine::RequestFigures& f);
  // The same from a finish's counts alone (a request of another rank process: its RequestState
  // stays there); f needs only ttft_s, e2e_s and tpot_s.
  void request_finished(engine::FinishReason finish, int64_t prompt_tokens,
                        int64_t completion_tokens, const engine::RequestFigures& f);

  // HTTP threads: a request refused before it reached the engine (reason: "invalid",
  // "queue_full", "unavailable", "too_large", ...).
  void request_rejected(std::string_view reason);

  // The Prometheus text exposition format of every metric.
  std::string serialize() const;

 private:
  prometheus::Counter& counter(prometheus::Family<prometheus::Counter>& f, std::string_view label,
                               std::string_view value);

  int32_t d_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Gauge *running_, *waiting_, *pages_used_, *pages_free_, *accept_length_;
  std::vector<prometheus::Gauge*> per_position_;
  prometheus::Histogram *ttft_, *tpot_, *e2e_;
  prometheus::Counter *prompt_tokens_, *generation_tokens_, *draft_tokens_, *accepted_tokens_,
      *spec_steps_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Family<prometheus::Gauge>*rank_running_, *rank_waiting_, *rank_pages_, *rank_steps_,
      *rank_placed_;
  int64_t drafts_seen_ = 0, accepted_seen_ = 0, steps_seen_ = 0;  // engine thread only
};

}  // namespace dsa::server
