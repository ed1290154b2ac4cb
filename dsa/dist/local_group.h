// An in-process process group: world_size ranks as threads of one process, meeting at a barrier
// per collective. It is the test double of the NCCL group for the step logic (the DP scheduler and
// the (mode, B_pad) agreement run with N ranks in one test), and what a CPU-backend run with
// several ranks would use. The product path on GPUs is NCCL (docs/multi_gpu.md).
//
// Unlike NCCL it diagnoses the caller's bugs instead of hanging: a rank that does not arrive
// within the timeout breaks the group with an error naming the collective, the ranks that arrived
// and the ones missing; a call whose size or op differs from the first arrival's breaks it too.
// A broken group fails every later call on every rank (the ranks are out of step for good).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dsa/dist/collective.h"

namespace dsa::dist {

class LocalGroup {
 public:
  // InvalidArgument for world_size outside [1, 1024] or a timeout <= 0.
  static StatusOr<std::unique_ptr<LocalGroup>> create(int32_t world_size,
                                                      std::chrono::milliseconds timeout);
  ~LocalGroup();

  // Rank r's handle (r in [0, world_size)); each thread uses its own rank's handle only.
  Collective& rank(int32_t r);
  int32_t world_size() const { return static_cast<int32_t>(ranks_.size()); }
  // Collectives completed by every rank.
  int64_t completed() const;

 private:
  class Rank;
  LocalGroup(int32_t world_size, std::chrono::milliseconds timeout);
  Status all_reduce(int32_t rank, std::span<int64_t> values, ReduceOp op);
  Status arrive(int32_t rank, std::span<const int64_t> values, ReduceOp op);
  std::string missing_report(int64_t call) const;

  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t generation_ = 0;        // collectives completed
  std::vector<uint8_t> arrived_;  // [world_size] ranks in the current collective
  int32_t num_arrived_ = 0;
  ReduceOp op_ = ReduceOp::kSum;  // the first arrival's, for the current collective
  std::vector<int64_t> acc_;      // the current collective's partial reduction
  std::vector<int64_t> result_;   // the last completed collective's result
  Status broken_;                 // set once; every later call returns it
};

}  // namespace dsa::dist
