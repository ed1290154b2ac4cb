// The in-process form of DeviceCollective (docs/multi_gpu.md): world_size ranks as threads of one
// process whose buffers are host memory (the CPU backend), what `--dp-size N --ep N` runs on the
// CPU and what the expert-parallel tests use. Each call is two meetings of an internal LocalGroup:
// the first publishes every rank's send pointer and checks that all ranks make the same call with
// the same size (its watchdog reports a rank that never comes); then each rank copies what it
// needs from the others' buffers, in rank order; the second meeting keeps every send buffer alive
// and unchanged until every rank has read it.
//
// A rank whose call differs (kind or size) makes the call fail on every rank, with both sizes;
// a failed or timed-out call breaks the group, and every later call on every rank fails too.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "dsa/dist/device_collective.h"
#include "dsa/dist/local_group.h"

namespace dsa::dist {

class LocalDeviceGroup {
 public:
  // InvalidArgument as LocalGroup::create.
  static StatusOr<std::unique_ptr<LocalDeviceGroup>> create(int32_t world_size,
                                                            std::chrono::milliseconds timeout);
  ~LocalDeviceGroup();

  // Rank r's handle (r in [0, world_size)); each thread uses its own rank's handle only.
  DeviceCollective& rank(int32_t r);
  int32_t world_size() const { return meet_->world_size(); }

 private:
  class Rank;
  explicit LocalDeviceGroup(std::unique_ptr<LocalGroup> meet);

  std::unique_ptr<LocalGroup> meet_;
  std::vector<const void*> posted_;  // [world_size] each rank's send buffer for the current call
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace dsa::dist
