// The dsa command line. Exceptions stop here: CLI parse errors become exit codes.
#include <CLI/CLI.hpp>

#include "dsa/cli/check_command.h"
#include "dsa/cli/generate_command.h"
#include "dsa/cli/perplexity_command.h"
#include "dsa/core/log.h"

int main(int argc, char** argv) {
  dsa::init_logging();
  CLI::App app{"dsa: DeepSeek Sparse Attention runtime"};
  app.require_subcommand(1);
  int exit_code = 0;
  dsa::cli::add_check_command(app, &exit_code);
  dsa::cli::add_perplexity_command(app, &exit_code);
  dsa::cli::add_generate_command(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
