// Host checks shared by CUDA launchers. No fmt here: nvcc 13 rejects fmt 9's consteval format
// strings, so messages are built with std::string.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "dsa/core/status.h"

namespace dsa::cuda {

inline bool is_aligned(const void* p, uintptr_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// InvalidArgument "<op>: <field> must be <alignment>-byte aligned" (vector loads, cp.async).
inline Status require_aligned(std::string_view op, std::string_view field, const void* p,
                              uintptr_t alignment) {
  if (is_aligned(p, alignment)) return ok_status();
  return invalid_argument(std::string(op) + ": " + std::string(field) + " must be " +
                          std::to_string(alignment) + "-byte aligned");
}

// The same for pointers that share one rule and one message: `fields` names them together
// ("k and pool.data"); the first misaligned one fails the call.
inline Status require_aligned(std::string_view op, std::string_view fields,
                              std::initializer_list<const void*> pointers, uintptr_t alignment) {
  for (const void* p : pointers) {
    if (!is_aligned(p, alignment)) return require_aligned(op, fields, p, alignment);
  }
  return ok_status();
}

}  // namespace dsa::cuda
