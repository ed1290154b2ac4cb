#include "dsa/runtime/forward_mode.h"

namespace dsa::runtime {

std::string_view mode_name(ForwardMode mode) {
  switch (mode) {
    case ForwardMode::kExtend:
      return "extend";
    case ForwardMode::kDecode:
      return "decode";
    case ForwardMode::kTargetVerify:
      return "target_verify";
    case ForwardMode::kDraftExtend:
      return "draft_extend";
    case ForwardMode::kIdle:
      return "idle";
  }
  return "?";
}

std::string_view model_name(ModelKind model) {
  switch (model) {
    case ModelKind::kTarget:
      return "target";
    case ModelKind::kMtp:
      return "mtp";
  }
  return "?";
}

bool is_uniform(ForwardMode mode) {
  switch (mode) {
    case ForwardMode::kExtend:
      return false;
    case ForwardMode::kDecode:
    case ForwardMode::kTargetVerify:
    case ForwardMode::kDraftExtend:
    case ForwardMode::kIdle:
      return true;
  }
  return false;
}

int32_t uniform_rows_per_request(ForwardMode mode, int32_t num_draft_tokens) {
  switch (mode) {
    case ForwardMode::kDecode:
      return 1;
    case ForwardMode::kTargetVerify:
    case ForwardMode::kDraftExtend:
      return num_draft_tokens + 1;
    case ForwardMode::kExtend:
    case ForwardMode::kIdle:
      return 0;
  }
  return 0;
}

bool uses_cuda_graph(ForwardMode mode) {
  switch (mode) {
    case ForwardMode::kExtend:
      return false;
    case ForwardMode::kDecode:
    case ForwardMode::kTargetVerify:
    case ForwardMode::kDraftExtend:
    case ForwardMode::kIdle:
      return true;
  }
  return false;
}

bool may_use_ragged_indexer(ForwardMode mode) {
  switch (mode) {
    case ForwardMode::kExtend:
      return true;
    case ForwardMode::kDecode:
    case ForwardMode::kTargetVerify:
    case ForwardMode::kDraftExtend:
    case ForwardMode::kIdle:
      return false;
  }
  return false;
}

bool writes_cache(ForwardMode mode) {
  switch (mode) {
    case ForwardMode::kExtend:
    case ForwardMode::kDecode:
    case ForwardMode::kTargetVerify:
    case ForwardMode::kDraftExtend:
      return true;
    case ForwardMode::kIdle:
      return false;
  }
  return false;
}

}  // namespace dsa::runtime
