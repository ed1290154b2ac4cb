// What `dsa generate` writes: the streamed text of a single prompt, each request's result as it
// finishes (text, or one JSON object with its figures — all computed by the engine), the refused
// requests with their errors, and the run's summary (throughput, TTFT / TPOT percentiles, the
// accept-length histogram). Results go to stdout, progress to stderr.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"
#include "dsa/model/memory_plan.h"

namespace dsa::cli {

// Benchmark modes a run's figures depend on: said loudly in every summary (and per request in
// JSON), so a simulated or random-weight number is never mistaken for a real one.
struct BenchmarkModes {
  double simulated_accept_length = 0;  // > 0: --simulate-accept-length
  bool random_weights = false;         // --random-weights
};

// The loud lines of `m` ("accept length SIMULATED: 2.5 ...", "random weights ..."), one each.
std::vector<std::string> benchmark_banner(const BenchmarkModes& m);

// The data-parallel ranks of a run (one for a single engine): what each rank did.
struct DpSummary {
  int32_t world_size = 1;
  std::vector<int64_t> steps;     // [world_size] steps each rank took (equal: they step together)
  std::vector<int64_t> requests;  // [world_size] requests placed on each rank
  // -1: the figures are the whole run's (one engine, or in-process ranks merged). A rank of a run
  // with one process per rank: the figures are this rank's own, and say so.
  int32_t rank = -1;
};

class GenerateReport {
 public:
  GenerateReport(const std::vector<std::string>& prompts, bool json, bool stream,
                 int32_t num_draft_tokens, BenchmarkModes modes = {});

  void start();  // the clock of the run (after loading)
  // Streaming: writes the request's stable new text.
  void stream(const engine::RequestState& r);
  // A request that finished (successfully or with its own error): written now.
  void finished(size_t index, const engine::RequestState& r);
  // A request the engine refused when it was added.
  void refused(size_t index, const Status& why);
  // m, ft, gs: of every rank together (merged); cache: one rank's (each has its own).
  // device_time: --profile-device-time's figures, or null.
  void summary(const engine::EngineMetrics& m, const model::ForwardTiming& ft,
               const runtime::GraphStats& gs, const model::CachePlan& cache, const DpSummary& dp,
               const model::DeviceTime* device_time = nullptr);

  size_t num_written() const { return written_; }
  size_t num_failed() const { return failed_; }

 private:
  void progress() const;

  const std::vector<std::string>& prompts_;
  bool json_, stream_;
  int32_t d_;
  BenchmarkModes modes_;
  size_t streamed_ = 0;  // bytes of the single request's text written
  size_t written_ = 0, failed_ = 0;
  int64_t completion_tokens_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

// The q-quantile (0..1) of `v` by linear interpolation between order statistics; 0 when empty.
double percentile(std::vector<double> v, double q);

}  // namespace dsa::cli
