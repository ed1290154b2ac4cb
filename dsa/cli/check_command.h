// `dsa check`: runs every op of a backend on fresh random inputs at small and at V3.2 shapes,
// compares each result with an independent formulation, prints one line per (op, shape).
#pragma once

#include <CLI/CLI.hpp>

namespace dsa::cli {
// Registers the subcommand; the callback sets *exit_code (non-zero when any check fails).
void add_check_command(CLI::App& app, int* exit_code);
}  // namespace dsa::cli
