// `dsa serve`: the OpenAI-compatible HTTP server over the engine (dsa/server).
#pragma once

#include <CLI/CLI.hpp>

namespace dsa::cli {
void add_serve_command(CLI::App& app, int* exit_code);
}  // namespace dsa::cli
