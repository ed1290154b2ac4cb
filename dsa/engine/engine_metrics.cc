#include "dsa/engine/engine_metrics.h"

#include <algorithm>
#include <chrono>

namespace dsa::engine {

namespace {

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / double(v.size());
}

}  // namespace

RequestFigures request_figures(const RequestState& r, int32_t num_draft_tokens) {
  RequestFigures f;
  const double outputs = double(r.output.size());
  f.ttft_s = seconds(r.first_token - r.arrived);
  f.e2e_s = seconds(r.done - r.arrived);
  f.tpot_s =
      seconds(r.done - r.first_token) / double(r.output.size() > 1 ? r.output.size() - 1 : 1);
  f.tokens_per_s = f.e2e_s > 0 ? outputs / f.e2e_s : 0.0;
  const AcceptStats accept = AcceptStats::of_lengths(num_draft_tokens, r.accept_lengths);
  f.accept_length_mean = accept.mean_accept_length();
  f.per_position_acceptance = accept.per_position_acceptance();
  f.accept_histogram = accept.histogram();
  return f;
}

void EngineMetrics::merge_rank(const EngineMetrics& other) {
  steps = std::max(steps, other.steps);
  verify_steps += other.verify_steps;
  host_logit_rows += other.host_logit_rows;
  readbacks += other.readbacks;
  readback_bytes += other.readback_bytes;
  staged_bytes += other.staged_bytes;
  overlapped_launches += other.overlapped_launches;
  device_commits += other.device_commits;
  shifted_steps += other.shifted_steps;
  times.schedule_s += other.times.schedule_s;
  times.accept_s += other.times.accept_s;
  times.emit_s += other.times.emit_s;
  times.retire_s += other.times.retire_s;
  times.total_s += other.times.total_s;
  emitted += other.emitted;
  accept.merge(other.accept);
  ttft_s.insert(ttft_s.end(), other.ttft_s.begin(), other.ttft_s.end());
  tpot_s.insert(tpot_s.end(), other.tpot_s.begin(), other.tpot_s.end());
}

double EngineMetrics::mean_ttft_s() const { return mean(ttft_s); }
double EngineMetrics::mean_tpot_s() const { return mean(tpot_s); }

}  // namespace dsa::engine
