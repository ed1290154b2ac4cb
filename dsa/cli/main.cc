// The dsa command line. Exceptions stop here: a parse error is one line and exit code 2, any
// other exception (a bug: commands return Status) one line and exit code 1, never terminate().
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <exception>

#include "dsa/cli/check_command.h"
#include "dsa/cli/command_line.h"
#include "dsa/cli/generate_command.h"
#include "dsa/cli/make_checkpoint_command.h"
#include "dsa/cli/perplexity_command.h"
#include "dsa/cli/serve_command.h"
#include "dsa/core/log.h"

int main(int argc, char** argv) {
  try {
    dsa::init_logging();
    dsa::cli::set_command_line(argc, argv);
    CLI::App app{"dsa: DeepSeek Sparse Attention runtime"};
    app.require_subcommand(1);
    int exit_code = 0;
    dsa::cli::add_check_command(app, &exit_code);
    dsa::cli::add_perplexity_command(app, &exit_code);
    dsa::cli::add_generate_command(app, &exit_code);
    dsa::cli::add_serve_command(app, &exit_code);
    dsa::cli::add_make_checkpoint_command(app, &exit_code);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help
      fmt::print(stderr, "dsa: {} (see --help)\n", e.what());
      return 2;
    }
    return exit_code;
  } catch (const std::exception& e) {
    fmt::print(stderr, "dsa: internal error: {}\n", e.what());
  } catch (...) {
    fmt::print(stderr, "dsa: internal error: unknown exception\n");
  }
  return 1;
}
