#include "dsa/cli/command_line.h"

namespace dsa::cli {

namespace {
std::vector<std::string>& stored() {
  static std::vector<std::string> argv;
  return argv;
}
}  // namespace

void set_command_line(int argc, const char* const* argv) { stored().assign(argv, argv + argc); }

const std::vector<std::string>& command_line() { return stored(); }

}  // namespace dsa::cli
