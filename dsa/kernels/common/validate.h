// Small helpers that build the boundary errors of every op, so messages have one shape:
//   "<op>: <field> = <value>: <rule>"   or   "<op>: <field>[<i>] = <value>: <rule>".
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string_view>

#include "dsa/core/status.h"

namespace dsa::kernels {

inline Status field_error(StatusCode code, std::string_view op, std::string_view field,
                          int64_t value, std::string_view rule) {
  return Status(code, fmt::format("{}: {} = {}: {}", op, field, value, rule));
}

inline Status element_error(StatusCode code, std::string_view op, std::string_view field,
                            int64_t index, int64_t value, std::string_view rule) {
  return Status(code, fmt::format("{}: {}[{}] = {}: {}", op, field, index, value, rule));
}

inline Status require_pointer(std::string_view op, std::string_view field, const void* p) {
  if (p != nullptr) return ok_status();
  return invalid_argument(fmt::format("{}: {} is null", op, field));
}

// value must lie in [lo, hi]; InvalidArgument otherwise.
inline Status require_in(std::string_view op, std::string_view field, int64_t value, int64_t lo,
                         int64_t hi) {
  if (value >= lo && value <= hi) return ok_status();
  return field_error(StatusCode::kInvalidArgument, op, field, value,
                     fmt::format("must be in [{}, {}]", lo, hi));
}

inline Status require_eq(std::string_view op, std::string_view field, int64_t value,
                         int64_t expected) {
  if (value == expected) return ok_status();
  return field_error(StatusCode::kInvalidArgument, op, field, value,
                     fmt::format("must be {}", expected));
}

}  // namespace dsa::kernels
