// N DP ranks in one process (docs/multi_gpu.md): N engines, each over its own model instance of
// the same weights, on N threads, with a LocalGroup between them. It is the CPU stand-in of the
// product path (one process per GPU over NcclGroup) and what the DP tests run: the front places
// each new request on the rank with the least load (dp_placement.h), then every rank steps —
// idle or not — until no rank has work, so every rank runs every agreed forward.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/dist/local_group.h"
#include "dsa/engine/engine.h"

namespace dsa::engine {

// The group's watchdog for the CPU front ends (dsa generate, dsa serve): ranks wait in a
// collective for the slowest rank's forward, and a CPU forward of a large model's prefill chunk
// takes minutes, so it is far above any step; a rank missing a collective this long ends the run
// with an error instead of a hang.
inline constexpr std::chrono::minutes kDpWatchdog{30};

// Where a request went: its rank and its id on that rank's engine.
struct DpRequestId {
  int32_t rank = 0;
  int64_t id = 0;
};

class DpEngineGroup {
 public:
  // One rank per model (each must outlive the group). InvalidArgument for no models, a null
  // model, models with different options (the ranks must agree on d, buckets and capacities),
  // expert-parallel models whose ep_size is not the number of models or whose ep_rank is not
  // their index (model::ModelOptions::ep_*: the caller made their device group), or a timeout
  // <= 0. timeout: the group's watchdog (a rank missing a collective that long
  // breaks the group with an error on every rank instead of hanging).
  // per_rank (may be empty) adjusts each rank's copy of `options` before its engine is made: the
  // server routes each rank's on_tokens / on_finish to that rank's requests.
  static StatusOr<std::unique_ptr<DpEngineGroup>> create(
      std::vector<model::DsaModel*> models, const EngineOptions& options,
      std::chrono::milliseconds timeout,
      const std::function<void(int32_t rank, EngineOptions&)>& per_rank = {});

  int32_t world_size() const { return int32_t(engines_.size()); }
  Engine& engine(int32_t rank) { return *engines_.at(size_t(rank)); }

  // Places the request on the least-loaded rank (ties: the lowest) and queues it there; the
  // engine's add_request errors otherwise. Call between runs (not while run_to_completion runs).
  StatusOr<DpRequestId> add_request(GenerationRequest req);
  // The same on a chosen rank (tests pin work to one rank to keep the others idle).
  StatusOr<DpRequestId> add_request_on(int32_t rank, GenerationRequest req);

  // Every rank steps on its own thread until no rank has work (one all-reduce per step decides
  // that, so all ranks stop after the same step). The first error of any rank, rank named.
  // stop (may be empty; called on every rank's thread, so it must be thread-safe): once it
  // returns true a rank votes "no work" in that all-reduce, so the ranks leave together after the
  // first step in which every rank saw it (a signal asking `dsa generate` to stop).
  Status run_to_completion(const std::function<bool()>& stop = {});
  // Steps each rank took in the last run_to_completion or step_all (equal on every rank when OK).
  const std::vector<int64_t>& steps() const { return steps_; }

  // Whether any rank has work (read between steps, on the caller's thread).
  bool has_work() const;
  // One step of every rank, each on its own thread, for a front that takes arrivals between steps
  // (dsa serve): the caller decides "any rank has work" itself (has_work()), so every rank takes
  // this step, idle ones with padded forwards, and their collectives pair up. Between calls no rank
  // runs: add_request, an engine's abort and release are then safe from the caller's thread.
  // Errors as run_to_completion. The threads are started per call: a CPU step takes milliseconds,
  // starting a thread tens of microseconds.
  Status step_all();

 private:
  DpEngineGroup(std::unique_ptr<dist::LocalGroup> group, std::vector<model::DsaModel*> models,
                const EngineOptions& options,
                const std::function<void(int32_t, EngineOptions&)>& per_rank);
  Status run_rank(int32_t rank, const std::function<bool()>& stop);
  // Runs body(rank) on one thread per rank and returns the first error (rank named).
  Status on_every_rank(const std::function<Status(int32_t)>& body);

  std::unique_ptr<dist::LocalGroup> group_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<int64_t> steps_;
};

}  // namespace dsa::engine
