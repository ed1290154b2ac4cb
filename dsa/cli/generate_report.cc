#include "dsa/cli/generate_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>

namespace dsa::cli {

namespace {

using nlohmann::json;

// Text is valid UTF-8 already (the engine's TextStream); `replace` keeps a dump from ever
// throwing on a byte that is not.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The modes as JSON fields, added to every object the report writes.
void add_modes(json& j, const BenchmarkModes& m) {
  if (m.simulated_accept_length > 0) j["accept_length_simulated"] = m.simulated_accept_length;
  if (m.random_weights) j["random_weights"] = true;
}

}  // namespace

std::vector<std::string> benchmark_banner(const BenchmarkModes& m) {
  std::vector<std::string> out;
  if (m.simulated_accept_length > 0) {
    out.push_back(fmt::format(
        "accept length SIMULATED: {} (--simulate-accept-length: every draft and verify ran, the "
        "accepted count per step was drawn, not decided by the target)",
        m.simulated_accept_length));
  }
  if (m.random_weights) {
    out.push_back(
        "random weights (--random-weights: benchmark mode, the text is meaningless; no "
        "checkpoint was read)");
  }
  return out;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

GenerateReport::GenerateReport(const std::vector<std::string>& prompts, bool json, bool stream,
                               int32_t num_draft_tokens, BenchmarkModes modes)
    : prompts_(prompts), json_(json), stream_(stream), d_(num_draft_tokens), modes_(modes) {}

void GenerateReport::start() {
  t0_ = std::chrono::steady_clock::now();
  if (stream_) {
    fmt::print("{}", prompts_[0]);
    std::fflush(stdout);
  }
}

void GenerateReport::stream(const engine::RequestState& r) {
  const size_t stable = r.stable_text_size();
  if (stable <= streamed_) return;
  std::fwrite(r.text.text().data() + streamed_, 1, stable - streamed_, stdout);
  std::fflush(stdout);
  streamed_ = stable;
}

void GenerateReport::progress() const {
  if (stream_ || json_) return;
  fmt::print(stderr, "\r[{}/{} requests done, {} tokens]", written_, prompts_.size(),
             completion_tokens_);
}

void GenerateReport::finished(size_t index, const engine::RequestState& r) {
  ++written_;
  if (r.finish == engine::FinishReason::kError) {
    refused(index, r.error);
    --written_;  // refused() counts it
    return;
  }
  completion_tokens_ += int64_t(r.output.size());
  const engine::RequestFigures f = engine::request_figures(r, d_);
  if (json_) {
    json j = {{"index", index},
              {"prompt_tokens", r.prompt_len()},
              {"completion_tokens", r.output.size()},
              {"finish_reason", std::string(engine::finish_reason_name(r.finish))},
              {"text", r.text.text()},
              {"token_ids", r.output},
              {"ttft_s", f.ttft_s},
              {"e2e_latency_s", f.e2e_s},
              {"tpot_s", f.tpot_s},
              {"tokens_per_s", f.tokens_per_s},
              {"accept_length_mean", f.accept_length_mean},
              {"per_position_acceptance", f.per_position_acceptance},
              {"accept_histogram", f.accept_histogram}};
    add_modes(j, modes_);
    fmt::print("{}\n", dump(j));
  } else if (stream_) {
    stream(r);
  } else {
    fmt::print("--- request {} ({} tokens, {}) ---\n{}{}\n", index, r.output.size(),
               engine::finish_reason_name(r.finish), prompts_[index], r.text.text());
  }
  std::fflush(stdout);
  progress();
}

void GenerateReport::refused(size_t index, const Status& why) {
  ++written_;
  ++failed_;
  if (json_) {
    fmt::print("{}\n", dump(json{{"index", index}, {"error", why.to_string()}}));
    std::fflush(stdout);
  } else {
    fmt::print(stderr, "dsa generate: request {}: {}\n", index, why.to_string());
  }
  progress();
}

namespace {

// Where a step's host time goes, per step (ms): the model's phases of every forward and read
// (ForwardTiming) and the engine's own parts (EngineMetrics::times); `other` is the step's time
// that neither names (plan agreement, batch assembly, the engine's bookkeeping between calls).
// `wait` is the host blocked on the GPU, so the host's own work is the rest.
json host_breakdown(const engine::EngineMetrics& m, const model::ForwardTiming& ft, double steps) {
  auto per = [&](double s) { return 1000.0 * s / steps; };
  const engine::EngineMetrics::StepTimes& t = m.times;
  const double named = ft.build_s + ft.stage_s + ft.launch_s + ft.wait_s + ft.collect_s +
                       ft.sample_s + t.schedule_s + t.accept_s + t.emit_s + t.retire_s;
  return json{{"build", per(ft.build_s)},
              {"stage", per(ft.stage_s)},
              {"launch", per(ft.launch_s)},
              {"wait", per(ft.wait_s)},
              {"collect", per(ft.collect_s)},
              {"sample", per(ft.sample_s)},
              {"schedule", per(t.schedule_s)},
              {"accept", per(t.accept_s)},
              {"emit", per(t.emit_s)},
              {"retire", per(t.retire_s)},
              {"other", per(t.total_s - named)},
              {"step", per(t.total_s)},
              {"host_without_wait", per(t.total_s - ft.wait_s)}};
}

// One row per kind of forward (model, mode; ForwardTiming::index i) that `fill(i, &row)` keeps
// (returns true), each named by its model and mode.
json forward_kinds(const std::function<bool(size_t, json*)>& fill) {
  json kinds = json::array();
  for (runtime::ModelKind model : {runtime::ModelKind::kTarget, runtime::ModelKind::kMtp}) {
    for (runtime::ForwardMode mode : runtime::kAllForwardModes) {
      json row = {{"model", runtime::model_name(model)}, {"mode", runtime::mode_name(mode)}};
      if (fill(model::ForwardTiming::index(model, mode), &row)) kinds.push_back(std::move(row));
    }
  }
  return kinds;
}

// --profile-device-time: the decode steps' device time per step, split into the forwards' and
// the rest (acceptance, sampling, drafts, copies between forwards, and the GPU idle inside the
// step), the time between decode steps (the stream's work outside them, such as prefill forwards,
// and idle), and each kind of forward's mean time.
json device_time_json(const model::DeviceTime& t) {
  const double n = double(std::max<int64_t>(1, t.steps.spans));
  json kinds = forward_kinds([&](size_t i, json* row) {
    const runtime::DeviceTimeline::Total& k = t.by_kind[i];
    if (k.spans == 0) return false;
    (*row)["forwards"] = k.spans;
    (*row)["ms_each"] = k.ms / double(k.spans);
    return true;
  });
  return json{{"decode_steps", t.steps.spans},
              {"step_ms", t.steps.ms / n},
              {"forwards_ms_per_step", t.steps.inner_ms / n},
              {"other_ms_per_step", (t.steps.ms - t.steps.inner_ms) / n},
              {"between_steps_ms", t.steps.spans > 1 ? t.steps.between_ms / (n - 1) : 0.0},
              {"kinds", kinds}};
}

}  // namespace

void GenerateReport::summary(const engine::EngineMetrics& m, const model::ForwardTiming& ft,
                             const runtime::GraphStats& gs, const model::CachePlan& cache,
                             const DpSummary& dp, const model::DeviceTime* device_time) {
  const double secs = seconds_since(t0_);
  const double steps = double(std::max<int64_t>(1, m.steps));
  const double tokens_per_s = secs > 0 ? double(m.emitted) / secs : 0;
  const double ms_per_token = 1000.0 * secs / double(std::max<int64_t>(1, m.emitted));
  auto ms = [](double s) { return 1000.0 * s; };
  // A rank of its own process reports its own requests; otherwise the run's.
  const size_t requests = dp.rank >= 0 ? size_t(dp.requests.at(size_t(dp.rank))) : prompts_.size();
  if (json_) {
    json j = {{"summary",
               {{"requests", requests},
                {"requests_failed", failed_},
                {"tokens", m.emitted},
                {"seconds", secs},
                {"tokens_per_s", tokens_per_s},
                {"ms_per_output_token", ms_per_token},
                {"tpot_ms", ms(m.mean_tpot_s())},
                {"ttft_ms_p50", ms(percentile(m.ttft_s, 0.5))},
                {"ttft_ms_p90", ms(percentile(m.ttft_s, 0.9))},
                {"ttft_ms_p99", ms(percentile(m.ttft_s, 0.99))},
                {"tpot_ms_p50", ms(percentile(m.tpot_s, 0.5))},
                {"tpot_ms_p90", ms(percentile(m.tpot_s, 0.9))},
                {"tpot_ms_p99", ms(percentile(m.tpot_s, 0.99))},
                {"accept_length_mean", m.mean_accept_length()},
                {"accept_histogram", m.accept.histogram()},
                {"per_position_acceptance", m.per_position_acceptance()},
                {"steps", m.steps},
                {"overlapped_decodes", m.overlapped_launches},
                {"device_commits", m.device_commits},
                {"overlapped_spec_steps", m.shifted_steps},
                {"host_logit_rows", m.host_logit_rows},
                {"forwards", ft.forwards},
                {"graph_replays", ft.replays},
                {"host_ms_per_step", 1000.0 * ft.host_s / steps},
                {"forward_ms_per_step", 1000.0 * ft.total_s / steps},
                {"graphs", gs.graphs},
                {"graph_nodes", gs.nodes},
                {"graph_capture_s", gs.capture_s}}}};
    add_modes(j["summary"], modes_);
    // Per kind of forward: how many ran and their mean time alone (each ends synchronised).
    json kinds = forward_kinds([&](size_t i, json* row) {
      const model::ForwardTiming::Kind& k = ft.by_kind[i];
      if (k.forwards == 0) return false;
      (*row)["forwards"] = k.forwards;
      (*row)["waited"] = k.waited;
      (*row)["ms_each"] = 1000.0 * k.total_s / double(k.forwards);
      (*row)["ms_per_step"] = 1000.0 * k.total_s / steps;
      return true;
    });
    j["summary"]["forward_kinds"] = kinds;
    j["summary"]["step_ms"] = 1000.0 * secs / steps;
    j["summary"]["host_breakdown_ms_per_step"] = host_breakdown(m, ft, steps);
    j["summary"]["readbacks_per_step"] = double(m.readbacks) / steps;
    j["summary"]["readback_bytes_per_step"] = double(m.readback_bytes) / steps;
    j["summary"]["staged_bytes_per_step"] = double(m.staged_bytes) / steps;
    j["summary"]["dp"] = {{"world_size", dp.world_size},
                          {"steps_per_rank", dp.steps},
                          {"requests_per_rank", dp.requests}};
    if (dp.rank >= 0) j["summary"]["dp"]["rank"] = dp.rank;
    j["summary"]["kv_cache"] = {{"pages", cache.num_pages},
                                {"page_bytes", cache.page_bytes},
                                {"tokens", cache.tokens()},
                                {"bytes", cache.pool_bytes()},
                                {"whole_context_requests", cache.whole_context_requests()},
                                {"budget_bytes", cache.budget_bytes},
                                {"available_bytes", cache.available_bytes},
                                {"weight_bytes", cache.weight_bytes},
                                {"output_bytes", cache.output_bytes},
                                {"mem_fraction_static", cache.mem_fraction_static}};
    if (device_time != nullptr) j["summary"]["device_time"] = device_time_json(*device_time);
    const std::vector<std::string> banner = benchmark_banner(modes_);
    if (!banner.empty()) j["summary"]["warnings"] = banner;
    fmt::print("{}\n", dump(j));
    return;
  }
  fmt::print("\n");
  if (dp.rank >= 0) {
    fmt::print("[dp rank {} of {} (a process of its own): this rank's requests and figures]\n",
               dp.rank, dp.world_size);
  }
  for (const std::string& line : benchmark_banner(modes_)) fmt::print("[{}]\n", line);
  fmt::print(
      "[{} requests, {} tokens in {:.2f} s: {:.1f} tokens/s, {:.1f} ms per output token, mean "
      "TTFT {:.0f} ms]\n",
      requests, m.emitted, secs, tokens_per_s, ms_per_token, ms(m.mean_ttft_s()));
  fmt::print(
      "[{} steps, {} forwards ({} graph replays): host {:.3f} ms per step launching, {:.3f} "
      "ms per step in forwards; {:.2f} ms per output token per request]\n",
      m.steps, ft.forwards, ft.replays, 1000.0 * ft.host_s / steps, 1000.0 * ft.total_s / steps,
      ms(m.mean_tpot_s()));
  fmt::print(
      "[TTFT ms p50 {:.1f} p90 {:.1f} p99 {:.1f}; TPOT ms p50 {:.2f} p90 {:.2f} p99 {:.2f}]\n",
      ms(percentile(m.ttft_s, 0.5)), ms(percentile(m.ttft_s, 0.9)), ms(percentile(m.ttft_s, 0.99)),
      ms(percentile(m.tpot_s, 0.5)), ms(percentile(m.tpot_s, 0.9)), ms(percentile(m.tpot_s, 0.99)));
  if (d_ > 0) {
    fmt::print("[d = {}: mean accept length {:.3f}{} over {} verify steps; per-position acceptance",
               d_, m.mean_accept_length(),
               modes_.simulated_accept_length > 0
                   ? fmt::format(" (SIMULATED: {})", modes_.simulated_accept_length)
                   : std::string(),
               m.verify_steps);
    for (double x : m.per_position_acceptance()) fmt::print(" {:.3f}", x);
    fmt::print("; accept histogram (a = 0..{})", d_);
    for (int64_t c : m.accept.histogram()) fmt::print(" {}", c);
    fmt::print("]\n");
  }
  fmt::print("[{}{}]\n", dp.world_size > 1 ? "per rank: " : "", model::describe_cache_plan(cache));
  if (dp.world_size > 1) {
    fmt::print("[dp {} ranks: steps per rank", dp.world_size);
    for (int64_t n : dp.steps) fmt::print(" {}", n);
    fmt::print("; requests per rank");
    for (int64_t n : dp.requests) fmt::print(" {}", n);
    fmt::print("]\n");
  }
  if (device_time != nullptr) {
    const json t = device_time_json(*device_time);
    fmt::print(
        "[device time: {} decode steps, {:.3f} ms per step = forwards {:.3f} + the rest {:.3f}; "
        "{:.3f} ms between steps; per forward:",
        t["decode_steps"].get<int64_t>(), t["step_ms"].get<double>(),
        t["forwards_ms_per_step"].get<double>(), t["other_ms_per_step"].get<double>(),
        t["between_steps_ms"].get<double>());
    for (const json& k : t["kinds"]) {
      fmt::print(" {} {} {:.3f} ms ({})", k["model"].get<std::string>(),
                 k["mode"].get<std::string>(), k["ms_each"].get<double>(),
                 k["forwards"].get<int64_t>());
    }
    fmt::print("]\n");
  }
  if (failed_ > 0) fmt::print("[{} of {} requests failed]\n", failed_, prompts_.size());
}

}  // namespace dsa::cli
