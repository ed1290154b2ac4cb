// Host checks shared by CUDA launchers. No fmt here: nvcc 13 rejects fmt 9's consteval format
// strings, so messages are built with std::string.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dsa/core/status.h"

namespace dsa::cuda {

// InvalidArgument "<op>: <field> must be <alignment>-byte aligned" (vector loads, cp.async).
inline Status require_aligned(std::string_view op, std::string_view field, const void* p,
                              uintptr_t alignment) {
  if (reinterpret_cast<uintptr_t>(p) % alignment == 0) return ok_status();
  return invalid_argument(std::string(op) + ": " + std::string(field) + " must be " +
                          std::to_string(alignment) + "-byte aligned");
}

}  // namespace dsa::cuda
