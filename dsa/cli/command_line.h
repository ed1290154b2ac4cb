// The command line dsa was started with, kept by main(): a multi-process run (`--dp-processes`)
// starts each rank as this same binary with these same arguments (dist/launcher.h), and CLI11's
// callbacks do not see argv.
#pragma once

#include <string>
#include <vector>

namespace dsa::cli {

void set_command_line(int argc, const char* const* argv);
const std::vector<std::string>& command_line();  // argv[0] included; empty if never set

}  // namespace dsa::cli
