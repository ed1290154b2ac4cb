// `dsa perplexity --model DIR --file TEXT [--dense]`: held-out perplexity of a text.
#pragma once

#include <CLI/CLI.hpp>

namespace dsa::cli {
void add_perplexity_command(CLI::App& app, int* exit_code);
}  // namespace dsa::cli
