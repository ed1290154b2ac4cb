#include "dsa/server/server_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <sstream>

#include "dsa/server/openai_response.h"

namespace dsa::server {

namespace {

// Latency buckets in seconds: TTFT and end-to-end span a loaded CPU run (minutes) down to a GPU
// (milliseconds); the per-token time is finer.
const prometheus::Histogram::BucketBoundaries kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 60};
const prometheus::Histogram::BucketBoundaries kTpotBuckets = {
    0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
    0.075, 0.1,   0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1,    2.5};
const prometheus::Histogram::BucketBoundaries kE2eBuckets = {
    0.1, 0.25, 0.5, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 300, 600};

// The finish_reason label: OpenAI's name ("error" for a request that never finished).
std::string_view finish_label(engine::FinishReason r) {
  const std::string_view name = openai_finish_reason(r);
  return name.empty() ? "error" : name;
}

}  // namespace

ServerMetrics::ServerMetrics(int32_t num_draft_tokens)
    : d_(num_draft_tokens), registry_(std::make_shared<prometheus::Registry>()) {
  using namespace prometheus;
  Registry& r = *registry_;
  auto gauge = [&](const char* name, const char* help) -> Gauge& {
    return BuildGauge().Name(name).Help(help).Register(r).Add({});
  };
  auto counter = [&](const char* name, const char* help) -> Counter& {
    return BuildCounter().Name(name).Help(help).Register(r).Add({});
  };
  auto histogram = [&](const char* name, const char* help,
                       const Histogram::BucketBoundaries& b) -> Histogram& {
    return BuildHistogram().Name(name).Help(help).Register(r).Add({}, b);
  };
  running_ = &gauge("dsa:num_requests_running", "Requests in the running batch");
  waiting_ = &gauge("dsa:num_requests_waiting", "Requests queued for the running batch");
  pages_used_ = &gauge("dsa:kv_pages_used", "KV cache pages held by requests");
  pages_free_ = &gauge("dsa:kv_pages_free", "KV cache pages free");
  accept_length_ = &gauge("dsa:spec_accept_length",
                          "Mean tokens committed per speculative step (a + 1; 1 without drafts)");
  auto& per_position = BuildGauge()
                           .Name("dsa:spec_decode_per_position_acceptance")
                           .Help("Fraction of steps accepting draft j among those accepting j - 1")
                           .Register(r);
  for (int32_t j = 1; j <= d_; ++j) {
    per_position_.push_back(&per_position.Add({{"position", std::to_string(j)}}));
  }
  ttft_ = &histogram("dsa:time_to_first_token_seconds", "Arrival to the first token", kTtftBuckets);
  tpot_ = &histogram("dsa:time_per_output_token_seconds",
                     "First token to finish, per output token after the first", kTpotBuckets);
  e2e_ = &histogram("dsa:e2e_request_latency_seconds", "Arrival to finish", kE2eBuckets);
  prompt_tokens_ = &counter("dsa:prompt_tokens_total", "Prompt tokens of finished requests");
  generation_tokens_ = &counter("dsa:generation_tokens_total", "Tokens generated");
  draft_tokens_ =
      &counter("dsa:spec_decode_num_draft_tokens_total", "Draft tokens proposed for verification");
  accepted_tokens_ = &counter("dsa:spec_decode_num_accepted_tokens_total", "Draft tokens accepted");
  spec_steps_ = &counter("dsa:spec_decode_num_steps_total", "Speculative (verify) steps");
  finished_ = &BuildCounter()
                   .Name("dsa:num_requests_total")
                   .Help("Finished requests by finish reason (stop, length, abort, error)")
                   .Register(r);
  rejected_ = &BuildCounter()
                   .Name("dsa:num_requests_rejected_total")
                   .Help("Requests refused before reaching the engine, by reason")
                   .Register(r);
  auto rank_family = [&](const char* name, const char* help) {
    return &BuildGauge().Name(name).Help(help).Register(r);
  };
  rank_running_ = rank_family("dsa:dp_rank_num_requests_running", "Running requests of a DP rank");
  rank_waiting_ = rank_family("dsa:dp_rank_num_requests_waiting", "Waiting requests of a DP rank");
  rank_pages_ = rank_family("dsa:dp_rank_kv_pages_used", "KV cache pages in use on a DP rank");
  rank_steps_ = rank_family("dsa:dp_rank_steps",
                            "Steps a DP rank has taken (every rank takes every step: all equal)");
  rank_placed_ = rank_family("dsa:dp_rank_requests_placed", "Requests placed on a DP rank by load");
  // Every reason from the start: a rate over a series that appears late reads wrong.
  for (auto reason : {"stop", "length", "abort", "error"}) {
    this->counter(*finished_, "finish_reason", reason);
  }
}

