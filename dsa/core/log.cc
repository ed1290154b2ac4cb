#include "dsa/core/log.h"

#include <spdlog/cfg/helpers.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace dsa {
void init_logging() {
  // Logs go to stderr: stdout carries results (text, --json lines) that programs parse.
  spdlog::set_default_logger(spdlog::stderr_color_mt("dsa"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  if (const char* level = std::getenv("DSA_LOG_LEVEL")) spdlog::cfg::helpers::load_levels(level);
}
}  // namespace dsa
