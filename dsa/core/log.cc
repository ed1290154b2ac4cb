#include "dsa/core/log.h"

#include <spdlog/cfg/helpers.h>

#include <cstdlib>

namespace dsa {
void init_logging() {
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  if (const char* level = std::getenv("DSA_LOG_LEVEL")) spdlog::cfg::helpers::load_levels(level);
}
}  // namespace dsa
