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

// Where a request went: its rank and its id on that rank's engine.
struct DpRequestId {
  int32_t rank = 0;
  int64_t id = 0;
};

class DpEngineGroup {
 public:
  // One rank per model (each must outlive the group). InvalidArgument for no models, a null
  // model, models with different options (the ranks must agree on d, buckets and capacities),
  // or a timeout <= 0. timeout: the group's watchdog (a rank missing a collective that long
  // breaks the group with an error on every rank instead of hanging).
  static StatusOr<std::unique_ptr<DpEngineGroup>> create(std::vector<model::DsaModel*> models,
                                                         const EngineOptions& options,
                                                         std::chrono::milliseconds timeout);

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
  // Steps each rank took in the last run_to_completion (equal on every rank when it is OK).
  const std::vector<int64_t>& steps() const { return steps_; }

 private:
  DpEngineGroup(std::unique_ptr<dist::LocalGroup> group, std::vector<model::DsaModel*> models,
                const EngineOptions& options);
  Status run_rank(int32_t rank, const std::function<bool()>& stop);

  std::unique_ptr<dist::LocalGroup> group_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<int64_t> steps_;
};

}  // namespace dsa::engine
