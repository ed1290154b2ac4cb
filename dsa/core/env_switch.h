// Environment switches that pick one of a few named forms (benchmark and side-by-side switches such
// as DSA_FP8_SPLITS): a value outside the named ones is an error naming the switch and the value,
// never a silent default.
#pragma once

#include <initializer_list>
#include <string_view>

#include "dsa/core/status.h"

namespace dsa {

// The value of environment variable `name` when it is one of `allowed` (the returned view is the
// matching element of `allowed`); `unset` when the variable is not set; InvalidArgument
// "NAME = VALUE: must be one of A, B (or unset: UNSET)" otherwise. Reads the environment at
// every call, so a test can switch forms within one process.
StatusOr<std::string_view> env_choice(const char* name,
                                      std::initializer_list<std::string_view> allowed,
                                      std::string_view unset);

}  // namespace dsa
