// `dsa serve` in a build without cpp-httplib or prometheus-cpp (DSA_HAVE_SERVER off): the command
// exists, so `dsa serve ...` says why it cannot run instead of "unknown subcommand".
#include <fmt/format.h>

#include "dsa/cli/serve_command.h"

namespace dsa::cli {

void add_serve_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (not in this build)");
  cmd->allow_extras();
  cmd->callback([exit_code] {
    fmt::print(stderr,
               "dsa serve: Unimplemented: not in this build (cpp-httplib and prometheus-cpp were "
               "not found at configure time; scripts/setup.sh installs them)\n");
    *exit_code = 1;
  });
}

}  // namespace dsa::cli
