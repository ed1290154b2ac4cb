// `dsa perplexity --model DIR --file TEXT [--dense] [--window N] [--max-windows N] [--json]
// [--progress]`: held-out perplexity of a text. --json prints one object per window as it is
// scored, then a summary object (stdout); the progress line goes to stderr only.
#pragma once

#include <CLI/CLI.hpp>

namespace dsa::cli {
void add_perplexity_command(CLI::App& app, int* exit_code);
}  // namespace dsa::cli
