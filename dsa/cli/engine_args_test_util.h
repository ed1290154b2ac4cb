// Parses a command line with the engine options of `dsa generate` (add_engine_options and
// add_dp_option) and resolves it against the tiny model's config.json, as the commands do.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "dsa/cli/engine_args.h"
#include "dsa/model/model_config.h"

namespace dsa::cli {

inline const model::ModelConfig& tiny_config() {
  static const model::ModelConfig config = [] {
    auto c = model::load_model_config(std::string(DSA_SOURCE_DIR) + "/models/tiny-dsa/config.json");
    DSA_CHECK(c.ok());
    return *c;
  }();
  return config;
}

// The flags after the command name; --model models/tiny-dsa is added first unless they name one. A
// CLI11 refusal becomes an InvalidArgument with its text.
inline StatusOr<EngineArgs> parse_engine_args(const std::vector<std::string>& flags) {
  CLI::App app;
  EngineArgs a;
  add_engine_options(app, a);
  add_dp_option(app, a);
  std::vector<std::string> args = {"dsa"};
  if (std::find(flags.begin(), flags.end(), "--model") == flags.end()) {
    args.insert(args.end(), {"--model", "models/tiny-dsa"});
  }
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  try {
    app.parse(int(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return invalid_argument(e.what());
  }
  return a;
}

inline StatusOr<EngineSetup> resolve(const std::vector<std::string>& flags) {
  DSA_ASSIGN_OR_RETURN(EngineArgs a, parse_engine_args(flags));
  return resolve_engine_args(a, tiny_config(), 0);
}

}  // namespace dsa::cli
