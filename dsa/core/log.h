// Logging: a thin layer over spdlog so the rest of the code names one place.
// DSA_LOG_LEVEL=trace|debug|info|warn|error|off sets the level (default info).
#pragma once

#include <spdlog/spdlog.h>

namespace dsa {
void init_logging();
}  // namespace dsa

#define DSA_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define DSA_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define DSA_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define DSA_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