ServerMetrics::~ServerMetrics() = default;

prometheus::Counter& ServerMetrics::counter(prometheus::Family<prometheus::Counter>& f,
                                            std::string_view label, std::string_view value) {
  return f.Add({{std::string(label), std::string(value)}});  // Add returns the existing one
}

void ServerMetrics::set_requests(int64_t running, int64_t waiting) {
  running_->Set(double(running));
  waiting_->Set(double(waiting));
}

void ServerMetrics::set_kv_pages(int64_t used, int64_t free) {
  pages_used_->Set(double(used));
  pages_free_->Set(double(free));
}

void ServerMetrics::set_accept_stats(const engine::AcceptStats& total) {
  const std::vector<int64_t>& h = total.histogram();
  int64_t accepted = 0;
  for (size_t a = 0; a < h.size(); ++a) accepted += int64_t(a) * h[a];
  const int64_t steps = total.steps(), drafts = steps * d_;
  if (steps > steps_seen_) spec_steps_->Increment(double(steps - steps_seen_));
  if (drafts > drafts_seen_) draft_tokens_->Increment(double(drafts - drafts_seen_));
  if (accepted > accepted_seen_) accepted_tokens_->Increment(double(accepted - accepted_seen_));
  steps_seen_ = steps;
  drafts_seen_ = drafts;
  accepted_seen_ = accepted;
  accept_length_->Set(total.mean_accept_length());
  const std::vector<double> per = total.per_position_acceptance();
  for (size_t j = 0; j < per.size() && j < per_position_.size(); ++j) per_position_[j]->Set(per[j]);
}

void ServerMetrics::add_generation_tokens(int64_t n) {
  if (n > 0) generation_tokens_->Increment(double(n));
}

void ServerMetrics::set_rank(int32_t rank, const RankFigures& f) {
  const prometheus::Labels label{{"dp_rank", std::to_string(rank)}};
  rank_running_->Add(label).Set(double(f.running));  // Add returns the existing one
  rank_waiting_->Add(label).Set(double(f.waiting));
  rank_pages_->Add(label).Set(double(f.kv_pages_used));
  rank_steps_->Add(label).Set(double(f.steps));
  rank_placed_->Add(label).Set(double(f.placed));
}

void ServerMetrics::request_finished(const engine::RequestState& r,
                                     const engine::RequestFigures& f) {
  request_finished(r.finish, r.prompt_len(), int64_t(r.output.size()), f);
}

void ServerMetrics::request_finished(engine::FinishReason finish, int64_t prompt_tokens,
                                     int64_t completion_tokens, const engine::RequestFigures& f) {
  counter(*finished_, "finish_reason", finish_label(finish)).Increment();
  prompt_tokens_->Increment(double(prompt_tokens));
  if (completion_tokens == 0) return;  // no token: no latency figures
  ttft_->Observe(f.ttft_s);
  e2e_->Observe(f.e2e_s);
  if (completion_tokens > 1) tpot_->Observe(f.tpot_s);
}

void ServerMetrics::request_rejected(std::string_view reason) {
  counter(*rejected_, "reason", reason).Increment();
}

std::string ServerMetrics::serialize() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace dsa::server
