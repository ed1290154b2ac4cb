// The device error word of SPEC.md §1.3: {code, op_id, row, value}, first error wins (atomic CAS on
// the code). Kernels that detect an out-of-contract value report here and terminate normally; the
// host decodes the word into a Status after the step and clears it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dsa/core/status.h"

namespace dsa::cuda {

struct DeviceErrorWord {
  int32_t code;   // StatusCode, 0 = no error
  int32_t op_id;  // which op (OpId)
  int32_t row;    // first offending row / index
  int32_t value;  // the offending value
};

enum class OpId : int32_t {
  kNone = 0,
  kIndexerWrite,
  kLatentWrite,
  kLogitsSchedule,
  kPagedLogits,
  kRaggedLogits,
  kGather,
  kTopk,
  kSparseMla,
  kModelOp,
  kPagedLogitsTopk,
  kAcceptance,
  kStepCommit,
};

#if defined(__CUDACC__)
__device__ inline void report_device_error(DeviceErrorWord* w, StatusCode code, OpId op,
                                           int32_t row, int32_t value) {
  if (w == nullptr) return;
  if (atomicCAS(&w->code, 0, static_cast<int32_t>(code)) == 0) {
    w->op_id = static_cast<int32_t>(op);
    w->row = row;
    w->value = value;
  }
}
#endif

// The process's error word (allocated on first use) and its host-side check: synchronises the
// current stream, reads the word, clears it, and returns the decoded Status (OK when unset).
// While the current stream captures a graph, or a DeferDeviceErrors lives on this thread, it
// returns OK at once: a step takes no synchronisation; its owner reads the word once at the end.
StatusOr<DeviceErrorWord*> device_error_word();
Status take_device_error(std::string_view context);

class DeferDeviceErrors {
 public:
  DeferDeviceErrors();
  ~DeferDeviceErrors();
  DeferDeviceErrors(const DeferDeviceErrors&) = delete;
  DeferDeviceErrors& operator=(const DeferDeviceErrors&) = delete;
  static bool active();
};

}  // namespace dsa::cuda
