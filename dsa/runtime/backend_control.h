// What a forward needs from its backend besides memory (runtime/backend_memory.h): a capturable
// stream, deferred device-error checks (no synchronisation inside a step, SPEC.md §1.3, §5), and
// CUDA graphs of whole forwards. The CPU backend has no streams or graphs: the stream and error
// controls are no-ops there and capture is Unimplemented.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"

namespace dsa::runtime {

// CUDA: the calling thread's ops run on a stream dsa created (graphs cannot capture the legacy
// default stream).
Status use_forward_stream(kernels::Backend backend);

// While alive, ops on this thread do not synchronise to read the device error word; the owner
// reads it once with take_device_errors() after the step's results are back.
class DeferDeviceErrors {
 public:
  explicit DeferDeviceErrors(kernels::Backend backend);
  ~DeferDeviceErrors();
  DeferDeviceErrors(const DeferDeviceErrors&) = delete;
  DeferDeviceErrors& operator=(const DeferDeviceErrors&) = delete;

 private:
  std::shared_ptr<void> impl_;
};
// Synchronises and decodes the device error word (OK on the CPU, where ops return errors).
Status take_device_errors(kernels::Backend backend, std::string_view context);

// Where the device error word lives (backend memory, 16 bytes whose first int32 is the code,
// 0 = no error), for a copy that reads it without synchronising (model/overlapped_sampler.h);
// nullptr on the CPU, whose ops return their errors.
StatusOr<const void*> device_error_word_address(kernels::Backend backend);

// Device allocations made so far (0 on the CPU): tests prove none happen inside capture or replay.
uint64_t device_allocation_count(kernels::Backend backend);

// One captured forward, replayed on the current stream.
class ForwardGraph {
 public:
  virtual ~ForwardGraph() = default;
  virtual Status replay() const = 0;
  virtual size_t num_nodes() const = 0;
};
StatusOr<std::unique_ptr<ForwardGraph>> capture_forward_graph(kernels::Backend backend,
                                                              const std::function<Status()>& body);

}  // namespace dsa::runtime
