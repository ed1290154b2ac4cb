#include "dsa/cuda/error_word.h"

#include <fmt/format.h>

#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/graph.h"
#include "dsa/cuda/stream.h"

namespace dsa::cuda {

namespace {
std::string_view op_name(int32_t op) {
  switch (static_cast<OpId>(op)) {
    case OpId::kNone:
      return "none";
    case OpId::kIndexerWrite:
      return "indexer_write";
    case OpId::kLatentWrite:
      return "latent_write";
    case OpId::kLogitsSchedule:
      return "logits_schedule";
    case OpId::kPagedLogits:
      return "paged_logits";
    case OpId::kRaggedLogits:
      return "ragged_logits";
    case OpId::kGather:
      return "gather";
    case OpId::kTopk:
      return "topk";
    case OpId::kSparseMla:
      return "sparse_mla";
    case OpId::kModelOp:
      return "model op";
    case OpId::kPagedLogitsTopk:
      return "paged_logits_topk";
    case OpId::kAcceptance:
      return "acceptance";
    case OpId::kStepCommit:
      return "step_commit";
  }
  return "unknown op";
}
}  // namespace

StatusOr<DeviceErrorWord*> device_error_word() {
  static DeviceErrorWord* word = nullptr;
  if (word == nullptr) {
    if (stream_capturing()) {
      return failed_precondition(
          "device error word: first use inside a graph capture (warm up before capturing)");
    }
    DSA_CUDA_RETURN_IF_ERROR(cudaMalloc(&word, sizeof(DeviceErrorWord)));
    DSA_CUDA_RETURN_IF_ERROR(cudaMemset(word, 0, sizeof(DeviceErrorWord)));
  }
  return word;
}

namespace {
thread_local int g_defer_depth = 0;
}

DeferDeviceErrors::DeferDeviceErrors() { ++g_defer_depth; }
DeferDeviceErrors::~DeferDeviceErrors() { --g_defer_depth; }
bool DeferDeviceErrors::active() { return g_defer_depth > 0; }

Status take_device_error(std::string_view context) {
  if (DeferDeviceErrors::active() || stream_capturing()) return ok_status();
  DSA_ASSIGN_OR_RETURN(DeviceErrorWord * word, device_error_word());
  DeviceErrorWord host{};
  DSA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&host, word, sizeof(host), cudaMemcpyDeviceToHost, current_stream()));
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(current_stream()));
  if (host.code == 0) return ok_status();
  DSA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(word, 0, sizeof(DeviceErrorWord), current_stream()));
  return Status(static_cast<StatusCode>(host.code),
                fmt::format("{}: device check in {} failed at index {} (value {})", context,
                            op_name(host.op_id), host.row, host.value));
}

}  // namespace dsa::cuda
