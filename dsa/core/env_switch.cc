#include "dsa/core/env_switch.h"

#include <cstdlib>
#include <string>

namespace dsa {

StatusOr<std::string_view> env_choice(const char* name,
                                      std::initializer_list<std::string_view> allowed,
                                      std::string_view unset) {
  const char* env = std::getenv(name);
  if (env == nullptr) return unset;
  for (std::string_view a : allowed) {
    if (a == env) return a;
  }
  std::string names;
  for (std::string_view a : allowed) {
    if (!names.empty()) names += ", ";
    names += a;
  }
  return invalid_argument(std::string(name) + " = " + env + ": must be one of " + names +
                          " (or unset: " + std::string(unset) + ")");
}

}  // namespace dsa
