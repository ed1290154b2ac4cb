// `dsa generate`: text generation with continuous batching and MTP speculative decoding.
#pragma once

#include <CLI/CLI.hpp>

namespace dsa::cli {
void add_generate_command(CLI::App& app, int* exit_code);
}  // namespace dsa::cli
