#include <CLI/CLI.hpp>

#include "dsa/core/log.h"

int main(int argc, char** argv) {
  dsa::init_logging();
  CLI::App app{"dsa: DeepSeek Sparse Attention runtime"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
